// Package agentlink is the control plane's side of the agent link: it owns
// the transport hub the agents are connected to and every delivery to them
// (desired state, builds, agent upgrades). Agents register with a join token
// and authenticate with their own credential, revisions are loaded and their
// secrets opened for delivery, heartbeats and acknowledgements are kept as
// telemetry (package telemetry, not events), what agents report becomes
// commands, and connects and disconnects are recorded for the audit log. It
// writes no SQL: it reads through projections and eventstore.
package agentlink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Opener opens a sealed secret value.
type Opener interface {
	Open(ctx context.Context, v domain.SealedValue) ([]byte, error)
}

// Config is what the link needs.
type Config struct {
	Pool     *pgxpool.Pool
	Commands *dispatch.Handler
	Secrets  Opener
	Logger   *slog.Logger
	Now      func() time.Time
	// Replica names this control-plane process in the telemetry.
	Replica string
	// Changed wakes a registration waiting for its server to be projected.
	Changed func() <-chan struct{}
	// Telemetry keeps the agents' reports and logs.
	Telemetry *telemetry.Store
	// Binaries are the agent binaries served at /agent/v1/download/<arch>
	// (default agentbin.Embedded()).
	Binaries agentbin.Source
	// Deliveries open a deployment's stream for a stage report that came
	// before the reactions delivered it (reactions.Deliveries); required.
	Deliveries Deliveries
	// Authenticated, when set, is told of each agent request whose
	// credential was accepted (the access log names the server).
	Authenticated func(r *http.Request, serverID string)
}

// Deliveries open deployments' streams: the reactions own that decision,
// the link asks for it (reactions.Deliveries implements it).
type Deliveries interface {
	DeliverReported(ctx context.Context, orgID, clusterID, deploymentID string) error
}

// Link implements the hub's callbacks, and owns the hub.
type Link struct {
	cfg Config
	// meshSeen is, per cluster, the last mesh report decided and when.
	meshSeen sync.Map
	// hub is the link's hub, made by New (its callbacks are the link's).
	hub atomic.Pointer[transport.Hub]
	// stopHub closes the agents' connections (Close).
	stopHub context.CancelFunc
	// status keeps the connections and acknowledgements (Config.Telemetry,
	// or a store of its own when there is none).
	status *telemetry.Store
	// creds reads the credentials of concurrent checks together.
	creds *credentialReads
	// batch writes the heartbeats and acknowledgements in batches.
	batch *telemetry.Batcher
	// untaken are the connections whose hello could not take the lease
	// (the database did not answer), by server: each heartbeat of that
	// connection tries again, since a heartbeat renews only a lease its
	// connection holds.
	untakenMu sync.Mutex
	untaken   map[string]untakenLease
	// OnUpgradeResult, when set, is also told of each agent's answer to an
	// agent_upgrade, after the link recorded it (tests observe answers).
	OnUpgradeResult func(ctx context.Context, serverID string, r transport.AgentUpgradeResult)
	// builtSets are the sets of builds made for each cluster, by their key
	// (DeliverBuilds' goroutine alone uses it): a set is made again, with
	// its credentials read and opened, only when the cluster's builds
	// change, not at every look.
	builtSets map[string]builtSet
}

// ErrServerOffline means the server has no live connection to this
// control-plane replica: an agent_upgrade cannot reach it now.
var ErrServerOffline = errors.New("the server is offline")

// SendUpgrade sends an agent_upgrade to a server connected to this replica;
// ErrServerOffline when it is not. The agent answers with an
// agent_upgrade_result (OnUpgradeResult) and, after restarting, with its
// new version in its hello.
func (l *Link) SendUpgrade(ctx context.Context, serverID string, u transport.AgentUpgrade) error {
	err := l.hub.Load().SendUpgrade(ctx, serverID, u)
	if errors.Is(err, transport.ErrNotConnected) {
		return fmt.Errorf("%w: %v", ErrServerOffline, err)
	}
	return err
}

