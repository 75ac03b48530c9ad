// Package agent is NebulaCtrl's cluster agent: it opens the link to the
// control plane, keeps its credential, takes part in leader election (one
// replica of a cluster reconciles, the other stands by connected) and hands
// each desired state to the reconciler.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/agent/selfupdate"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Labels and annotations the reconciler puts on an environment's namespace.
const (
	managedBy         = "app.kubernetes.io/managed-by=nebulactrl"
	environmentIDKey  = "nebulactrl.io/environment-id"
	appliedRevisionAn = "nebulactrl.io/applied-revision"
	appliedHashAn     = "nebulactrl.io/applied-hash"
)

// Config configures the agent.
type Config struct {
	Link transport.ClientConfig
	// Client reaches the cluster's API server.
	Client  kubernetes.Interface
	Version string
	// Identity is this replica's name (the pod name of the StatefulSet).
	Identity string
	// LeaseNamespace and LeaseName locate the leader election Lease; an
	// empty LeaseName makes this agent the leader outright (a host agent).
	LeaseNamespace, LeaseName                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// MeshNamespace is the mesh's namespace, where the agent hands its
	// cluster's mesh state to the node agents (default nebula-mesh).
	MeshNamespace string
	// ReportEvery is how often the leader reports status (default 30 s).
	ReportEvery time.Duration
	// RetireGrace is how long an old release keeps running after traffic
	// moved to the new one (default reconcile.DefaultRetireGrace, 15 s).
	RetireGrace time.Duration
	// ProgressEvery is how often an environment with a rollout under way is
	// reconciled again (default 1 s).
	ProgressEvery time.Duration
	// RetryMin and RetryMax bound the exponential backoff, with jitter,
	// after a transient Kubernetes error (default 1 s .. 30 s).
	RetryMin, RetryMax time.Duration
	// Binding is the workload role the agent binds to itself in each
	// namespace it creates (the install manifest's RBAC); nil binds none
	// (an agent whose rights are cluster wide already, such as on a host).
	Binding *reconcile.Binding
	Logger  *slog.Logger
	// Updater upgrades the agent on the control plane's agent_upgrade and
	// keeps a new binary's probation; nil: this agent cannot upgrade
	// itself (its hello says so).
	Updater *selfupdate.Updater
	// Builds runs the control plane's builds from Git as Jobs (its Client,
	// Report and Logs are the agent's); nil: this agent runs no builds (its
	// hello says so, and it is sent none).
	Builds *build.Config
}

// cannotUpgradeHere is the hello's reason for an agent without an updater.
const cannotUpgradeHere = "this agent runs without self-upgrade"

// Agent runs the link and the reconciler.
type Agent struct {
	cfg    Config
	rec    *reconcile.Reconciler
	leader atomic.Bool

	mu sync.Mutex
	// latest is the newest desired state received per environment: a standby
	// keeps it, so that it can apply at once when it becomes the leader, and
	// the leader reconciles it again while a rollout is under way.
	latest map[string]transport.DesiredState
	// due is when each environment is reconciled again (see progressLoop);
	// applying marks those a delivery is applying right now.
	due      map[string]due
	applying map[string]bool
	// rewinding marks the environments the control plane rewound (see
	// transport.DesiredState.Rewind) until a revision is recorded: every
	// desired state of theirs is applied as a rewind until then, so that a
	// newer one arriving before the rewind got through is not ignored as
	// older than what the namespace records.
	rewinding map[string]bool
	wake      chan struct{}

	mesh meshRelay

	stages *stageTracker
	// queue holds reports that wait for the link rather than be dropped.
	qmu    sync.Mutex
	queue  []transport.Report
	queued chan struct{}

	outbox  chan transport.Report
	dropped atomic.Int64

	// builds runs builds from Git while leading (nil without Config.Builds).
	builds *builds

	// client and runCtx are the link and the context of Run, for upgrades.
	client atomic.Pointer[transport.Client]
	runCtx atomic.Pointer[context.Context]
}

