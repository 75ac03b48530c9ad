package httpapi

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// clusterStatuses reads the state of each cluster once, for the blockers of
// deployments on them.
type clusterStatuses struct {
	a    *API
	ctx  context.Context
	seen map[string]api.ClusterStatus
}

func (s *clusterStatuses) of(clusterID string) (api.ClusterStatus, error) {
	if st, ok := s.seen[clusterID]; ok {
		return st, nil
	}
	st, err := s.a.clusterStatus(s.ctx, clusterID)
	if err != nil {
		return st, err
	}
	if s.seen == nil {
		s.seen = map[string]api.ClusterStatus{}
	}
	s.seen[clusterID] = st
	return st, nil
}

// projectMatrix answers a page of the project's services (by name), each
// with a cell per environment: the services in one query, the cells in
// another, and each environment's cluster state once.
func (a *API) projectMatrix(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	envs, err := query.Environments(ctx, a.pool, c.project.ID)
	if err != nil {
		return 0, nil, err
	}
	svcs, err := query.ServicesAfter(ctx, a.pool, c.project.ID, after, c.page.limit+1)
	if err != nil {
		return 0, nil, err
	}
	envIDs := make([]string, len(envs))
	for i, e := range envs {
		envIDs[i] = e.ID
	}
	svcIDs := make([]string, len(svcs))
	for i, s := range svcs {
		svcIDs[i] = s.ID
	}
	cells, err := query.MatrixCells(ctx, a.pool, envIDs, svcIDs)
	if err != nil {
		return 0, nil, err
	}
	byID := make(map[[2]string]query.MatrixCell, len(cells))
	for _, cl := range cells {
		byID[[2]string{cl.EnvironmentID, cl.ServiceID}] = cl
	}
	st := clusterStatuses{a: a, ctx: ctx}
	rows := make([]api.MatrixRow, len(svcs))
	for i, s := range svcs {
		rows[i] = api.MatrixRow{Service: s, Cells: make([]api.MatrixCell, len(envs))}
		for j, e := range envs {
			q := byID[[2]string{e.ID, s.ID}]
			out := api.MatrixCell{EnvironmentID: e.ID, Environment: e.Name, CurrentRelease: q.CurrentRelease,
				Held: q.Held, HeldReason: q.HeldReason, DeploysPaused: q.DeploysPaused}
			if d := q.LatestDeployment; d != nil {
				cs, err := st.of(e.ClusterID)
				if err != nil {
					return 0, nil, err
				}
				out.LatestDeployment = &api.DeploymentView{Deployment: *d, Blockers: blockers(*d, cs)}
			}
			rows[i].Cells[j] = out
		}
	}
	return http.StatusOK, rows, nil
}

// orgDeployments answers the organisation's deployments in progress (the
// only filter: status=in-progress, also when status is absent), newest
// first, in one query, with each cluster's state read once.
func (a *API) orgDeployments(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if s := r.URL.Query().Get("status"); s != "" && s != "in-progress" {
		return 0, nil, badRequest("status must be in-progress")
	}
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	ds, err := query.DeploymentsInProgress(ctx, a.pool, c.org.ID, after, c.page.limit+1)
	if err != nil {
		return 0, nil, err
	}
	st := clusterStatuses{a: a, ctx: ctx}
	out := make([]api.DeploymentInProgress, len(ds))
	for i, d := range ds {
		cs, err := st.of(d.ClusterID)
		if err != nil {
			return 0, nil, err
		}
		out[i] = api.DeploymentInProgress{Deployment: d.Deployment, Project: d.Project, Environment: d.Environment, Service: d.Service,
			ClusterID: d.ClusterID, Blockers: blockers(d.Deployment, cs)}
	}
	return http.StatusOK, out, nil
}
