// Package dispatch executes commands: it loads an aggregate's stream, folds it
// into state, asks the pure domain to decide, and appends the decided events
// with the stream's version as the expected version. When another writer got
// there first it reloads and decides again; only a real clash (a name taken,
// a command that no longer applies) reaches the caller.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Context is who issues a command, and in which request.
type Context struct {
	Actor domain.Actor
	// Person is the user behind the actor ("" for agents and system jobs).
	Person    string
	RequestID string
	// Via is how the command reached the control plane when not by the
	// REST API itself: "mcp" for the MCP server's tool calls. It is set
	// in process only (never from a header) and recorded on the events and
	// in the audit log.
	Via string
	// CommandID makes retries of the same request decide the same ids; a new
	// one is made when empty.
	CommandID string
	// IfVersion, when above zero, is the stream version the caller saw (an
	// If-Match): the command is decided only on that version and appended
	// only while the stream still has it; otherwise it fails with
	// ErrStale and is not decided again.
	IfVersion int
}

// ErrStale is the failure of a command whose IfVersion is not the stream's
// version (HTTP 412).
var ErrStale = errors.New("precondition failed")

// Result is what a command did.
type Result struct {
	// Version is the stream's version after the command.
	Version int
	Events  []domain.Event
	// Last is where the command's last event is in commit order (zero when
	// the command changed nothing): a reader that waits for the projections
	// to pass it reads its own write.
	Last eventstore.Cursor
}

// Config configures a Handler.
type Config struct {
	Store  *eventstore.Store
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Attempts bounds how often a command is decided again after losing a
	// race for its stream (default 5).
	Attempts int
	// Observe, when set, learns each command's type and outcome (ok,
	// invalid, not_found, conflict, forbidden, stale, error), for the metrics.
	Observe func(command, outcome string)
}

// Handler executes commands.
type Handler struct {
	cfg Config
}

// New returns a handler.
func New(cfg Config) (*Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("command: no event store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = 5
	}
	return &Handler{cfg: cfg}, nil
}

type aggregate interface{ Apply(domain.Event) }

// timedAggregate is an aggregate whose state keeps when events happened.
type timedAggregate interface {
	ApplyAt(domain.Event, time.Time)
}

func apply(state aggregate, e domain.Event, at time.Time) {
	if t, ok := state.(timedAggregate); ok {
		t.ApplyAt(e, at)
		return
	}
	state.Apply(e)
}

// SnapshotEvery is how many events a stream grows past its snapshot before
// a new snapshot is kept, at the least: a new snapshot also waits until the
// events after the last one hold as many bytes as it did. A snapshot rewrites
// the whole state, so taking one every SnapshotEvery events would make the
// bytes stored per change grow with the state (a service's variables); this
// way snapshots cost at most as many bytes as the events themselves, and
// deciding a command reads the snapshot and a tail no larger than it.
const SnapshotEvery = 100

// snapshotSchema versions the JSON encoding of the aggregates' states; a
// snapshot of another version is ignored. Bump it whenever an aggregate's
// state changes shape.
const snapshotSchema = 4

// load folds a stream into fresh state, starting from its snapshot. debt is
// the bytes of the events folded after the snapshot less the snapshot's own
// size: a new snapshot is worth keeping once it is not negative.
func load[A aggregate](ctx context.Context, h *Handler, stream, orgID string, fresh func() A) (state A, version, base, debt int, err error) {
	state = fresh()
	snap, ok, err := h.cfg.Store.LoadSnapshot(ctx, stream)
	if err != nil {
		h.cfg.Logger.Warn("reading a snapshot; folding the whole stream", "stream", stream, "err", err)
		ok = false
	}
	if ok && snap.Schema == snapshotSchema {
		if orgID != "" && snap.OrgID != "" && snap.OrgID != orgID {
			return state, 0, 0, 0, fmt.Errorf("%w: %s", domain.ErrNotFound, stream)
		}
		if err := json.Unmarshal(snap.State, state); err != nil {
			h.cfg.Logger.Warn("ignoring an unreadable snapshot", "stream", stream, "err", err)
			state = fresh()
		} else {
			version, base, debt = snap.Version, snap.Version, -len(snap.State)
		}
	}
	events, err := h.cfg.Store.ReadStream(ctx, stream, version)
	if err != nil {
		return state, 0, 0, 0, err
	}
	for _, e := range events {
		// One organisation never reaches another's aggregates.
		if orgID != "" && e.OrgID != "" && e.OrgID != orgID {
			return state, 0, 0, 0, fmt.Errorf("%w: %s", domain.ErrNotFound, stream)
		}
		d, err := domain.Decode(e.Type, e.SchemaVersion, e.Payload)
		if err != nil {
			return state, 0, 0, 0, fmt.Errorf("loading %s: %w", stream, err)
		}
		apply(state, d, e.OccurredAt)
		version = e.StreamVersion
		debt += len(e.Payload)
	}
	return state, version, base, debt, nil
}

