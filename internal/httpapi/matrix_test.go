package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

const shop = "/api/v1/orgs/acme/projects/shop"

// matrix reads every page of the project matrix, limit rows a page.
func (r *rollout) matrix(limit string) []api.MatrixRow {
	r.t.Helper()
	var all []api.MatrixRow
	next := ""
	for pages := 0; ; pages++ {
		require.Less(r.t, pages, 10, "the matrix's pages end")
		u := shop + "/matrix?limit=" + limit
		if next != "" {
			u += "&cursor=" + next
		}
		var page api.Page[api.MatrixRow]
		r.must(r.c.do("GET", u, r.root, nil), 200).json(r.t, &page)
		all = append(all, page.Items...)
		if page.Next == "" {
			return all
		}
		next = page.Next
	}
}

// TestProjectMatrix: the matrix answers, for each service and environment,
// what the target view of that service in that environment answers (release,
// latest deployment and its blockers, paused deploys), plus whether the
// latest desired state holds it; paged by service name; bad paging refused.
func TestProjectMatrix(t *testing.T) {
	r := newRollout(t)
	r.must(r.c.do("POST", shop+"/services", r.root, map[string]any{"name": "db", "image": r.image}), 201)
	r.must(r.c.do("POST", shop+"/services", r.root, map[string]any{"name": "worker", "image": r.image}), 201)
	dbT := shop + "/environments/staging/services/db"
	r.must(r.c.do("PUT", dbT+"/variables", r.root, map[string]any{"variables": []map[string]any{{"name": "URL", "value": "postgres://db"}}}), 200)
	r.must(r.c.do("PUT", target+"/variables", r.root, map[string]any{"variables": []map[string]any{{"name": "DB_URL", "value": "${{ db.URL }}"}}}), 200)
	apiDep := r.deploy()
	r.must(r.c.do("POST", dbT+"/deployments", r.root, map[string]any{}), 202)
	require.Eventually(t, func() bool {
		var tv api.TargetView
		r.must(r.c.do("GET", dbT, r.root, nil), 200).json(t, &tv)
		return tv.LatestDeployment != nil && tv.LatestDeployment.Status == string(domain.StatusDelivering)
	}, 20*time.Second, 50*time.Millisecond, "db's deployment is delivered")

	// What the target view says about a cell.
	check := func(rows []api.MatrixRow) {
		t.Helper()
		for _, row := range rows {
			require.Len(t, row.Cells, 2, row.Service.Name)
			require.Equal(t, "production", row.Cells[0].Environment, "environments in name order")
			require.Equal(t, "staging", row.Cells[1].Environment)
			for _, cl := range row.Cells {
				var tv api.TargetView
				r.must(r.c.do("GET", shop+"/environments/"+cl.Environment+"/services/"+row.Service.Name, r.root, nil), 200).json(t, &tv)
				require.Equal(t, tv.EnvironmentID, cl.EnvironmentID)
				require.Equal(t, tv.Service.ID, row.Service.ID)
				if tv.CurrentRelease == nil {
					require.Nil(t, cl.CurrentRelease, "%s in %s", row.Service.Name, cl.Environment)
				} else {
					require.NotNil(t, cl.CurrentRelease, "%s in %s", row.Service.Name, cl.Environment)
					require.Equal(t, tv.CurrentRelease.Number, cl.CurrentRelease.Number)
					require.Equal(t, tv.CurrentRelease.Image, cl.CurrentRelease.Image)
					require.Equal(t, tv.CurrentRelease.ID, cl.CurrentRelease.ID)
				}
				if tv.LatestDeployment == nil {
					require.Nil(t, cl.LatestDeployment, "%s in %s", row.Service.Name, cl.Environment)
				} else {
					require.NotNil(t, cl.LatestDeployment, "%s in %s", row.Service.Name, cl.Environment)
					want, got := *tv.LatestDeployment, *cl.LatestDeployment
					require.Equal(t, want.ID, got.ID)
					require.Equal(t, want.Status, got.Status)
					require.Equal(t, want.ReleaseNumber, got.ReleaseNumber)
					require.Equal(t, want.Image, got.Image)
					require.Equal(t, want.Blockers, got.Blockers)
					require.True(t, want.RequestedAt.Equal(got.RequestedAt))
				}
				require.Equal(t, tv.DeploysPaused == nil, cl.DeploysPaused == nil)
			}
		}
	}

	rows := r.matrix("100")
	require.Len(t, rows, 3)
	require.Equal(t, []string{"api", "db", "worker"}, []string{rows[0].Service.Name, rows[1].Service.Name, rows[2].Service.Name})
	check(rows)
	staging := rows[0].Cells[1]
	require.NotNil(t, staging.CurrentRelease)
	require.Equal(t, 1, staging.CurrentRelease.Number)
	require.NotNil(t, staging.LatestDeployment)
	require.Equal(t, apiDep, staging.LatestDeployment.ID)
	require.Equal(t, []string{api.BlockerDelivery}, staging.LatestDeployment.Blockers, "no agent: the cluster is Disconnected")
	require.Nil(t, rows[0].Cells[0].CurrentRelease, "api is not in production")
	require.Nil(t, rows[2].Cells[1].LatestDeployment, "worker was never deployed")
	require.False(t, staging.Held)

	// One row a page gives the same rows, in the same order.
	paged := r.matrix("1")
	require.Len(t, paged, 3)
	for i := range rows {
		require.Equal(t, rows[i].Service.ID, paged[i].Service.ID)
	}

	// A rollback pauses automatic deploys: the matrix says so.
	r.report(apiDep, domain.StatusStarting, 1, 1)
	r.report(apiDep, domain.StatusSucceeded, 1, 1)
	r.must(r.c.do("POST", target+"/deployments", r.root, map[string]any{}), 202)
	r.must(r.c.do("POST", target+"/rollback", r.root, map[string]any{"release": 1}), 202)
	require.Eventually(t, func() bool {
		cl := r.matrix("100")[0].Cells[1]
		return cl.DeploysPaused != nil && cl.LatestDeployment.Rollback && cl.LatestDeployment.Status == string(domain.StatusDelivering)
	}, 20*time.Second, 50*time.Millisecond, "the rollback is delivered and pauses automatic deploys")
	check(r.matrix("100"))

	// Deleting db holds api in staging, whose variable refers to it.
	r.must(r.c.do("DELETE", shop+"/services/db", r.root, nil), 204)
	require.Eventually(t, func() bool { return r.matrix("100")[0].Cells[1].Held }, 20*time.Second, 50*time.Millisecond)
	rows = r.matrix("100")
	require.Len(t, rows, 2, "a deleted service leaves the matrix")
	require.Equal(t, "worker", rows[1].Service.Name)
	require.Contains(t, rows[0].Cells[1].HeldReason, `"db"`)
	require.False(t, rows[0].Cells[0].Held, "production does not run api")
	require.False(t, rows[1].Cells[1].Held)
	check(rows)

	// Bad paging is refused.
	for _, q := range []string{"?limit=0", "?limit=1001", "?limit=x", "?cursor=nonsense"} {
		res := r.c.do("GET", shop+"/matrix"+q, r.root, nil)
		require.Equal(t, 400, res.status, q+": "+string(res.body))
	}
	r.must(r.c.do("GET", "/api/v1/orgs/acme/projects/nope/matrix", r.root, nil), 404)
}