// UpgradeResult records an agent's agent_upgrade_result as a command of
// its server's stream (a failure ends the upgrade at once; success is the
// agent connecting again with the new version), then tells
// OnUpgradeResult.
func (l *Link) UpgradeResult(ctx context.Context, p transport.Peer, r transport.AgentUpgradeResult) {
	r.ID, r.Version, r.Error = truncateUTF8(r.ID, 100), truncateUTF8(r.Version, 64), truncateUTF8(r.Error, 1000)
	if !r.OK && domain.ValidateID("upgrade", r.ID) == nil {
		actor := domain.Actor{Kind: domain.ActorAgent, ID: p.ServerID, Name: p.Name}
		_, err := l.cfg.Commands.Server(ctx, dispatch.Context{Actor: actor}, p.OrgID, p.ServerID, domain.ReportUpgradeResult{UpgradeID: r.ID,
			Version: r.Version, OK: r.OK, Step: transport.StepName(r.Step), Error: r.Error})
		if err != nil {
			l.cfg.Logger.Warn("recording an upgrade result", "server", p.ServerID, "upgrade", r.ID, "err", err)
		}
	}
	if l.OnUpgradeResult != nil {
		l.OnUpgradeResult(ctx, p.ServerID, r)
	}
}

// New returns a link and its hub, which serves until Close.
func New(cfg Config) (*Link, error) {
	if cfg.Pool == nil || cfg.Commands == nil || cfg.Secrets == nil || cfg.Deliveries == nil {
		return nil, errors.New("agentlink: needs a database, a command handler, a secret opener and the deliveries")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Binaries == nil {
		cfg.Binaries = agentbin.Embedded()
	}
	if cfg.Changed == nil {
		never := make(chan struct{})
		cfg.Changed = func() <-chan struct{} { return never }
	}
	l := &Link{cfg: cfg, status: cfg.Telemetry}
	if l.status == nil {
		l.status = telemetry.New(cfg.Pool, cfg.Now)
	}
	l.batch = telemetry.NewBatcher(l.status, 0, cfg.Logger)
	l.creds = newCredentialReads(cfg.Pool)
	l.untaken = map[string]untakenLease{}
	if err := l.makeHub(); err != nil {
		return nil, err
	}
	return l, nil
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// Register exchanges a cluster's join token for a server credential of its own.
func (l *Link) Register(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", "the request body is too large")
		return
	}
	var req transport.RegisterRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", "the body must be {\"joinToken\", \"name\"}")
		return
	}
	tokenID, secret, ok := credential.Parse(req.JoinToken)
	if !ok {
		writeError(w, http.StatusUnauthorized, "unauthorized", "the join token is malformed")
		return
	}
	tok, found, err := projections.JoinTokenByID(ctx, l.cfg.Pool, tokenID)
	clusterID, orgID := tok.ClusterID, tok.OrgID
	if err == nil && (!found || !credential.Matches(tok.Hash, secret)) {
		writeError(w, http.StatusUnauthorized, "unauthorized", "the join token is not valid")
		return
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "database_unavailable", "try again shortly")
		return
	}
	serverID, cred, credHash, err := credential.New()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
		return
	}
	actor := domain.Actor{Kind: domain.ActorAgent, ID: serverID, Name: req.Name}
	res, err := l.cfg.Commands.Cluster(ctx, dispatch.Context{Actor: actor}, orgID, clusterID,
		domain.RegisterServer{ServerID: serverID, Name: req.Name, CredentialHash: credHash, JoinTokenID: tokenID})
	switch {
	case errors.Is(err, domain.ErrForbidden):
		writeError(w, http.StatusUnauthorized, "unauthorized", "the join token expired or was revoked")
		return
	case errors.Is(err, domain.ErrInvalid):
		writeError(w, http.StatusUnprocessableEntity, "validation_failed", strings.TrimPrefix(err.Error(), "invalid: "))
		return
	case errors.Is(err, domain.ErrConflict):
		writeError(w, http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), "conflict: "))
		return
	case err != nil:
		l.cfg.Logger.Error("registering a server", "err", err)
		writeError(w, http.StatusInternalServerError, "internal", "internal error")
		return
	}
	// The agent connects right after: its credential must be readable then.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := projections.WaitFor(wctx, l.cfg.Pool, res.Last, l.cfg.Changed); err != nil {
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the registration is not visible yet; try again")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(transport.RegisterResponse{ServerID: serverID, ClusterID: clusterID, Credential: cred})
}