// run is the load-decide-append loop shared by every aggregate.
func run[A aggregate](ctx context.Context, h *Handler, c Context, cmd any, stream, orgID string, fresh func() A,
	decide func(A, domain.Meta) (domain.Decision, error)) (res Result, err error) {
	if h.cfg.Observe != nil {
		defer func() { h.cfg.Observe(commandName(cmd), Outcome(err)) }()
	}
	if c.CommandID == "" {
		c.CommandID = uuid.NewString()
	}
	var lastErr error
	for attempt := 0; attempt < h.cfg.Attempts; attempt++ {
		state, version, base, debt, err := load(ctx, h, stream, orgID, fresh)
		if err != nil {
			return Result{}, err
		}
		if c.IfVersion > 0 && version != c.IfVersion {
			return Result{}, fmt.Errorf("%w: %s is at version %d, not %d", ErrStale, stream, version, c.IfVersion)
		}
		m := domain.Meta{Actor: c.Actor, Person: c.Person, CommandID: c.CommandID, Now: h.cfg.Now().UTC()}
		dec, err := decide(state, m)
		if err != nil {
			return Result{}, err
		}
		if len(dec.Events) == 0 {
			return Result{Version: version}, nil
		}
		req := eventstore.AppendRequest{
			StreamID: stream, ExpectedVersion: version, OrgID: orgID,
			Actor: c.Actor, RequestID: c.RequestID, Via: c.Via, OccurredAt: m.Now,
		}
		for _, e := range dec.Events {
			typ, v, payload, err := domain.Encode(e)
			if err != nil {
				return Result{}, err
			}
			// The last line of defence of "no input can stop the
			// projections": PostgreSQL stores no NUL in text or jsonb, so an
			// event carrying one would stop every projection for good.
			if HasEscapedNUL(payload) {
				return Result{}, fmt.Errorf("%w: a text field of %s contains a NUL character (U+0000), which cannot be stored", domain.ErrInvalid, typ)
			}
			req.Records = append(req.Records, eventstore.Record{Type: typ, SchemaVersion: v, Payload: payload})
			debt += len(payload)
		}
		for _, cl := range dec.Claims {
			req.Claims = append(req.Claims, eventstore.Claim{Scope: cl.Scope, Name: cl.Name})
		}
		for _, cl := range dec.Releases {
			req.Releases = append(req.Releases, eventstore.Claim{Scope: cl.Scope, Name: cl.Name})
		}
		appended, err := h.cfg.Store.Append(ctx, req)
		if err == nil {
			if appended.Version-base >= SnapshotEvery && debt >= 0 {
				h.snapshot(ctx, stream, orgID, state, dec.Events, m.Now, appended.Version)
			}
			return Result{Version: appended.Version, Events: dec.Events, Last: appended.Last}, nil
		}
		if errors.Is(err, eventstore.ErrNameTaken) {
			return Result{}, fmt.Errorf("%w: the name is already taken", domain.ErrConflict)
		}
		if !errors.Is(err, eventstore.ErrConflict) {
			return Result{}, err
		}
		if c.IfVersion > 0 {
			return Result{}, fmt.Errorf("%w: %s changed from version %d meanwhile", ErrStale, stream, c.IfVersion)
		}
		lastErr = err
		h.cfg.Logger.Debug("lost a race for a stream, deciding again", "stream", stream, "attempt", attempt+1)
	}
	return Result{}, fmt.Errorf("%w: %s changed %d times while deciding: %v", domain.ErrConflict, stream, h.cfg.Attempts, lastErr)
}

// snapshot keeps the state after the command's events: the decided state
// with those events folded in (deciding never changes the state it is given;
// the domain decides on copies). Snapshots are a cache: a failure to keep one
// is logged and costs only reading more events next time.
func (h *Handler) snapshot(ctx context.Context, stream, orgID string, state aggregate, events []domain.Event, at time.Time, version int) {
	for _, e := range events {
		apply(state, e, at)
	}
	b, err := json.Marshal(state)
	if err != nil {
		h.cfg.Logger.Warn("encoding a snapshot", "stream", stream, "err", err)
		return
	}
	snap := eventstore.Snapshot{StreamID: stream, OrgID: orgID, Version: version, Schema: snapshotSchema, State: b}
	if err := h.cfg.Store.SaveSnapshot(ctx, snap); err != nil {
		h.cfg.Logger.Warn("saving a snapshot", "stream", stream, "err", err)
	}
}

