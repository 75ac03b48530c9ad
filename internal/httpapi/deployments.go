package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func (a *API) deploy(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.DeployRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ref := strings.TrimSpace(req.Image)
	ctx := r.Context()
	if ref == "" && c.service.Source.GitURL != "" {
		return a.deployGit(ctx, r, c, req)
	}
	if req.Commit != "" {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "commit is for a Git service's deploy without an image")
	}
	if ref == "" {
		ref = c.service.Source.Image
	}
	// Resolve before anything is decided: an image that cannot be resolved
	// creates nothing.
	pinned, err := a.cfg.Images.Resolve(ctx, ref)
	if err != nil {
		return 0, nil, err
	}
	cmd := domain.Deploy{EnvironmentID: c.env.ID, ServiceID: c.service.ID, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(), Image: pinned}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	return a.deployResponse(ctx, res, cmd.DeploymentID)
}

func (a *API) deployResponse(ctx context.Context, res dispatch.Result, deploymentID string) (int, any, error) {
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, api.DeployResponse{ChangeSet: cs}, err
	}
	d, err := query.DeploymentByID(ctx, a.pool, deploymentID)
	if err != nil {
		return 0, nil, err
	}
	rel, err := query.ReleaseByID(ctx, a.pool, d.ReleaseID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, api.DeployResponse{Deployment: &d, Release: &rel}, nil
}

func (a *API) rollback(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.RollbackRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	rels, err := query.Releases(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return 0, nil, err
	}
	var target *api.Release
	for i, rel := range rels {
		if rel.Number == req.Release {
			target = &rels[i]
		}
	}
	if target == nil {
		return 0, nil, notFound("release " + strconv.Itoa(req.Release))
	}
	cmd := domain.Rollback{EnvironmentID: c.env.ID, ServiceID: c.service.ID, ReleaseID: target.ID, DeploymentID: uuid.NewString(),
		Release: domain.ReleaseRef{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Number: target.Number, Image: target.Image}}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	return a.deployResponse(ctx, res, cmd.DeploymentID)
}

func (a *API) listReleases(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	rel, err := query.ReleasesAfter(r.Context(), a.pool, c.env.ID, c.service.ID, after, c.page.limit+1)
	return http.StatusOK, rel, err
}

// blockers says what holds a deployment up, given its cluster's state.
func blockers(d api.Deployment, cluster api.ClusterStatus) []string {
	out := []string{}
	pending := d.Status == string(domain.StatusRequested) || d.Status == string(domain.StatusDelivering)
	if pending && cluster.State == api.StateDisconnected {
		out = append(out, api.BlockerDelivery)
	}
	return out
}

func (a *API) listDeployments(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	ds, err := query.DeploymentsAfter(ctx, a.pool, c.env.ID, c.service.ID, after, c.page.limit+1)
	if err != nil {
		return 0, nil, err
	}
	st, err := a.clusterStatus(ctx, c.env.ClusterID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]api.DeploymentView, len(ds))
	for i, d := range ds {
		out[i] = api.DeploymentView{Deployment: d, Blockers: blockers(d, st)}
	}
	return http.StatusOK, out, nil
}

// deploymentIn finds a deployment of the service in the environment the
// path names; "latest" names the newest.
func (a *API) deploymentIn(ctx context.Context, q eventstore.Querier, c *call, id string) (api.Deployment, error) {
	if id == "latest" {
		ds, err := query.Deployments(ctx, q, c.env.ID, c.service.ID, 1)
		if err != nil {
			return api.Deployment{}, err
		}
		if len(ds) == 0 {
			return api.Deployment{}, notFound("deployment of " + c.service.Name + " in " + c.env.Name)
		}
		return ds[0], nil
	}
	d, err := query.DeploymentByID(ctx, q, id)
	if err != nil || d.EnvironmentID != c.env.ID || d.ServiceID != c.service.ID {
		if err != nil && !isNotFound(err) {
			return api.Deployment{}, err
		}
		return api.Deployment{}, notFound("deployment " + id)
	}
	return d, nil
}

// deploymentView reads a deployment again, with its blockers.
func (a *API) deploymentView(ctx context.Context, q eventstore.Querier, c *call, id string) (api.DeploymentView, error) {
	d, err := a.deploymentIn(ctx, q, c, id)
	if err != nil {
		return api.DeploymentView{}, err
	}
	st, err := query.StatusOfCluster(ctx, q, c.env.ClusterID, a.cfg.Now())
	if err != nil {
		return api.DeploymentView{}, err
	}
	return api.DeploymentView{Deployment: d, Blockers: blockers(d, st)}, nil
}

// deploymentAndStages reads a deployment and its stages after seq after as
// of one moment: a deployment read as over comes with the stage that ended
// it, and the stages come with the deployment's reason and supersededBy.
func (a *API) deploymentAndStages(ctx context.Context, c *call, id string, after int) (api.DeploymentView, []api.DeploymentStage, error) {
	tx, err := a.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return api.DeploymentView{}, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	v, err := a.deploymentView(ctx, tx, c, id)
	if err != nil {
		return v, nil, err
	}
	stages, err := query.DeploymentStages(ctx, tx, v.ID, after)
	return v, stages, err
}

func (a *API) getDeployment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	v, stages, err := a.deploymentAndStages(ctx, c, r.PathValue("deployment"), 0)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.DeploymentDetail{DeploymentView: v, Stages: stages}, nil
}

func (a *API) targetView(ctx context.Context, c *call) (api.TargetView, error) {
	v := api.TargetView{Service: c.service, EnvironmentID: c.env.ID, Environment: c.env.Name}
	rels, err := query.Releases(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return v, err
	}
	for i := range rels {
		if rels[i].Current {
			v.CurrentRelease = &rels[i]
		}
	}
	if d, err := a.deploymentView(ctx, a.pool, c, "latest"); err == nil {
		v.LatestDeployment = &d
	} else if !isNotFound(err) {
		return v, err
	}
	v.DeploysPaused, err = query.DeployPauseOf(ctx, a.pool, c.env.ID, c.service.ID)
	return v, err
}

func (a *API) getTarget(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	v, err := a.targetView(r.Context(), c)
	return http.StatusOK, v, err
}

func (a *API) resumeDeploys(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	if _, err := a.projectCommand(ctx, r, c, domain.ResumeDeploys{EnvironmentID: c.env.ID, ServiceID: c.service.ID}); err != nil {
		return 0, nil, err
	}
	v, err := a.targetView(ctx, c)
	return http.StatusOK, v, err
}