// TestOrgDeploymentsInProgress: the organisation's deployments that are not
// over, newest first, with their project, environment, service and
// blockers; a finished one leaves the list; another status is refused.
func TestOrgDeploymentsInProgress(t *testing.T) {
	r := newRollout(t)
	const list = "/api/v1/orgs/acme/deployments"
	var none []api.DeploymentInProgress
	r.must(r.c.do("GET", list, r.root, nil), 200).items(t, &none)
	require.Empty(t, none)

	r.must(r.c.do("POST", shop+"/services", r.root, map[string]any{"name": "db", "image": r.image}), 201)
	first := r.deploy()
	var second api.DeployResponse
	r.must(r.c.do("POST", shop+"/environments/staging/services/db/deployments", r.root, map[string]any{}), 202).json(t, &second)
	require.NotNil(t, second.Deployment)

	var got []api.DeploymentInProgress
	require.Eventually(t, func() bool {
		got = nil
		r.must(r.c.do("GET", list+"?status=in-progress", r.root, nil), 200).items(t, &got)
		return len(got) == 2
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, second.Deployment.ID, got[0].ID, "newest first")
	require.Equal(t, first, got[1].ID)
	require.Equal(t, "db", got[0].Service)
	require.Equal(t, "api", got[1].Service)
	for _, d := range got {
		require.Equal(t, "shop", d.Project)
		require.Equal(t, "staging", d.Environment)
		require.Equal(t, r.cluster, d.ClusterID)
		require.False(t, d.Terminal())
	}
	require.Equal(t, []string{api.BlockerDelivery}, got[1].Blockers, "delivering on a Disconnected cluster")

	// Paged one at a time: the same two, in the same order.
	var page api.Page[api.DeploymentInProgress]
	r.must(r.c.do("GET", list+"?limit=1", r.root, nil), 200).json(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, got[0].ID, page.Items[0].ID)
	require.NotEmpty(t, page.Next)
	cur := page.Next
	page = api.Page[api.DeploymentInProgress]{}
	r.must(r.c.do("GET", list+"?limit=1&cursor="+cur, r.root, nil), 200).json(t, &page)
	require.Len(t, page.Items, 1)
	require.Equal(t, got[1].ID, page.Items[0].ID)
	require.Empty(t, page.Next)

	// api's deployment succeeds: only db's is left.
	r.report(first, domain.StatusStarting, 1, 1)
	r.report(first, domain.StatusSucceeded, 1, 1)
	require.Eventually(t, func() bool {
		got = nil
		r.must(r.c.do("GET", list, r.root, nil), 200).items(t, &got)
		return len(got) == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.Equal(t, second.Deployment.ID, got[0].ID)

	for _, q := range []string{"?status=succeeded", "?status=", "?limit=0", "?cursor=nonsense"} {
		res := r.c.do("GET", list+q, r.root, nil)
		if q == "?status=" {
			require.Equal(t, 200, res.status, "an empty status is the default")
			continue
		}
		require.Equal(t, 400, res.status, q+": "+string(res.body))
	}
	r.must(r.c.do("GET", "/api/v1/orgs/nope/deployments", r.root, nil), 404)
}
