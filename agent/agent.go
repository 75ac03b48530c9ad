// Package agent is NebulaCtrl's cluster agent: it opens the link to the
// control plane, keeps its credential, takes part in leader election (one
// replica of a cluster reconciles, the other stands by connected) and hands
// each desired state to the reconciler.
package agent

import (
	"context"
	"errors"
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

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Labels and annotations the reconciler puts on an environment's namespace.
const (
	managedBy         = "app.kubernetes.io/managed-by=nebulactrl"
	environmentIDKey  = "nebulactrl.io/environment-id"
	appliedRevisionAn = "nebulactrl.io/applied-revision"
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
	// ReportEvery is how often the leader reports status (default 30 s).
	ReportEvery time.Duration
	Logger      *slog.Logger
}

// Agent runs the link and the reconciler.
type Agent struct {
	cfg    Config
	rec    *reconcile.Reconciler
	leader atomic.Bool

	mu sync.Mutex
	// latest is the newest desired state received per environment: a standby
	// keeps it, so that it can apply at once when it becomes the leader.
	latest map[string]transport.DesiredState
	kick   chan struct{}

	outbox  chan transport.Report
	dropped atomic.Int64
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
	rec, err := reconcile.New(reconcile.Config{Client: cfg.Client, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, rec: rec, latest: map[string]transport.DesiredState{}, kick: make(chan struct{}, 1), outbox: make(chan transport.Report, 256)}
	cfg.Link.Outbox = a.outbox
	cfg.Link.Hello = a.hello
	cfg.Link.Apply = a.apply
	cfg.Link.Leader = a.leader.Load
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
	var wg sync.WaitGroup
	if a.cfg.LeaseName == "" {
		a.leader.Store(true)
	} else {
		wg.Add(1)
		go func() { defer wg.Done(); a.elect(ctx) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); a.catchUp(ctx) }()
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
					a.leader.Store(true)
					a.kickNow()
				},
				OnStoppedLeading: func() {
					a.cfg.Logger.Info("standing by", "identity", a.cfg.Identity)
					a.leader.Store(false)
				},
			},
		})
	}
}

func (a *Agent) kickNow() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// catchUp applies the newest desired states a standby kept, when it becomes
// the leader: the revisions it received while standing by are not sent again.
func (a *Agent) catchUp(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		a.mu.Lock()
		pending := make([]transport.DesiredState, 0, len(a.latest))
		for _, ds := range a.latest {
			pending = append(pending, ds)
		}
		a.mu.Unlock()
		for _, ds := range pending {
			if !a.leader.Load() {
				break
			}
			if _, err := a.rec.Apply(ctx, ds.Revision, ds.Hash, ds.Document); err != nil {
				a.cfg.Logger.Warn("applying a kept revision", "environment", ds.EnvironmentID, "revision", ds.Revision, "err", err)
			}
		}
	}
}

// hello reports the revisions the cluster has applied, read from the
// environments' namespaces, so the control plane sends only what is newer.
func (a *Agent) hello(ctx context.Context) transport.Hello {
	applied := map[string]int{}
	list, err := a.cfg.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: managedBy})
	if err != nil {
		a.cfg.Logger.Warn("reading applied revisions", "err", err)
	} else {
		for _, ns := range list.Items {
			env := ns.Labels[environmentIDKey]
			if n, err := strconv.Atoi(ns.Annotations[appliedRevisionAn]); err == nil && env != "" {
				applied[env] = n
			}
		}
	}
	facts := transport.Facts{OS: runtime.GOOS, Leader: a.leader.Load()}
	facts.Hostname, _ = os.Hostname()
	if v, err := a.cfg.Client.Discovery().ServerVersion(); err == nil {
		facts.KubernetesVersion = v.GitVersion
	}
	return transport.Hello{Protocol: transport.ProtocolVersion, Version: a.cfg.Version, Arch: runtime.GOARCH, Applied: applied, Facts: facts}
}

// apply reconciles a desired state when leading; a standby keeps it and
// acknowledges it as not applied by this replica.
func (a *Agent) apply(ctx context.Context, ds transport.DesiredState) transport.Ack {
	a.mu.Lock()
	if cur, ok := a.latest[ds.EnvironmentID]; !ok || ds.Revision > cur.Revision {
		a.latest[ds.EnvironmentID] = ds
	}
	a.mu.Unlock()
	ack := transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
	if !a.leader.Load() {
		ack.Ignored = true
		return ack
	}
	res, err := a.rec.Apply(ctx, ds.Revision, ds.Hash, ds.Document)
	if err != nil {
		a.cfg.Logger.Error("applying a revision", "environment", ds.EnvironmentID, "revision", ds.Revision, "err", err)
		for _, s := range ds.Document.Services {
			ack.Services = append(ack.Services, transport.ServiceOutcome{Service: s.Name, State: "failed", Reason: err.Error()})
		}
		return ack
	}
	ack.Ignored = res.Ignored
	for _, o := range res.Services {
		ack.Services = append(ack.Services, transport.ServiceOutcome{Service: o.Service, State: o.State, Reason: o.Reason})
	}
	return ack
}
