package reactions_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
)

// gitWorld adds a Git service to the world, tracked on main in staging and
// production.
func gitWorld(t *testing.T) (*world, string) {
	t.Helper()
	w := setup(t)
	git := uuid.NewString()
	w.must(w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.CreateService{ServiceID: git, Name: "web",
		Source:    domain.Source{GitURL: "https://git.example.com/acme/web.git", GitBranch: "main"},
		Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}}))
	return w, git
}

func commitN(n int) string { return strings.Repeat(string(rune('a'+n%6)), 39) + string(rune('0'+n%10)) }

// push records a push delivery of commit to main for the service, as the
// webhook endpoint does, and settles.
func (w *world) push(service, commit string, envs ...string) string {
	w.t.Helper()
	id := domain.DeliveryID(w.proj1, "github", uuid.NewString())
	_, err := w.cmd.Delivery(w.ctx, dispatch.Context{Actor: domain.System("webhook")}, w.org, id, domain.RecordDelivery{ProjectID: w.proj1,
		Provider: "github", ForgeID: uuid.NewString(), Event: "push", Ref: "refs/heads/main", Branch: "main", Commit: commit,
		Outcome: domain.DeliveryBuilding, Builds: []domain.DeliveryBuild{{ServiceID: service, ClusterID: w.clus, Environments: envs, Repository: "https://git.example.com/acme/web.git"}}})
	require.NoError(w.t, err)
	w.settle()
	return domain.BuildID(service, commit, w.clus)
}

func (w *world) buildStatus(id string) string {
	w.t.Helper()
	var st string
	require.NoError(w.t, w.pool.QueryRow(w.ctx, `SELECT status FROM builds WHERE id = $1`, id).Scan(&st))
	return st
}

func (w *world) reportBuild(id string, r domain.ReportBuild) {
	w.t.Helper()
	r.ClusterID = w.clus
	_, err := w.cmd.Build(w.ctx, w.agent, w.org, id, r)
	require.NoError(w.t, err)
	w.settle()
}

// A cluster runs at most two builds at once; the rest wait in the order
// they came and start as slots free up. Builds of different services do not
// supersede each other.
func TestBuildsWaitForTheirClusterInOrder(t *testing.T) {
	t.Parallel()
	w, _ := gitWorld(t)
	var ids []string
	for i := 0; i < 4; i++ {
		svc := uuid.NewString()
		w.must(w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.CreateService{ServiceID: svc, Name: "svc" + string(rune('a'+i)),
			Source: domain.Source{GitURL: "https://git.example.com/acme/s.git", GitBranch: "main"}, Processes: []domain.Process{{Name: "web", Replicas: 1}}}))
		ids = append(ids, w.push(svc, commitN(i), w.env))
	}
	require.Equal(t, []string{"running", "running", "queued", "queued"}, w.statuses(ids...))
	w.reportBuild(ids[1], domain.ReportBuild{State: "failed", ExitCode: 2, Reason: "boom"})
	require.Equal(t, []string{"running", "failed", "running", "queued"}, w.statuses(ids...), "the oldest waiting build takes the slot")
	_, err := w.cmd.Build(w.ctx, w.people[0], w.org, ids[3], domain.CancelBuild{Reason: "cancelled by alice"})
	require.NoError(t, err)
	w.settle()
	require.Equal(t, []string{"running", "failed", "running", "cancelled"}, w.statuses(ids...))
}

func (w *world) statuses(ids ...string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = w.buildStatus(id)
	}
	return out
}

