// Package reactions turns what happened into what must happen next. A
// reaction is a checkpointed subscription to the events (exactly once across
// replicas, like the projections) that issues commands through the same
// command handler as the API, and keeps durable timers in PostgreSQL that the
// jobs leader fires when they are due. Nothing else turns events into
// commands.
//
// The reactions of a deployment's lifecycle live here:
//   - a compiled revision opens the stream of each deployment it carries
//     (delivering); a held service's deployment fails at once with the reason;
//   - a newer deployment of the same service and environment supersedes the
//     one before it;
//   - the progress deadline (counted from the start of the new pods) fails a
//     release that did not become ready, and the stall timeout flags a
//     deployment whose stages did not move;
//   - an open change set expires after the approval TTL.
//
// Commands are idempotent (delivering twice, superseding a finished
// deployment, expiring a decided change set change nothing), so a batch that
// is handled again after a crash issues nothing twice in effect; timers are
// written in the subscription's transaction, with its checkpoint.
package reactions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/reactions/reactstore"
)

// SubscriptionName is the stable name of the reactions' subscription.
const SubscriptionName = "reactions"

// Defaults of the timings the product describes.
const (
	DefaultApprovalTTL  = 72 * time.Hour
	DefaultStallTimeout = 10 * time.Minute
)

// Timer kinds.
const (
	timerDeadline = "progress-deadline"
	timerStall    = "stall"
	timerApproval = "approval"
	// timerMeshRotate asks a mesh node for a new key on schedule.
	timerMeshRotate = "mesh-rotate"
)

// Config configures the reactions.
type Config struct {
	Store    *eventstore.Store
	Commands *dispatch.Handler
	Logger   *slog.Logger
	// Now is the clock that fires timers; time.Now when nil. Timers are due
	// at times taken from the events, which the command handler's clock set.
	Now func() time.Time
	// ApprovalTTL is how long a change set stays open (default 72 h).
	ApprovalTTL time.Duration
	// StallTimeout flags a deployment without stage progress (default 10 min).
	StallTimeout time.Duration
	BatchSize    int
	// BuildsPerCluster bounds the builds a cluster runs at once (default 2);
	// BuildTimeout stops a build that runs longer (default 30 min).
	BuildsPerCluster int
	BuildTimeout     time.Duration
	// Upgrades configures the reactions of agent upgrades (upgrades.go).
	Upgrades Upgrades
	// Documents reads revision n of an environment's desired state, whole
	// (projections.DocumentAt: the revision events record only changes);
	// required. Reactions read it, they never write projections.
	Documents func(ctx context.Context, q eventstore.Querier, envID string, n int) (desiredstate.Document, error)
	// Reads are the read models the reactions decide on
	// (projections.ReadModels{}); required.
	Reads ReadModels
}

// ReadModels are the reads of the read models the reactions decide on
// (projections.ReadModels implements them; reactions never write the read
// models, nor write SQL of their own: their own tables are reactstore's).
type ReadModels interface {
	// HeldDeployment returns the latest deployment of a service in an
	// environment when it has not been delivered yet ("" when none).
	HeldDeployment(ctx context.Context, q eventstore.Querier, envID, serviceID string) (deploymentID, releaseID string, err error)
	// ProgressDeadlineSeconds returns a service's progress deadline (0: the
	// default, also for a service that is not there).
	ProgressDeadlineSeconds(ctx context.Context, q eventstore.Querier, serviceID string) (int, error)
	// AgentAutoUpgrade reports whether automatic agent upgrade is on.
	AgentAutoUpgrade(ctx context.Context, q eventstore.Querier) (bool, error)
	// UpgradingServers returns the servers whose agent upgrade is in progress.
	UpgradingServers(ctx context.Context, q eventstore.Querier) ([]string, error)
	// Delivery returns the command that opens a deployment's stream, for a
	// deployment of orgID on clusterID (domain.ErrNotFound otherwise).
	Delivery(ctx context.Context, q eventstore.Querier, orgID, clusterID, deploymentID string) (domain.DeliverDeployment, error)
}

// Reactions runs the reactions.
type Reactions struct {
	cfg  Config
	pool *pgxpool.Pool
	// sends are the agent upgrades this replica sent (upgrades.go).
	sends upgradeSends
}

