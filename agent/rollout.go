package agent

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Defaults of the rollout loop.
const (
	// DefaultProgressEvery is how often an environment with a rollout under
	// way is reconciled again.
	DefaultProgressEvery = time.Second
	// DefaultRetryMin and DefaultRetryMax bound the backoff after a
	// transient Kubernetes error.
	DefaultRetryMin = time.Second
	DefaultRetryMax = 30 * time.Second
	// justFinished is how long a succeeded rollout is reported again after
	// a reconnect.
	justFinished = 10 * time.Minute
	// maxQueued bounds the reports that must not be dropped (stages,
	// acknowledgements of retried revisions) waiting for the link; past it
	// the oldest go, and the next reconnect reports the current stages.
	maxQueued = 1024
)

// due is when an environment is reconciled again by the progress loop.
type due struct {
	at time.Time
	// backoff is the last wait after a transient error; 0 after a pass
	// that met none.
	backoff time.Duration
}

// nextBackoff doubles prev from lo up to hi.
func nextBackoff(prev, lo, hi time.Duration) time.Duration {
	if prev <= 0 {
		return min(lo, hi)
	}
	return min(prev*2, hi)
}

// jitter spreads a wait over [d/2, d], so agents that met the same outage
// do not come back in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// transient reports whether a pass should be tried again after a backoff.
func transient(res reconcile.Result, err error) bool {
	if err != nil {
		return reconcile.IsTransient(err)
	}
	return res.Retry()
}

// pass reconciles one desired state once, reports the rollouts' stages and
// schedules the next pass: soon while a rollout is under way, after a
// backoff when something met a transient error, never once settled.
func (a *Agent) pass(ctx context.Context, ds transport.DesiredState) (reconcile.Result, error) {
	apply := a.rec.Apply
	if ds.Rewind {
		apply = a.rec.Rewind
	}
	res, err := apply(ctx, ds.Revision, ds.Hash, ds.Document)
	if res.Recorded && ds.Rewind {
		a.mu.Lock()
		delete(a.rewinding, ds.EnvironmentID)
		if cur, ok := a.latest[ds.EnvironmentID]; ok {
			cur.Rewind = false
			a.latest[ds.EnvironmentID] = cur
		}
		a.mu.Unlock()
	}
	if err == nil && !res.Ignored && a.leader.Load() {
		for _, r := range a.stages.observe(ds.EnvironmentID, res.Rollouts, res.Services, time.Now().UTC()) {
			a.send(transport.TypeStage, r)
		}
	}
	a.schedule(ds, res, err)
	return res, err
}