// Authenticate checks an agent's credential, in constant time. The hub calls
// it at the upgrade, again at the hello and before every desired state: a
// primary-key read, shared by the checks made at the same time
// (credentialReads). A database that does not answer is not a refusal
// (transport.ErrUnavailable): the agent must not stop for good over it.
func (l *Link) Authenticate(r *http.Request) (transport.Peer, error) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return transport.Peer{}, errors.New("the agent needs its credential: Authorization: Bearer <credential>")
	}
	id, secret, ok := credential.Parse(raw)
	if !ok {
		return transport.Peer{}, errors.New("the credential is malformed")
	}
	sc, found, err := l.creds.get(r.Context(), id)
	if err != nil {
		l.cfg.Logger.Warn("checking an agent's credential", "err", err)
		return transport.Peer{}, fmt.Errorf("%w: try again shortly", transport.ErrUnavailable)
	}
	if !found || !credential.Matches(sc.Hash, secret) {
		return transport.Peer{}, errors.New("the credential is not valid")
	}
	if sc.Revoked {
		return transport.Peer{}, errors.New("the credential was revoked")
	}
	return transport.Peer{ServerID: sc.ServerID, ClusterID: sc.ClusterID, OrgID: sc.OrgID, Name: sc.Name}, nil
}

// Heads returns the latest revision of every environment of the clusters.
// It reads the revision streams themselves, not the revisions table: a
// revision is in its stream the moment the projections commit it, a batch
// before the table has it, and agents are waiting.
func (l *Link) Heads(ctx context.Context, clusterIDs []string) (map[string][]transport.Head, error) {
	envs, err := projections.EnvironmentsOnClusters(ctx, l.cfg.Pool, clusterIDs)
	if err != nil {
		return nil, fmt.Errorf("latest revisions: %w", err)
	}
	streams := make([]string, len(envs))
	for i, e := range envs {
		streams[i] = domain.RevisionStream(e.EnvironmentID)
	}
	versions, err := eventstore.StreamVersions(ctx, l.cfg.Pool, streams)
	if err != nil {
		return nil, fmt.Errorf("latest revisions: %w", err)
	}
	out := map[string][]transport.Head{}
	for i, e := range envs {
		if rev, ok := versions[streams[i]]; ok {
			out[e.ClusterID] = append(out[e.ClusterID], transport.Head{EnvironmentID: e.EnvironmentID, Revision: rev})
		}
	}
	return out, nil
}

// HeadsOf maps revisions (environment id -> revision) to their clusters.
func (l *Link) HeadsOf(ctx context.Context, revisions map[string]int) (map[string][]transport.Head, error) {
	ids := make([]string, 0, len(revisions))
	for id := range revisions {
		ids = append(ids, id)
	}
	envs, err := projections.ClustersOfEnvironments(ctx, l.cfg.Pool, ids)
	if err != nil {
		return nil, fmt.Errorf("clusters of environments: %w", err)
	}
	out := map[string][]transport.Head{}
	for _, e := range envs {
		out[e.ClusterID] = append(out[e.ClusterID], transport.Head{EnvironmentID: e.EnvironmentID, Revision: revisions[e.EnvironmentID]})
	}
	return out, nil
}

// Fetch loads a revision and opens its secrets for delivery. A secret that
// cannot be opened holds its service (the compiler holds those it knows of;
// this covers a key lost after compiling).
func (l *Link) Fetch(ctx context.Context, envID string, revision int) (transport.DesiredState, error) {
	if revision < 1 {
		return transport.DesiredState{}, fmt.Errorf("revision %d of %s: %w", revision, envID, projections.ErrNoRevision)
	}
	// A revision records what changed; the agent gets the whole document:
	// the one this process compiled when it is that revision, else rebuilt
	// and checked against the hash the revision recorded.
	rev, err := projections.DocumentForDelivery(ctx, l.cfg.Pool, envID, revision)
	if err != nil {
		return transport.DesiredState{}, fmt.Errorf("revision %d of %s: %w", revision, envID, err)
	}
	hash, doc := rev.Hash, rev.Document
	for i := range doc.Services {
		s := &doc.Services[i]
		for j := range s.Variables {
			v := &s.Variables[j]
			if v.Secret == nil {
				continue
			}
			plain, err := l.cfg.Secrets.Open(ctx, domain.SealedValue{DataKeyID: v.Secret.DataKeyID, Ciphertext: v.Secret.Ciphertext})
			if err != nil {
				*s = desiredstate.Service{ID: s.ID, Name: s.Name, Held: true, HeldReason: fmt.Sprintf("secret %s cannot be opened: %v", v.Name, err)}
				break
			}
			v.Value, v.Secret = string(plain), nil
		}
	}
	return transport.DesiredState{EnvironmentID: envID, Revision: revision, Hash: hash, Document: doc}, nil
}