// New returns an agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("agent: no Kubernetes client")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Identity == "" {
		cfg.Identity, _ = os.Hostname()
	}
	if cfg.ReportEvery == 0 {
		cfg.ReportEvery = 30 * time.Second
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = DefaultRetryMin
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.RetryMax < cfg.RetryMin {
		return nil, fmt.Errorf("agent: RetryMax %v is shorter than RetryMin %v", cfg.RetryMax, cfg.RetryMin)
	}
	rec, err := reconcile.New(reconcile.Config{Client: cfg.Client, Logger: cfg.Logger, RetireGrace: cfg.RetireGrace, Binding: cfg.Binding})
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, rec: rec, latest: map[string]transport.DesiredState{},
		due: map[string]due{}, applying: map[string]bool{}, rewinding: map[string]bool{}, wake: make(chan struct{}, 1),
		stages: newStageTracker(), queued: make(chan struct{}, 1),
		outbox: make(chan transport.Report, 256)}
	a.cfg = cfg
	if cfg.Builds != nil {
		a.builds = newBuilds(a, *cfg.Builds)
		cfg.Link.Builds = a.builds.set
	}
	cfg.Link.Outbox = a.outbox
	cfg.Link.Hello = a.hello
	cfg.Link.MeshState = a.relayMesh
	cfg.Link.Apply = a.apply
	cfg.Link.Leader = a.leader.Load
	onConnected := cfg.Link.OnConnected
	cfg.Link.OnConnected = func(w transport.Welcome) {
		a.onConnected()
		if cfg.Updater != nil {
			cfg.Updater.Connected()
		}
		if onConnected != nil {
			onConnected(w)
		}
	}
	if up := cfg.Updater; up != nil {
		onDisconnected := cfg.Link.OnDisconnected
		cfg.Link.OnDisconnected = func(err error) {
			up.Disconnected()
			if onDisconnected != nil {
				onDisconnected(err)
			}
		}
		up.SetBusy(a.busy)
		cfg.Link.Upgrade = a.upgrade
	}
	a.cfg = cfg
	return a, nil
}

// Leader reports whether this replica reconciles now.
func (a *Agent) Leader() bool { return a.leader.Load() }

// Run runs until ctx ends or the credential is refused.
func (a *Agent) Run(ctx context.Context) error {
	client, err := transport.NewClient(a.cfg.Link)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.client.Store(client)
	a.runCtx.Store(&ctx)
	var wg sync.WaitGroup
	if a.cfg.Updater != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.cfg.Updater.Run(ctx) }()
	}
	if a.cfg.LeaseName == "" {
		a.leader.Store(true)
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); a.elect(ctx) }()
	}
	if a.builds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.builds.loop(ctx) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); a.progressLoop(ctx) }()
	go func() { defer wg.Done(); a.sendLoop(ctx) }()
	go func() { defer wg.Done(); a.reportLoop(ctx) }()
	err = client.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// elect takes part in leader election until ctx ends.
func (a *Agent) elect(ctx context.Context) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: a.cfg.LeaseNamespace, Name: a.cfg.LeaseName},
		Client:     a.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: a.cfg.Identity},
	}
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true, Name: a.cfg.LeaseName,
			LeaseDuration: a.cfg.LeaseDuration, RenewDeadline: a.cfg.RenewDeadline, RetryPeriod: a.cfg.RetryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					a.cfg.Logger.Info("leading: this replica reconciles", "identity", a.cfg.Identity)
					a.stages.reset()
					a.leader.Store(true)
					a.catchUp()
				},
				OnStoppedLeading: func() {
					a.cfg.Logger.Info("standing by", "identity", a.cfg.Identity)
					a.leader.Store(false)
					a.stages.reset()
					a.mu.Lock()
					clear(a.due)
					a.mu.Unlock()
				},
			},
		})
	}
}

// hello reports the revisions the cluster has applied, read from the
// environments' namespaces, so the control plane sends only what is newer.
//
// For an environment whose applied document this replica does not hold (it
// has just started) it reports one revision less, so that the control plane
// sends the applied revision again: a rollout under way goes on only with
// its document (the next Service, the release to keep), and a standby needs
// it to take over. The applied revision received again is a progress pass:
// it writes nothing where nothing is left to do.
//
// Recorded is what the namespaces record, exactly, so that a control plane
// restored from an older backup can rewind the cluster to what it knows.
func (a *Agent) hello(ctx context.Context) transport.Hello {
	applied := map[string]int{}
	recorded := map[string]transport.AppliedRevision{}
	list, err := a.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: managedBy})
	if err != nil {
		a.cfg.Logger.Warn("reading applied revisions", "err", err)
	} else {
		a.mu.Lock()
		for _, ns := range list.Items {
			env := ns.Labels[environmentIDKey]
			n, err := strconv.Atoi(ns.Annotations[appliedRevisionAn])
			if err != nil || env == "" {
				continue
			}
			if n > 0 {
				recorded[env] = transport.AppliedRevision{Revision: n, Hash: ns.Annotations[appliedHashAn]}
			}
			if held, ok := a.latest[env]; !ok || held.Revision < n {
				n--
			}
			if n > 0 {
				applied[env] = n
			}
		}
		a.mu.Unlock()
	}
	facts := transport.Facts{OS: runtime.GOOS, Leader: a.leader.Load()}
	facts.Hostname, _ = os.Hostname()
	if v, err := a.cfg.Client.Discovery().ServerVersion(); err == nil {
		facts.KubernetesVersion = v.GitVersion
	}
	hello := transport.Hello{Protocol: transport.ProtocolVersion, Version: a.cfg.Version, Arch: runtime.GOARCH, Applied: applied, Recorded: recorded, Facts: facts}
	can, why := false, cannotUpgradeHere
	if a.cfg.Updater != nil {
		can, why = a.cfg.Updater.Can()
		hello.Facts.AgentUpgrade = a.cfg.Updater.Facts()
	}
	hello.Upgradable, hello.CannotUpgrade = &can, why
	hello.Builds = a.builds != nil
	hello.Mesh, hello.MeshApplied = true, a.meshApplied(ctx)
	return hello
}