// schedule records when the environment's next pass is due. A pass of a
// desired state that is no longer the latest (a newer one arrived while it
// ran) leaves the schedule to the newer one's passes.
func (a *Agent) schedule(ds transport.DesiredState, res reconcile.Result, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	env := ds.EnvironmentID
	if cur, ok := a.latest[env]; !ok || cur.Revision != ds.Revision || cur.Hash != ds.Hash {
		return
	}
	now := time.Now()
	switch {
	case transient(res, err):
		b := nextBackoff(a.due[env].backoff, a.cfg.RetryMin, a.cfg.RetryMax)
		a.due[env] = due{at: now.Add(jitter(b)), backoff: b}
	case errors.Is(err, context.Canceled):
		// The link's context ended the pass (a reconnect): it is not done.
		a.due[env] = due{at: now.Add(a.cfg.ProgressEvery)}
	case err != nil || res.Ignored || res.Settled:
		delete(a.due, env)
	default:
		a.due[env] = due{at: now.Add(a.cfg.ProgressEvery)}
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// progressLoop reconciles again the environments whose pass is due, while
// this replica leads: rollouts go on without new revisions, transient
// errors are retried, and a settled environment costs nothing.
func (a *Agent) progressLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if !a.leader.Load() {
			// A standby reconciles nothing; becoming the leader wakes it.
			select {
			case <-ctx.Done():
				return
			case <-a.wake:
			}
			continue
		}
		a.mu.Lock()
		wait := time.Hour
		now := time.Now()
		for env, d := range a.due {
			if a.applying[env] {
				continue
			}
			wait = min(wait, max(d.at.Sub(now), 0))
		}
		a.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-a.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			continue
		case <-timer.C:
		}
		if !a.leader.Load() {
			continue
		}
		a.mu.Lock()
		var pending []transport.DesiredState
		now = time.Now()
		for env, d := range a.due {
			ds, ok := a.latest[env]
			switch {
			case !ok:
				delete(a.due, env)
			case !a.applying[env] && !d.at.After(now):
				pending = append(pending, ds)
			}
		}
		a.mu.Unlock()
		for _, ds := range pending {
			if ctx.Err() != nil || !a.leader.Load() {
				break
			}
			res, err := a.pass(ctx, ds)
			switch {
			case err != nil && !errors.Is(err, context.Canceled):
				a.cfg.Logger.Warn("reconciling an environment", "environment", ds.EnvironmentID, "revision", ds.Revision, "err", err)
			case err == nil && res.Recorded:
				// Applied here rather than on delivery (a retry, a new
				// leader catching up): the control plane learns it from
				// this acknowledgement.
				a.send(transport.TypeAck, ackOf(ds, res, nil))
			}
		}
	}
}

// catchUp makes every kept desired state due now: a new leader applies the
// revisions it received while standing by, and continues the rollouts the
// old leader left under way.
func (a *Agent) catchUp() {
	a.mu.Lock()
	now := time.Now()
	for env := range a.latest {
		a.due[env] = due{at: now}
	}
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// ackOf is the acknowledgement of a revision after a pass.
func ackOf(ds transport.DesiredState, res reconcile.Result, err error) transport.Ack {
	ack := transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
	if err != nil {
		for _, s := range ds.Document.Services {
			ack.Services = append(ack.Services, transport.ServiceOutcome{Service: s.Name, State: reconcile.StateFailed, Reason: err.Error()})
		}
		return ack
	}
	ack.Ignored = res.Ignored
	for _, o := range res.Services {
		ack.Services = append(ack.Services, transport.ServiceOutcome{Service: o.Service, State: o.State, Reason: o.Reason})
	}
	return ack
}

// send queues a report that must not be dropped (a stage, an
// acknowledgement): unlike status and logs, it waits for the link.
func (a *Agent) send(typ string, payload any) {
	a.qmu.Lock()
	if len(a.queue) >= maxQueued {
		a.queue = a.queue[1:]
		a.dropped.Add(1)
	}
	a.queue = append(a.queue, transport.Report{Type: typ, Payload: payload})
	a.qmu.Unlock()
	select {
	case a.queued <- struct{}{}:
	default:
	}
}

// sendLoop moves queued reports to the link's outbox, waiting while the
// outbox is full (the link is down).
func (a *Agent) sendLoop(ctx context.Context) {
	for {
		a.qmu.Lock()
		var next transport.Report
		ok := len(a.queue) > 0
		if ok {
			next = a.queue[0]
			a.queue = a.queue[1:]
		}
		a.qmu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-a.queued:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case a.outbox <- next:
		}
	}
}

// onConnected reports again, after each (re)connection, the stage of every
// rollout under way or just finished: the control plane may have missed
// reports while the link was down.
func (a *Agent) onConnected() {
	if !a.leader.Load() {
		return
	}
	for _, r := range a.stages.current(time.Now().UTC(), justFinished) {
		a.send(transport.TypeStage, r)
	}
}

// stageTracker remembers the last stage reported of each service's rollout,
// so that each stage is reported once, in order, and a report goes out
// only when something changed.
type stageTracker struct {
	mu   sync.Mutex
	last map[stageKey]*stageEntry
}

type stageKey struct{ env, service string }

