package reactions_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/projections"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is an injected clock that moves only when the test says so.

type world struct {
	t      *testing.T
	ctx    context.Context
	pool   *pgxpool.Pool
	cmd    *dispatch.Handler
	proj   *projections.Projections
	react  *reactions.Reactions
	clock  *testclock.Clock
	org    string
	proj1  string
	env    string
	prod   string
	svc    string
	clus   string
	people [2]dispatch.Context
	agent  dispatch.Context
}

func setup(t *testing.T) *world {
	t.Helper()
	pool := pgtest.Pool(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	store := eventstore.New(pool, nil)
	w := &world{t: t, ctx: context.Background(), pool: pool, clock: testclock.New(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))}
	w.cmd, err = dispatch.New(dispatch.Config{Store: store, Now: w.clock.Now})
	require.NoError(t, err)
	w.proj, err = projections.New(projections.Config{Store: store, Keys: seal.New(pool, mk, nil), Now: w.clock.Now})
	require.NoError(t, err)
	w.react, err = reactions.New(reactions.Config{Store: store, Commands: w.cmd, Documents: projections.Document, Reads: projections.ReadModels{}, Now: w.clock.Now, StallTimeout: time.Minute, ApprovalTTL: 72 * time.Hour})
	require.NoError(t, err)

	alice, bob := uuid.NewString(), uuid.NewString()
	w.people[0] = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice"}, Person: alice}
	w.people[1] = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: bob, Name: "bob"}, Person: bob}
	w.org, w.clus, w.proj1, w.env, w.prod, w.svc = uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	w.agent = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorAgent, ID: uuid.NewString(), Name: "agent-0"}}
	as := w.people[0]
	w.must(w.cmd.Organisation(w.ctx, as, w.org, domain.CreateOrganisation{OrgID: w.org, Name: "acme", Owner: alice}))
	w.must(w.cmd.Cluster(w.ctx, as, w.org, w.clus, domain.CreateCluster{ClusterID: w.clus, OrgID: w.org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: uuid.NewString(), TokenHash: "h", ExpiresAt: w.clock.Now().Add(time.Hour)}}))
	w.must(w.cmd.Project(w.ctx, as, w.org, w.proj1, domain.CreateProject{ProjectID: w.proj1, OrgID: w.org, Name: "shop"}))
	w.must(w.cmd.Project(w.ctx, as, w.org, w.proj1, domain.CreateEnvironment{EnvironmentID: w.env, Name: "staging", ClusterID: w.clus}))
	w.must(w.cmd.Project(w.ctx, as, w.org, w.proj1, domain.CreateEnvironment{EnvironmentID: w.prod, Name: "production", ClusterID: w.clus, Protected: true}))
	w.must(w.cmd.Project(w.ctx, as, w.org, w.proj1, domain.CreateService{ServiceID: w.svc, Name: "api", Source: domain.Source{Image: "api:1"},
		Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}, ProgressDeadlineSeconds: 120}))
	return w
}

func (w *world) must(_ dispatch.Result, err error) {
	w.t.Helper()
	require.NoError(w.t, err)
}

// settle runs the projections and the reactions until neither has work: a
// reaction's commands are events the projections handle, whose revisions the
// reactions handle in turn.
func (w *world) settle() {
	w.t.Helper()
	require.Eventually(w.t, func() bool {
		n1, err := w.proj.CatchUp(w.ctx)
		require.NoError(w.t, err)
		n2, err := w.react.CatchUp(w.ctx)
		require.NoError(w.t, err)
		if n1+n2 > 0 {
			return false
		}
		var total int64
		require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM events`).Scan(&total))
		for _, sub := range []string{projections.SubscriptionName, reactions.SubscriptionName} {
			_, handled, err := eventstore.Checkpoint(w.ctx, w.pool, sub)
			require.NoError(w.t, err)
			if handled != total {
				return false
			}
		}
		return true
	}, 20*time.Second, 5*time.Millisecond)
}

func (w *world) deploy(image string) string {
	w.t.Helper()
	dep := uuid.NewString()
	w.must(w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.Deploy{EnvironmentID: w.env, ServiceID: w.svc, ReleaseID: uuid.NewString(),
		DeploymentID: dep, Image: fmt.Sprintf("registry.example.com/%s@sha256:%064x", image, len(image))}))
	return dep
}

func (w *world) report(dep string, stage domain.DeploymentStatus, ready, desired int, detail string) {
	w.t.Helper()
	w.must(w.cmd.Deployment(w.ctx, w.agent, w.org, dep, domain.ReportStage{ClusterID: w.clus, Stage: stage, Ready: ready, Desired: desired, Detail: detail}))
}

type deploymentRow struct {
	status, reason, detail string
	stalled                bool
	supersededBy           string
}

func (w *world) deployment(dep string) deploymentRow {
	w.t.Helper()
	var r deploymentRow
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT status, reason, detail, stalled_since IS NOT NULL, coalesce(superseded_by::text, '')
		FROM deployments WHERE id = $1`, dep).Scan(&r.status, &r.reason, &r.detail, &r.stalled, &r.supersededBy))
	return r
}