func (l *Link) record(ctx context.Context, p transport.Peer, cmd domain.RecordConnection) {
	actor := domain.Actor{Kind: domain.ActorAgent, ID: p.ServerID, Name: p.Name}
	cmd.ClusterID, cmd.ServerID, cmd.Session = p.ClusterID, p.ServerID, p.Session
	if _, err := l.cfg.Commands.Server(ctx, dispatch.Context{Actor: actor}, p.OrgID, p.ServerID, cmd); err != nil {
		l.cfg.Logger.Warn("recording an agent connection", "server", p.Name, "err", err)
	}
}

// untakenLease is a hello whose lease is still to be taken.
type untakenLease struct {
	src  telemetry.Source
	conn telemetry.Connection
}

// OnHello records the connection: it takes the server's lease.
func (l *Link) OnHello(ctx context.Context, p transport.Peer, h transport.Hello) {
	src := telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}
	conn := telemetry.Connection{ServerID: p.ServerID, Replica: l.cfg.Replica, Session: p.Session, Version: truncate(h.Version, 64),
		Arch: truncate(h.Arch, 16), Facts: h.Facts, At: l.cfg.Now().UTC()}
	if err := l.status.SaveConnected(ctx, src, conn); err != nil {
		l.cfg.Logger.Warn("recording an agent's hello; its next heartbeat tries again", "server", p.Name, "err", err)
		l.untakenMu.Lock()
		l.untaken[p.ServerID] = untakenLease{src: src, conn: conn}
		l.untakenMu.Unlock()
	} else {
		// This connection took it: an earlier connection's hello still
		// to be taken must not take it back.
		l.untakenMu.Lock()
		delete(l.untaken, p.ServerID)
		l.untakenMu.Unlock()
	}
	l.record(ctx, p, domain.RecordConnection{Connected: true, Version: truncateUTF8(h.Version, 64), Arch: truncateUTF8(h.Arch, 16),
		Upgradable: h.Upgradable, CannotUpgrade: truncateUTF8(h.CannotUpgrade, 200), AgentUpgrade: upgradeFacts(h.Facts.AgentUpgrade)})
}

// OnHeartbeat keeps the server's last-seen time: telemetry, not an event,
// written with others within telemetry.BatchEvery.
func (l *Link) OnHeartbeat(ctx context.Context, p transport.Peer, h transport.Heartbeat) {
	now := l.cfg.Now().UTC()
	l.untakenMu.Lock()
	u, untaken := l.untaken[p.ServerID]
	l.untakenMu.Unlock()
	if untaken && u.conn.Session == p.Session {
		u.conn.At, u.conn.Facts.Leader = now, h.Leader
		if err := l.status.SaveConnected(ctx, u.src, u.conn); err != nil {
			l.cfg.Logger.Warn("recording an agent's hello again", "server", p.Name, "err", err)
			return
		}
		l.forgetUntaken(p)
		return
	}
	l.batch.Heartbeat(telemetry.Heartbeat{ServerID: p.ServerID, Session: p.Session, Leader: h.Leader, At: now})
}

// forgetUntaken drops a connection's hello still to be recorded.
func (l *Link) forgetUntaken(p transport.Peer) {
	l.untakenMu.Lock()
	defer l.untakenMu.Unlock()
	if u, ok := l.untaken[p.ServerID]; ok && u.conn.Session == p.Session {
		delete(l.untaken, p.ServerID)
	}
}