type stageEntry struct {
	rep transport.StageReport
	// finished is when the rollout was seen succeeded; zero before.
	finished time.Time
}

func newStageTracker() *stageTracker { return &stageTracker{last: map[stageKey]*stageEntry{}} }

// observe takes an environment's rollouts and service outcomes after a
// pass and returns the
// reports to send: every stage reached since the last report, in order, even
// when one pass went through several of them; one report when only the pod
// counts or the detail changed; nothing when nothing did. A rollout seen for
// the first time already complete, with nothing done, is reported as
// succeeded only (this replica just started or took over: the control
// plane may have missed the end). Rollouts of documents without a
// deployment id are not reported. A service with no rollout in this pass
// (an error before its objects were applied) keeps what was reported, so a
// passing error does not make the stages start over.
func (t *stageTracker) observe(env string, rollouts []reconcile.Rollout, services []reconcile.Outcome, now time.Time) []transport.StageReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Followed: the services of the document that are not held, less those
	// whose rollout has no deployment id.
	followed := map[string]bool{}
	for _, o := range services {
		if o.State != reconcile.StateHeld {
			followed[o.Service] = true
		}
	}
	var out []transport.StageReport
	for _, ro := range rollouts {
		k := stageKey{env, ro.Service}
		idx := reconcile.StageIndex(ro.Stage)
		if ro.DeploymentID == "" || idx < 0 {
			delete(followed, ro.Service)
			continue
		}
		cur := transport.StageReport{EnvironmentID: env, DeploymentID: ro.DeploymentID, Service: ro.Service, Release: ro.Release,
			Stage: ro.Stage, Ready: ro.Ready, Desired: ro.Desired, Detail: ro.Detail, Time: now}
		prev := t.last[k]
		from := 0
		switch {
		case prev == nil || prev.rep.DeploymentID != ro.DeploymentID || prev.rep.Release != ro.Release:
			if prev == nil && ro.Stage == reconcile.StageSucceeded && !ro.Changed {
				from = idx
			}
		default:
			pi := reconcile.StageIndex(prev.rep.Stage)
			if idx < pi {
				// Stages do not go back; a release that stopped serving
				// (a hand edit) shows in the next rollout.
				continue
			}
			if idx == pi {
				if prev.rep.Ready == cur.Ready && prev.rep.Desired == cur.Desired && prev.rep.Detail == cur.Detail {
					continue
				}
				from = idx
			} else {
				from = pi + 1
			}
		}
		for i := from; i <= idx; i++ {
			r := cur
			r.Stage = reconcile.Stages[i]
			out = append(out, r)
		}
		e := &stageEntry{rep: cur}
		if ro.Stage == reconcile.StageSucceeded {
			e.finished = now
			if prev != nil && !prev.finished.IsZero() && prev.rep.DeploymentID == cur.DeploymentID {
				e.finished = prev.finished
			}
		}
		t.last[k] = e
	}
	// Services gone from the document, held or without a deployment id are
	// no longer followed.
	for k := range t.last {
		if k.env == env && !followed[k.service] {
			delete(t.last, k)
		}
	}
	return out
}

// current returns the last report of every rollout under way, or finished
// within window, by environment and service.
func (t *stageTracker) current(now time.Time, window time.Duration) []transport.StageReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []transport.StageReport
	for _, e := range t.last {
		if e.finished.IsZero() || now.Sub(e.finished) < window {
			out = append(out, e.rep)
		}
	}
	sortReports(out)
	return out
}

// reset forgets everything: a replica that stops leading stops reporting,
// and one that leads again must not trust what it saw before.
func (t *stageTracker) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.last)
}

func sortReports(rs []transport.StageReport) {
	slices.SortFunc(rs, func(a, b transport.StageReport) int {
		return cmp.Or(strings.Compare(a.EnvironmentID, b.EnvironmentID), strings.Compare(a.Service, b.Service))
	})
}
