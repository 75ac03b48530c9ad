package agent

import (
	"context"
	"sync"
	"time"

	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/transport"
)

// builds runs the control plane's builds in the cluster while this replica
// leads: each set the control plane sends replaces the last (a standby keeps
// it, to start from when it takes over), and the leader's runner makes the
// build Jobs match it and reports on them. A replica that stops leading
// stops its runner; the next leader's runner reports the builds' states
// again, which the control plane takes idempotently.
type builds struct {
	cfg build.Config
	a   *Agent

	mu     sync.Mutex
	want   []transport.BuildSpec
	got    bool // a set has arrived since the start
	runner *build.Runner
	wake   chan struct{}
}

func newBuilds(a *Agent, cfg build.Config) *builds {
	cfg.Client = a.cfg.Client
	if cfg.Logger == nil {
		cfg.Logger = a.cfg.Logger
	}
	cfg.Report = func(r transport.BuildReport) { a.send(transport.TypeBuildReport, r) }
	cfg.Logs = func(l transport.BuildLogs) { a.report(transport.TypeBuildLogs, l) }
	return &builds{cfg: cfg, a: a, wake: make(chan struct{}, 1)}
}

// set takes the control plane's set of builds.
func (b *builds) set(s transport.Builds) {
	b.mu.Lock()
	b.want, b.got = s.Builds, true
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// running counts the builds whose Job has not finished.
func (b *builds) running() int {
	b.mu.Lock()
	r := b.runner
	b.mu.Unlock()
	if r == nil {
		return 0
	}
	return r.Running()
}

// loop starts a runner when this replica leads and stops it when it does
// not, and hands each new set to it; a set that could not be applied (the
// API server did not answer) is tried again with backoff.
func (b *builds) loop(ctx context.Context) {
	var stop context.CancelFunc
	var done chan struct{}
	defer func() {
		if stop != nil {
			stop()
			<-done
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	retry := time.Duration(0)
	dirty := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
			dirty = true
		case <-tick.C:
		}
		leading := b.a.leader.Load()
		switch {
		case leading && stop == nil:
			r, err := build.New(b.cfg)
			if err != nil {
				b.a.cfg.Logger.Error("builds cannot run", "err", err)
				return
			}
			rctx, cancel := context.WithCancel(ctx)
			stop, done = cancel, make(chan struct{})
			go func() {
				defer close(done)
				if err := r.Run(rctx); err != nil && rctx.Err() == nil {
					b.a.cfg.Logger.Warn("the build runner stopped", "err", err)
				}
			}()
			b.mu.Lock()
			b.runner = r
			b.mu.Unlock()
			dirty = true
		case !leading && stop != nil:
			stop()
			<-done
			stop = nil
			b.mu.Lock()
			b.runner = nil
			b.mu.Unlock()
			continue
		}
		if !leading || !dirty {
			continue
		}
		b.mu.Lock()
		want, got, r := b.want, b.got, b.runner
		b.mu.Unlock()
		if !got {
			// Nothing known yet: the set arrives after the connect, and
			// an empty guess would stop every build running now.
			continue
		}
		if err := r.Set(ctx, want); err != nil {
			retry = nextBackoff(retry, time.Second, 30*time.Second)
			b.a.cfg.Logger.Warn("applying the set of builds; retrying", "err", err, "in", retry)
			if !sleepCtx(ctx, jitter(retry)) {
				return
			}
			continue
		}
		retry, dirty = 0, false
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