// Instance executes an instance settings command.
func (h *Handler) Instance(ctx context.Context, c Context, cmd domain.SetAgentAutoUpgrade) (Result, error) {
	return run(ctx, h, c, cmd, domain.InstanceStream(), "", domain.NewInstance,
		func(s *domain.Instance, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// User executes a user command (registration, password, tokens).
func (h *Handler) User(ctx context.Context, c Context, userID string, cmd domain.UserCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.UserStream(userID), "", domain.NewUser,
		func(s *domain.User, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// Organisation executes an organisation command.
func (h *Handler) Organisation(ctx context.Context, c Context, orgID string, cmd domain.OrganisationCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.OrgStream(orgID), orgID, domain.NewOrganisation,
		func(s *domain.Organisation, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// Cluster executes a cluster command.
func (h *Handler) Cluster(ctx context.Context, c Context, orgID, clusterID string, cmd domain.ClusterCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.ClusterStream(clusterID), orgID, domain.NewCluster,
		func(s *domain.Cluster, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// Project executes a project command.
func (h *Handler) Project(ctx context.Context, c Context, orgID, projectID string, cmd domain.ProjectCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.ProjectStream(projectID), orgID, domain.NewProject,
		func(s *domain.Project, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// Deployment executes a deployment command (stage reports, verdicts).
func (h *Handler) Deployment(ctx context.Context, c Context, orgID, deploymentID string, cmd domain.DeploymentCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.DeploymentStream(deploymentID), orgID, domain.NewDeployment,
		func(s *domain.DeploymentAggregate, m domain.Meta) (domain.Decision, error) {
			return s.Decide(deploymentID, cmd, m)
		})
}

// Build executes a build command (queue, start, agents' reports, cancel,
// timeout) on the build's own stream.
func (h *Handler) Build(ctx context.Context, c Context, orgID, buildID string, cmd domain.BuildCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.BuildStream(buildID), orgID, domain.NewBuild,
		func(s *domain.Build, m domain.Meta) (domain.Decision, error) { return s.Decide(buildID, cmd, m) })
}

// BuildState reads a build's state as its stream has it now.
func (h *Handler) BuildState(ctx context.Context, orgID, buildID string) (*domain.Build, error) {
	b, _, _, _, err := load(ctx, h, domain.BuildStream(buildID), orgID, domain.NewBuild)
	return b, err
}

// Delivery records a push webhook delivery on its own stream; recording it
// again changes nothing (Result.Events is empty: a redelivery).
func (h *Handler) Delivery(ctx context.Context, c Context, orgID, deliveryID string, cmd domain.DeliveryCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.DeliveryStream(deliveryID), orgID, domain.NewWebhookDelivery,
		func(s *domain.WebhookDelivery, m domain.Meta) (domain.Decision, error) {
			return s.Decide(deliveryID, cmd, m)
		})
}

// Server records a server's connections on its own stream.
func (h *Handler) Server(ctx context.Context, c Context, orgID, serverID string, cmd domain.ServerCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.ServerStream(serverID), orgID, domain.NewServerLink,
		func(s *domain.ServerLink, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// Mesh executes a command of an organisation's mesh.
func (h *Handler) Mesh(ctx context.Context, c Context, orgID string, cmd domain.MeshCommand) (Result, error) {
	return run(ctx, h, c, cmd, domain.MeshStream(orgID), orgID, domain.NewMesh,
		func(s *domain.Mesh, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// MeshState reads an organisation's mesh as its stream has it now.
func (h *Handler) MeshState(ctx context.Context, orgID string) (*domain.Mesh, error) {
	m, _, _, _, err := load(ctx, h, domain.MeshStream(orgID), orgID, domain.NewMesh)
	return m, err
}

// MeshRevision records a cluster's mesh revision when it changed.
func (h *Handler) MeshRevision(ctx context.Context, c Context, cmd domain.RecordMeshRevision) (Result, error) {
	return run(ctx, h, c, cmd, domain.MeshRevisionStream(cmd.ClusterID), cmd.OrgID, domain.NewMeshRevisions,
		func(s *domain.MeshRevisions, m domain.Meta) (domain.Decision, error) { return s.Decide(cmd, m) })
}

// commandName is a command's type name, such as CreateProject.
func commandName(cmd any) string {
	t := reflect.TypeOf(cmd)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "unknown"
	}
	return t.Name()
}

// Outcome names how a command ended: ok, or the kind of refusal.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, domain.ErrInvalid):
		return "invalid"
	case errors.Is(err, domain.ErrNotFound):
		return "not_found"
	case errors.Is(err, domain.ErrConflict):
		return "conflict"
	case errors.Is(err, domain.ErrForbidden):
		return "forbidden"
	case errors.Is(err, ErrStale):
		return "stale"
	}
	return "error"
}

// HasEscapedNUL reports whether a JSON document holds a string with U+0000
// (which encoding/json writes as \u0000): it walks the escapes, so an escaped
// backslash followed by "u0000" is not mistaken for one.
func HasEscapedNUL(doc []byte) bool {
	for i := 0; i < len(doc); i++ {
		if doc[i] != '\\' || i+1 >= len(doc) {
			continue
		}
		if doc[i+1] == 'u' && i+5 < len(doc) && string(doc[i+2:i+6]) == "0000" {
			return true
		}
		i++ // skip the escaped character
	}
	return false
}