// New returns the reactions.
func New(cfg Config) (*Reactions, error) {
	if cfg.Store == nil || cfg.Commands == nil || cfg.Documents == nil || cfg.Reads == nil {
		return nil, errors.New("reactions: needs an event store, a command handler, a reader of revision documents and of the read models")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = DefaultApprovalTTL
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.BuildsPerCluster <= 0 {
		cfg.BuildsPerCluster = DefaultBuildsPerCluster
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = domain.DefaultBuildTimeout
	}
	return &Reactions{cfg: cfg, pool: cfg.Store.Pool()}, nil
}

// Settle is how long the reactions let events gather while busy
// (eventstore.Subscription.Settle): in a burst of thousands of changes they
// react in batches of many, and a single change waits for nothing.
const Settle = 25 * time.Millisecond

// Subscription returns the reactions' subscription.
func (r *Reactions) Subscription(wake <-chan struct{}) eventstore.Subscription {
	return eventstore.Subscription{Name: SubscriptionName, BatchSize: r.cfg.BatchSize, Wake: wake, Handle: r.handle, Settle: Settle}
}

// Run keeps reacting until ctx ends.
func (r *Reactions) Run(ctx context.Context, wake <-chan struct{}) error {
	return r.cfg.Store.Run(ctx, r.Subscription(wake))
}

// CatchUp handles every event visible now (tests, tools).
func (r *Reactions) CatchUp(ctx context.Context) (int, error) {
	sub := r.Subscription(nil)
	if err := eventstore.EnsureCheckpoint(ctx, r.pool, sub.Name); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := r.cfg.Store.Step(ctx, sub)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// timerOp sets (due non-zero) or clears a timer.
type timerOp struct {
	key, kind, org string
	due            time.Time
	payload        timerPayload
	// keep leaves an existing timer as it is.
	keep bool
}

type timerPayload struct {
	DeploymentID string `json:"deploymentId,omitempty"`
	ProjectID    string `json:"projectId,omitempty"`
	ChangeSetID  string `json:"changeSetId,omitempty"`
	ServerID     string `json:"serverId,omitempty"`
	UpgradeID    string `json:"upgradeId,omitempty"`
	BuildID      string `json:"buildId,omitempty"`
	ClusterID    string `json:"clusterId,omitempty"`
	Node         string `json:"node,omitempty"`
}

func actor() dispatch.Context {
	return dispatch.Context{Actor: domain.System("reactions")}
}

func (r *Reactions) handle(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	var ops []timerOp
	for _, e := range events {
		d, err := domain.Decode(e.Type, e.SchemaVersion, e.Payload)
		if err != nil {
			// The projections report an event nobody can read; a reaction
			// has nothing to do with it.
			r.cfg.Logger.Error("reactions: skipping an undecodable event", "position", e.Position, "type", e.Type, "err", err)
			continue
		}
		more, err := r.react(ctx, tx, e, d)
		if err != nil {
			return fmt.Errorf("reacting to event %d (%s): %w", e.Position, e.Type, err)
		}
		ops = append(ops, more...)
	}
	return writeTimers(ctx, tx, ops)
}

// react issues the commands an event calls for and returns the timer changes.
func (r *Reactions) react(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.Event) ([]timerOp, error) {
	c := actor()
	c.RequestID = e.RequestID
	if ops, handled, err := r.reactUpgrade(ctx, tx, e, d, c); handled {
		return ops, err
	}
	if ops, handled, err := r.reactBuild(ctx, tx, e, d, c); handled {
		return ops, err
	}
	if ops, handled, err := r.reactMesh(ctx, e, d, c); handled {
		return ops, err
	}
	switch d := d.(type) {
	case domain.RevisionCompiled:
		return nil, r.deliver(ctx, tx, e, d, c)
	case domain.DeploymentRequested:
		if d.Supersedes == "" || d.Supersedes == d.DeploymentID {
			return nil, nil
		}
		_, err := r.cfg.Commands.Deployment(ctx, c, e.OrgID, d.Supersedes, domain.SupersedeDeployment{By: d.DeploymentID})
		return nil, ignoreDecided(err, r.cfg.Logger, "superseding deployment "+d.Supersedes)
	case domain.DeploymentDelivering:
		return []timerOp{r.stallTimer(e.OrgID, d.DeploymentID, d.At)}, nil
	case domain.DeploymentStageReached:
		ops := []timerOp{r.stallTimer(e.OrgID, d.DeploymentID, d.At)}
		if d.Stage == domain.StatusStarting {
			deadline, err := progressDeadline(ctx, tx, d.DeploymentID)
			if err != nil {
				return nil, err
			}
			ops = append(ops, timerOp{key: timerDeadline + ":" + d.DeploymentID, kind: timerDeadline, org: e.OrgID,
				due: d.At.Add(deadline), payload: timerPayload{DeploymentID: d.DeploymentID}, keep: true})
		}
		return ops, nil
	case domain.DeploymentSucceeded:
		return clearDeployment(d.DeploymentID), nil
	case domain.DeploymentFailed:
		return clearDeployment(d.DeploymentID), nil
	case domain.DeploymentSuperseded:
		return clearDeployment(d.DeploymentID), nil
	case domain.ChangeSetOpened:
		_, project := domain.StreamID(e.StreamID)
		return []timerOp{{key: timerApproval + ":" + d.ChangeSetID, kind: timerApproval, org: e.OrgID,
			due: e.OccurredAt.Add(r.cfg.ApprovalTTL), payload: timerPayload{ProjectID: project, ChangeSetID: d.ChangeSetID}}}, nil
	case domain.ChangeSetApproved:
		return []timerOp{{key: timerApproval + ":" + d.ChangeSetID}}, nil
	case domain.ChangeSetRejected:
		return []timerOp{{key: timerApproval + ":" + d.ChangeSetID}}, nil
	case domain.ChangeSetExpired:
		return []timerOp{{key: timerApproval + ":" + d.ChangeSetID}}, nil
	}
	return nil, nil
}

func (r *Reactions) stallTimer(org, deploymentID string, at time.Time) timerOp {
	return timerOp{key: timerStall + ":" + deploymentID, kind: timerStall, org: org, due: at.Add(r.cfg.StallTimeout),
		payload: timerPayload{DeploymentID: deploymentID}}
}

func clearDeployment(id string) []timerOp {
	return []timerOp{{key: timerDeadline + ":" + id}, {key: timerStall + ":" + id}}
}

// deliver opens the stream of each deployment a revision carries.
func (r *Reactions) deliver(ctx context.Context, tx pgx.Tx, e eventstore.Event, rc domain.RevisionCompiled, c dispatch.Context) error {
	// The event records what changed; the whole document is rebuilt (and
	// checked against the revision's hash).
	doc, err := r.cfg.Documents(ctx, tx, rc.EnvironmentID, rc.Number)
	if err != nil {
		r.cfg.Logger.Error("reactions: a revision's document cannot be read", "environment", rc.EnvironmentID, "revision", rc.Number, "err", err)
		return nil
	}
	for _, s := range doc.Services {
		cmd := domain.DeliverDeployment{ProjectID: rc.ProjectID, EnvironmentID: rc.EnvironmentID, ServiceID: s.ID,
			ClusterID: doc.Environment.ClusterID, Revision: rc.Number}
		var depID string
		switch {
		case s.Release != nil && s.Release.DeploymentID != "":
			depID, cmd.ReleaseID = s.Release.DeploymentID, s.Release.ID
		case s.Held:
			// A held service carries no release: its latest deployment
			// cannot roll out, and fails with the reason.
			depID, cmd.ReleaseID, err = r.cfg.Reads.HeldDeployment(ctx, tx, rc.EnvironmentID, s.ID)
			if err != nil {
				return fmt.Errorf("finding the deployment of held service %s: %w", s.ID, err)
			}
			cmd.HeldReason = s.HeldReason
		}
		if depID == "" {
			continue
		}
		secs, err := r.cfg.Reads.ProgressDeadlineSeconds(ctx, tx, s.ID)
		if err != nil {
			return fmt.Errorf("reading the progress deadline of service %s: %w", s.ID, err)
		}
		cmd.ProgressDeadline = time.Duration(secs) * time.Second
		_, err = r.cfg.Commands.Deployment(ctx, c, e.OrgID, depID, cmd)
		if err := ignoreDecided(err, r.cfg.Logger, "delivering deployment "+depID); err != nil {
			return err
		}
	}
	return nil
}

// progressDeadline reads the deadline the deployment's stream opened with.
func progressDeadline(ctx context.Context, tx pgx.Tx, deploymentID string) (time.Duration, error) {
	first, ok, err := eventstore.EventAt(ctx, tx, domain.DeploymentStream(deploymentID), 1)
	if err != nil {
		return 0, fmt.Errorf("reading the progress deadline of deployment %s: %w", deploymentID, err)
	}
	var opened struct {
		ProgressDeadlineSeconds *int `json:"progressDeadlineSeconds"`
	}
	if ok {
		if err := json.Unmarshal(first.Payload, &opened); err != nil {
			return 0, fmt.Errorf("reading the progress deadline of deployment %s: %w", deploymentID, err)
		}
	}
	secs := opened.ProgressDeadlineSeconds
	if secs == nil || *secs <= 0 {
		return domain.DefaultProgressDeadline, nil
	}
	return time.Duration(*secs) * time.Second, nil
}

// ignoreDecided passes infrastructure errors on (the batch is retried) and
// logs what the domain refused: a refusal is final, retrying cannot help.
func ignoreDecided(err error, log *slog.Logger, what string) error {
	if err == nil {
		return nil
	}
	for _, final := range []error{domain.ErrInvalid, domain.ErrNotFound, domain.ErrConflict, domain.ErrForbidden} {
		if errors.Is(err, final) {
			log.Warn("reactions: refused", "what", what, "err", err)
			return nil
		}
	}
	return err
}

func writeTimers(ctx context.Context, tx pgx.Tx, ops []timerOp) error {
	if len(ops) == 0 {
		return nil
	}
	out := make([]reactstore.TimerOp, len(ops))
	for i, op := range ops {
		out[i] = reactstore.TimerOp{Timer: reactstore.Timer{Key: op.key, Kind: op.kind, OrgID: op.org, Due: op.due}, Keep: op.keep}
		if op.due.IsZero() {
			continue
		}
		payload, err := json.Marshal(op.payload)
		if err != nil {
			return err
		}
		out[i].Payload = payload
	}
	return reactstore.WriteTimers(ctx, tx, out)
}

// FireDue fires every timer due by the clock's now and returns how many it
// fired. The jobs leader calls it, so one replica fires each timer; a timer
// whose command failed for a reason other than the domain's stays for the
// next round.
func (r *Reactions) FireDue(ctx context.Context) (int, error) {
	now := r.cfg.Now().UTC()
	stored, err := reactstore.DueTimers(ctx, r.pool, now, 500)
	if err != nil {
		return 0, err
	}
	type timer struct {
		key, org, kind string
		due            time.Time
		payload        timerPayload
	}
	due := make([]timer, 0, len(stored))
	for _, st := range stored {
		t := timer{key: st.Key, org: st.OrgID, kind: st.Kind, due: st.Due}
		if err := json.Unmarshal(st.Payload, &t.payload); err != nil {
			r.cfg.Logger.Error("reactions: dropping an unreadable timer", "key", t.key, "err", err)
		}
		due = append(due, t)
	}
	fired := 0
	var errs []error
	for _, t := range due {
		c := actor()
		var err error
		switch t.kind {
		case timerDeadline:
			_, err = r.cfg.Commands.Deployment(ctx, c, t.org, t.payload.DeploymentID, domain.ExpireProgressDeadline{})
		case timerStall:
			_, err = r.cfg.Commands.Deployment(ctx, c, t.org, t.payload.DeploymentID, domain.CheckStall{StallTimeout: r.cfg.StallTimeout})
		case timerApproval:
			_, err = r.cfg.Commands.Project(ctx, c, t.org, t.payload.ProjectID, domain.ExpireChangeSet{ChangeSetID: t.payload.ChangeSetID, TTL: r.cfg.ApprovalTTL})
		case timerUpgrade:
			err = r.fireUpgrade(ctx, c, t.org, t.payload)
		case timerBuild:
			err = r.fireBuild(ctx, c, t.org, t.payload)
		case timerMeshRotate:
			err = r.fireMeshRotate(ctx, c, t.org, t.payload)
		default:
			r.cfg.Logger.Error("reactions: dropping a timer of an unknown kind", "key", t.key, "kind", t.kind)
		}
		if err := ignoreDecided(err, r.cfg.Logger, "firing timer "+t.key); err != nil {
			errs = append(errs, fmt.Errorf("timer %s: %w", t.key, err))
			continue
		}
		// A timer set again meanwhile (a new stage moved the stall timer)
		// has another due time and stays.
		if err := reactstore.DeleteFired(ctx, r.pool, t.key, t.due); err != nil {
			errs = append(errs, err)
			continue
		}
		fired++
	}
	return fired, errors.Join(errs...)
}