func (w *world) stages(dep string) []string {
	w.t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT stage FROM deployment_stages WHERE deployment_id = $1 ORDER BY seq`, dep)
	require.NoError(w.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(w.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(w.t, rows.Err())
	return out
}

// latestDocument returns the newest revision's release of the service.
func (w *world) latestRelease() *desiredstate.Release {
	w.t.Helper()
	rev, err := projections.RevisionNumber(w.ctx, w.pool, w.env, 0)
	require.NoError(w.t, err)
	for _, s := range rev.Document.Services {
		if s.ID == w.svc {
			return s.Release
		}
	}
	return nil
}

func (w *world) fire() int {
	w.t.Helper()
	n, err := w.react.FireDue(w.ctx)
	require.NoError(w.t, err)
	w.settle()
	return n
}

// TestDeploymentLifecycle: a compiled revision delivers the deployment, the
// agent's stages move it to succeeded; a release that never becomes ready
// fails at its progress deadline (injected clock) with what the pods said,
// and the desired state goes back to the release before it; a newer
// deployment supersedes one in progress; a deployment without progress is
// flagged stalled and cleared when it moves; an open change set expires.
func TestDeploymentLifecycle(t *testing.T) {
	t.Parallel()
	w := setup(t)

	v1 := w.deploy("v1")
	w.settle()
	require.Equal(t, "delivering", w.deployment(v1).status)
	require.Equal(t, v1, w.latestRelease().DeploymentID, "the revision names the deployment")
	for _, s := range []domain.DeploymentStatus{domain.StatusStarting, domain.StatusProbing, domain.StatusSwitching, domain.StatusRetiring, domain.StatusSucceeded} {
		w.report(v1, s, 2, 2, "")
	}
	w.settle()
	require.Equal(t, []string{"delivering", "starting", "probing", "switching", "retiring", "succeeded"}, w.stages(v1))
	require.Equal(t, "succeeded", w.deployment(v1).status)

	// v2 never becomes ready: failed at the deadline (2 min, from its start).
	v2 := w.deploy("v2")
	w.settle()
	w.report(v2, domain.StatusStarting, 0, 2, "")
	w.report(v2, domain.StatusProbing, 0, 2, "ImagePullBackOff: pull access denied")
	w.settle()
	w.clock.Advance(119 * time.Second)
	w.fire()
	require.Equal(t, "probing", w.deployment(v2).status, "not before the deadline")
	w.clock.Advance(time.Second)
	require.Positive(t, w.fire())
	got := w.deployment(v2)
	require.Equal(t, "failed", got.status)
	require.Contains(t, got.reason, "ImagePullBackOff")
	require.Contains(t, got.reason, "0/2 pods ready")
	require.Equal(t, v1, w.latestRelease().DeploymentID, "the desired state is back on the release that ran before")

	// v3 is superseded by v4 at once.
	v3 := w.deploy("v3")
	v4 := w.deploy("v4")
	w.settle()
	require.Equal(t, "superseded", w.deployment(v3).status)
	require.Equal(t, v4, w.deployment(v3).supersededBy)
	require.Equal(t, "delivering", w.deployment(v4).status)
	require.Equal(t, v4, w.latestRelease().DeploymentID)

	// v4 stalls after starting (1 min without progress), and is cleared when it moves.
	w.report(v4, domain.StatusStarting, 0, 2, "")
	w.settle()
	w.clock.Advance(59 * time.Second)
	w.fire()
	require.False(t, w.deployment(v4).stalled, "not before the stall timeout")
	w.clock.Advance(time.Second)
	w.fire()
	require.True(t, w.deployment(v4).stalled)
	require.Equal(t, "starting", w.deployment(v4).status, "a stall is a flag, not a verdict")
	var stallAudit int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM audit_log WHERE action = 'deployment.stall' AND actor_kind = 'system'`).Scan(&stallAudit))
	require.Equal(t, 2, stallAudit, "stalls (v2 while probing, v4) are audited as system actions")
	w.report(v4, domain.StatusProbing, 1, 2, "")
	w.settle()
	require.False(t, w.deployment(v4).stalled)

	// An open change set expires after 72 h, audited as a system action.
	res, err := w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.Scale{EnvironmentID: w.prod, ServiceID: w.svc, Process: "web", Replicas: 3})
	require.NoError(t, err)
	cs := res.Events[0].(domain.ChangeSetOpened).ChangeSetID
	w.settle()
	w.clock.Advance(71 * time.Hour)
	w.fire()
	w.clock.Advance(time.Hour)
	w.fire()
	var status string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT status FROM changesets WHERE id = $1`, cs).Scan(&status))
	require.Equal(t, "expired", status)
	_, err = w.cmd.Project(w.ctx, w.people[1], w.org, w.proj1, domain.ApproveChangeSet{ChangeSetID: cs, Version: 1})
	require.ErrorIs(t, err, domain.ErrNotFound)

	rep, err := projections.Replay(w.ctx, w.pool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "replay equals live: %+v", rep)
}
