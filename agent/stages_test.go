package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/transport"
)

// These tests need no cluster: the stage reports' bookkeeping and the
// backoff, with explicit times.

func TestReconcileStagesAreTheProtocols(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{transport.StageStarting, transport.StageProbing, transport.StageSwitching,
		transport.StageRetiring, transport.StageSucceeded}, reconcile.Stages)
}

// stagesOf lists the stages of reports, with the pod counts when not 0/0.
func stagesOf(rs []transport.StageReport) []string {
	var out []string
	for _, r := range rs {
		s := r.DeploymentID + " " + r.Stage
		if r.Desired > 0 {
			s += " " + string(rune('0'+r.Ready)) + "/" + string(rune('0'+r.Desired))
		}
		out = append(out, s)
	}
	return out
}

func TestStageReportsEachStageOnceInOrder(t *testing.T) {
	t.Parallel()
	tr := newStageTracker()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ro := func(dep string, rel int, stage string, ready int, detail string) reconcile.Rollout {
		return reconcile.Rollout{Service: "api", DeploymentID: dep, Release: rel, Stage: stage, Ready: ready, Desired: 2, Detail: detail, Changed: true}
	}
	applied := []reconcile.Outcome{{Service: "api", State: reconcile.StateApplied}}
	observe := func(at time.Duration, rs ...reconcile.Rollout) []string {
		return stagesOf(tr.observe("env", rs, applied, t0.Add(at)))
	}

	// Applied and found not ready in one pass: starting, then probing.
	require.Equal(t, []string{"d1 starting 0/2", "d1 probing 0/2"}, observe(0, ro("d1", 1, reconcile.StageProbing, 0, "")))
	require.Empty(t, observe(time.Second, ro("d1", 1, reconcile.StageProbing, 0, "")), "nothing changed, nothing sent")
	require.Equal(t, []string{"d1 probing 1/2"}, observe(2*time.Second, ro("d1", 1, reconcile.StageProbing, 1, "")), "a pod became ready")
	got := tr.observe("env", []reconcile.Rollout{ro("d1", 1, reconcile.StageProbing, 1, "CrashLoopBackOff")}, applied, t0.Add(3*time.Second))
	require.Len(t, got, 1)
	require.Equal(t, "CrashLoopBackOff", got[0].Detail, "the detail changed")
	require.Equal(t, t0.Add(3*time.Second), got[0].Time)
	require.Equal(t, "env", got[0].EnvironmentID)
	require.Equal(t, 1, got[0].Release)

	// A pass that met an error before the rollout (a transient one, say)
	// has no rollout of it: the stages do not start over.
	require.Empty(t, tr.observe("env", nil, []reconcile.Outcome{{Service: "api", State: reconcile.StateRetrying}}, t0.Add(3*time.Second)))
	require.Equal(t, []string{"d1 probing 1/2"}, stagesOf(tr.current(t0.Add(3*time.Second), justFinished)))

	// Ready, switched and past the grace in one pass: each stage, in order.
	require.Equal(t, []string{"d1 switching 2/2", "d1 retiring 2/2", "d1 succeeded 2/2"},
		observe(4*time.Second, ro("d1", 1, reconcile.StageSucceeded, 2, "")))
	require.Empty(t, observe(5*time.Second, ro("d1", 1, reconcile.StageSucceeded, 2, "")))
	require.Empty(t, observe(6*time.Second, ro("d1", 1, reconcile.StageProbing, 1, "")), "stages do not go back")

	// After a reconnect: what is under way or just finished.
	require.Equal(t, []string{"d1 succeeded 2/2"}, stagesOf(tr.current(t0.Add(time.Minute), justFinished)))
	require.Empty(t, tr.current(t0.Add(4*time.Second+justFinished), justFinished), "finished long ago")

	// The control plane gives up on d2 and names release 1 with d1 again.
	require.Equal(t, []string{"d2 starting 0/2", "d2 probing 0/2"}, observe(7*time.Second, ro("d2", 2, reconcile.StageProbing, 0, "")))
	require.Equal(t, []string{"d2 probing 0/2"}, stagesOf(tr.current(t0.Add(time.Hour), justFinished)), "under way, however long")
	require.Equal(t, []string{"d1 starting 2/2", "d1 probing 2/2", "d1 switching 2/2", "d1 retiring 2/2", "d1 succeeded 2/2"},
		observe(8*time.Second, ro("d1", 1, reconcile.StageSucceeded, 2, "")))

	// A service without a deployment id (an old control plane) is not
	// reported, nor followed.
	require.Empty(t, observe(9*time.Second, ro("", 3, reconcile.StageProbing, 0, "")))
	require.Empty(t, tr.current(t0.Add(9*time.Second), justFinished))

	// A replica that just started or took over, finding a rollout complete
	// with nothing to do, reports its end once; one that finds it under way
	// reports every stage up to where it is.
	tr.reset()
	quiet := ro("d1", 1, reconcile.StageSucceeded, 2, "")
	quiet.Changed = false
	require.Equal(t, []string{"d1 succeeded 2/2"}, observe(10*time.Second, quiet))
	require.Empty(t, observe(11*time.Second, quiet))
	tr.reset()
	require.Equal(t, []string{"d3 starting 2/2", "d3 probing 2/2", "d3 switching 2/2", "d3 retiring 2/2"},
		observe(12*time.Second, ro("d3", 3, reconcile.StageRetiring, 2, "")))

	// A held service, or one gone from the document, is forgotten.
	require.Empty(t, tr.observe("env", nil, []reconcile.Outcome{{Service: "api", State: reconcile.StateHeld}}, t0.Add(13*time.Second)))
	require.Empty(t, tr.current(t0.Add(13*time.Second), justFinished))
	require.Equal(t, []string{"d3 starting 2/2", "d3 probing 2/2", "d3 switching 2/2", "d3 retiring 2/2"},
		observe(14*time.Second, ro("d3", 3, reconcile.StageRetiring, 2, "")))
	applied = nil
	require.Empty(t, observe(15*time.Second))
	require.Empty(t, tr.current(t0.Add(15*time.Second), justFinished))
}

func TestBackoffDoublesWithinBoundsAndJitters(t *testing.T) {
	t.Parallel()
	var b time.Duration
	var seen []time.Duration
	for range 8 {
		b = nextBackoff(b, time.Second, 30*time.Second)
		seen = append(seen, b)
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		30 * time.Second, 30 * time.Second, 30 * time.Second}, seen)
	for range 1000 {
		j := jitter(30 * time.Second)
		require.GreaterOrEqual(t, j, 15*time.Second)
		require.LessOrEqual(t, j, 30*time.Second)
	}
}