// upgrade starts an agent_upgrade on its own goroutine: the updater
// reports on the link and, after a success, stops the agent once its
// running work is done.
func (a *Agent) upgrade(u transport.AgentUpgrade) {
	ctxp, client := a.runCtx.Load(), a.client.Load()
	if ctxp == nil || client == nil {
		return
	}
	go a.cfg.Updater.Upgrade(*ctxp, u, func(r transport.AgentUpgradeResult) {
		if err := client.Send(transport.TypeAgentUpgradeResult, r); err != nil {
			// The control plane learns the outcome from the next hello
			// (facts.agentUpgrade, the version).
			a.cfg.Logger.Warn("reporting an upgrade's result", "err", err)
		}
	})
}

// busy reports whether the agent has work running: a desired state being
// applied, or a rollout under way that the progress loop carries on.
func (a *Agent) busy() bool {
	if a.builds != nil && a.builds.running() > 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.applying) > 0 || len(a.due) > 0
}

// apply reconciles a desired state when leading; a standby keeps it and
// acknowledges it as not applied by this replica.
//
// A transient Kubernetes error is retried here, with exponential backoff and
// jitter, until the revision gets through: the acknowledgement waits, and
// never says "applied" (nor "failed") for a service that was not. Permanent
// errors are acknowledged as failed with their reason. A rollout the
// revision starts goes on in the progress loop.
func (a *Agent) apply(ctx context.Context, ds transport.DesiredState) transport.Ack {
	a.mu.Lock()
	if ds.Rewind {
		a.rewinding[ds.EnvironmentID] = true
	}
	ds.Rewind = a.rewinding[ds.EnvironmentID]
	if cur, ok := a.latest[ds.EnvironmentID]; !ok || ds.Revision > cur.Revision || ds.Revision == cur.Revision && ds.Hash != cur.Hash || ds.Rewind {
		a.latest[ds.EnvironmentID] = ds
	}
	a.mu.Unlock()
	ignored := transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Ignored: true, Services: []transport.ServiceOutcome{}}
	if !a.leader.Load() {
		return ignored
	}
	a.mu.Lock()
	a.applying[ds.EnvironmentID] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.applying, ds.EnvironmentID)
		a.mu.Unlock()
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}()
	backoff := time.Duration(0)
	for {
		res, err := a.pass(ctx, ds)
		if !transient(res, err) {
			if err != nil {
				a.cfg.Logger.Error("applying a revision", "environment", ds.EnvironmentID, "revision", ds.Revision, "err", err)
			}
			return ackOf(ds, res, err)
		}
		backoff = nextBackoff(backoff, a.cfg.RetryMin, a.cfg.RetryMax)
		wait := jitter(backoff)
		a.cfg.Logger.Warn("applying a revision met a transient error, retrying", "environment", ds.EnvironmentID,
			"revision", ds.Revision, "err", err, "retrying", retrying(res), "retry_in", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			// The link is gone and this acknowledgement with it; the
			// progress loop goes on retrying.
			return ignored
		case <-time.After(wait):
		}
		if !a.leader.Load() {
			return ignored
		}
	}
}

// retrying names the services a pass will retry, for the log.
func retrying(res reconcile.Result) []string {
	var out []string
	for _, o := range res.Services {
		if o.State == reconcile.StateRetrying {
			out = append(out, o.Service+": "+o.Reason)
		}
	}
	return out
}