// OnAck keeps each server's last acknowledgement of each environment,
// written with others within telemetry.BatchEvery.
func (l *Link) OnAck(ctx context.Context, p transport.Peer, a transport.Ack) {
	if domain.ValidateID("environment", a.EnvironmentID) != nil {
		return
	}
	a.Hash = truncateUTF8(a.Hash, 100)
	l.batch.Ack(telemetry.AckRecord{Source: telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}, ServerID: p.ServerID, Ack: a, At: l.cfg.Now().UTC()})
}

// OnStatus keeps the cluster's report of nodes, workloads and warnings.
func (l *Link) OnStatus(ctx context.Context, p transport.Peer, st transport.Status) {
	if l.cfg.Telemetry == nil {
		return
	}
	if err := l.cfg.Telemetry.SaveStatus(ctx, telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}, st); err != nil {
		l.cfg.Logger.Warn("saving a status report", "server", p.Name, "err", err)
	}
}

// OnLogs keeps a batch of container log lines.
func (l *Link) OnLogs(ctx context.Context, p transport.Peer, lg transport.Logs) {
	if l.cfg.Telemetry == nil || domain.ValidateID("environment", lg.EnvironmentID) != nil {
		return
	}
	if err := l.cfg.Telemetry.SaveLogs(ctx, telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}, lg); err != nil {
		l.cfg.Logger.Warn("saving log lines", "server", p.Name, "err", err)
	}
}

// OnStage records a rollout stage the agent reported as a command on the
// deployment's own stream; the deployment checks that it runs on the
// reporting agent's cluster, and only moves forward.
func (l *Link) OnStage(ctx context.Context, p transport.Peer, st transport.StageReport) {
	if domain.ValidateID("deployment", st.DeploymentID) != nil {
		l.cfg.Logger.Warn("ignoring a stage report without a valid deployment id", "server", p.Name)
		return
	}
	actor := domain.Actor{Kind: domain.ActorAgent, ID: p.ServerID, Name: p.Name}
	report := domain.ReportStage{ClusterID: p.ClusterID, Stage: domain.DeploymentStatus(st.Stage), Ready: st.Ready, Desired: st.Desired,
		Detail: truncateUTF8(st.Detail, domain.MaxDetail)}
	_, err := l.cfg.Commands.Deployment(ctx, dispatch.Context{Actor: actor}, p.OrgID, st.DeploymentID, report)
	if errors.Is(err, domain.ErrNotFound) {
		// The agent can be quicker than the reactions: it received the
		// revision the moment it was compiled, and reports its first stage
		// before the deployment's stream is open. The reactions open it
		// now (the deployment must be of this agent's cluster); report again.
		if err = l.cfg.Deliveries.DeliverReported(ctx, p.OrgID, p.ClusterID, st.DeploymentID); err == nil {
			_, err = l.cfg.Commands.Deployment(ctx, dispatch.Context{Actor: actor}, p.OrgID, st.DeploymentID, report)
		}
	}
	if err != nil {
		l.cfg.Logger.Warn("recording a stage report", "server", p.Name, "deployment", st.DeploymentID, "stage", truncateUTF8(st.Stage, 40), "err", err)
	}
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// OnDisconnect records that the connection ended.
func (l *Link) OnDisconnect(ctx context.Context, p transport.Peer, reason string) {
	// No heartbeat of this connection may renew the lease after it is
	// released.
	l.forgetUntaken(p)
	l.batch.Forget(p.ServerID, p.Session)
	if err := l.status.SaveDisconnected(ctx, p.ServerID, l.cfg.Replica, p.Session); err != nil {
		l.cfg.Logger.Warn("recording a disconnect", "server", p.Name, "err", err)
	}
	l.record(ctx, p, domain.RecordConnection{Connected: false, Reason: truncateUTF8(reason, 200)})
}

// Revoked returns which of the servers have had their credential revoked
// (or their cluster deleted), so every replica can drop them at once.
func (l *Link) Revoked(ctx context.Context, serverIDs []string) ([]string, error) {
	return projections.RevokedServers(ctx, l.cfg.Pool, serverIDs)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