// A newer push to the same branch cancels the older builds of it, queued
// or running; the cancelled one never deploys.
func TestANewerPushCancelsTheOlderBuild(t *testing.T) {
	t.Parallel()
	w, git := gitWorld(t)
	first := w.push(git, commitN(1), w.env)
	require.Equal(t, "running", w.buildStatus(first))
	second := w.push(git, commitN(2), w.env)
	require.Equal(t, []string{"cancelled", "running"}, w.statuses(first, second))
	var reason, by string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT reason, cancelled_by::text FROM builds WHERE id = $1`, first).Scan(&reason, &by))
	require.Contains(t, reason, "superseded by a newer build of main")
	require.Equal(t, second, by)
	// Its late success changes nothing.
	w.reportBuild(first, domain.ReportBuild{State: "succeeded", Image: "localhost:30500/shop/web", Digest: "sha256:" + strings.Repeat("1", 64)})
	require.Equal(t, "cancelled", w.buildStatus(first))
	var n int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM deployments WHERE service_id = $1`, git).Scan(&n))
	require.Zero(t, n)
}

// A build that runs past its timeout fails as timed out, by the injected
// clock; a success deploys its image to the environments it names, and a
// rollback's pause makes the next one wait until resumed.
func TestBuildTimeoutAndDeployOfASuccess(t *testing.T) {
	t.Parallel()
	w, git := gitWorld(t)
	slow := w.push(git, commitN(1), w.env)
	w.clock.Advance(29 * time.Minute)
	_, err := w.react.FireDue(w.ctx)
	require.NoError(t, err)
	w.settle()
	require.Equal(t, "running", w.buildStatus(slow))
	w.clock.Advance(2 * time.Minute)
	_, err = w.react.FireDue(w.ctx)
	require.NoError(t, err)
	w.settle()
	require.Equal(t, "timed_out", w.buildStatus(slow))

	ok := w.push(git, commitN(2), w.env)
	digest := "sha256:" + strings.Repeat("2", 64)
	w.reportBuild(ok, domain.ReportBuild{State: "running", Commit: commitN(2)})
	w.reportBuild(ok, domain.ReportBuild{State: "succeeded", Image: "localhost:30500/shop/web", Digest: digest})
	var image string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT r.image FROM deployments d JOIN releases r ON r.id = d.release_id
		WHERE d.service_id = $1 AND d.environment_id = $2`, git, w.env).Scan(&image))
	require.Equal(t, "localhost:30500/shop/web@"+digest, image, "the success deploys its image")

	// Roll back: the next push builds, and its deploy waits.
	var rel1 string
	var num int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT id::text, number FROM releases WHERE service_id = $1 AND environment_id = $2`, git, w.env).Scan(&rel1, &num))
	w.must(w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.Rollback{EnvironmentID: w.env, ServiceID: git, ReleaseID: rel1, DeploymentID: uuid.NewString(),
		Release: domain.ReleaseRef{EnvironmentID: w.env, ServiceID: git, Number: num, Image: image}}))
	w.settle()
	next := w.push(git, commitN(3), w.env)
	w.reportBuild(next, domain.ReportBuild{State: "succeeded", Image: "localhost:30500/shop/web", Digest: "sha256:" + strings.Repeat("3", 64)})
	var deps int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM deployments WHERE service_id = $1 AND environment_id = $2`, git, w.env).Scan(&deps))
	require.Equal(t, 2, deps, "the deploy and the rollback; the paused one waits")
	var waits int
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM audit_log WHERE action = 'service.deploy.wait'`).Scan(&waits))
	require.Equal(t, 1, waits, "the waiting deploy is visible")
	var waiting string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT waiting_image FROM deploy_pauses WHERE service_id = $1`, git).Scan(&waiting))
	require.Equal(t, "localhost:30500/shop/web@sha256:"+strings.Repeat("3", 64), waiting, "the service's pause names what waits")
	w.must(w.cmd.Project(w.ctx, w.people[0], w.org, w.proj1, domain.ResumeDeploys{EnvironmentID: w.env, ServiceID: git}))
	w.settle()
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT count(*) FROM deployments WHERE service_id = $1 AND environment_id = $2`, git, w.env).Scan(&deps))
	require.Equal(t, 3, deps, "resuming deploys what waited")
}
