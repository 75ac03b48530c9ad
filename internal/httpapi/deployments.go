package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/transport"
)

// DeployRequest deploys an image (a tag is resolved to its digest) or, without
// one, the service's image again.
type DeployRequest struct {
	Image string `json:"image,omitempty"`
	// Commit builds that commit of a Git service (default: the tracked
	// branch's head).
	Commit string `json:"commit,omitempty" input:"max=64"`
}

// RollbackRequest deploys an earlier release again.
type RollbackRequest struct {
	Release int `json:"release"`
}

// DeployResponse is the deployment started, or the change set that waits for
// approval in a protected environment.
type DeployResponse struct {
	Deployment *query.Deployment `json:"deployment,omitempty"`
	Release    *query.Release    `json:"release,omitempty"`
	ChangeSet  *query.ChangeSet  `json:"changeSet,omitempty"`
	// Build is the build a Git service's deploy waits for (the deployment
	// starts when it succeeds), or the one whose image it deploys.
	Build *query.Build `json:"build,omitempty"`
}

func (a *API) deploy(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req DeployRequest
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
		return http.StatusAccepted, DeployResponse{ChangeSet: cs}, err
	}
	d, err := query.DeploymentByID(ctx, a.pool, deploymentID)
	if err != nil {
		return 0, nil, err
	}
	rel, err := query.ReleaseByID(ctx, a.pool, d.ReleaseID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, DeployResponse{Deployment: &d, Release: &rel}, nil
}

func (a *API) rollback(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req RollbackRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	rels, err := query.Releases(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return 0, nil, err
	}
	var target *query.Release
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

// DeploymentView is a deployment with what holds it up: "delivery" while its
// cluster is Disconnected and its revision is not applied yet (the
// deployment is still requested or delivering).
type DeploymentView struct {
	query.Deployment
	Blockers []string `json:"blockers"`
}

// DeploymentDetail is a deployment with every stage of its rollout, in order.
type DeploymentDetail struct {
	DeploymentView
	Stages []query.DeploymentStage `json:"stages"`
}

// BlockerDelivery holds up a deployment whose cluster is Disconnected.
const BlockerDelivery = "delivery"

// blockers says what holds a deployment up, given its cluster's state.
func blockers(d query.Deployment, cluster query.ClusterStatus) []string {
	out := []string{}
	pending := d.Status == string(domain.StatusRequested) || d.Status == string(domain.StatusDelivering)
	if pending && cluster.State == query.StateDisconnected {
		out = append(out, BlockerDelivery)
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
	out := make([]DeploymentView, len(ds))
	for i, d := range ds {
		out[i] = DeploymentView{Deployment: d, Blockers: blockers(d, st)}
	}
	return http.StatusOK, out, nil
}

// deploymentIn finds a deployment of the service in the environment the
// path names; "latest" names the newest.
func (a *API) deploymentIn(ctx context.Context, q eventstore.Querier, c *call, id string) (query.Deployment, error) {
	if id == "latest" {
		ds, err := query.Deployments(ctx, q, c.env.ID, c.service.ID, 1)
		if err != nil {
			return query.Deployment{}, err
		}
		if len(ds) == 0 {
			return query.Deployment{}, notFound("deployment of " + c.service.Name + " in " + c.env.Name)
		}
		return ds[0], nil
	}
	d, err := query.DeploymentByID(ctx, q, id)
	if err != nil || d.EnvironmentID != c.env.ID || d.ServiceID != c.service.ID {
		if err != nil && !isNotFound(err) {
			return query.Deployment{}, err
		}
		return query.Deployment{}, notFound("deployment " + id)
	}
	return d, nil
}

// deploymentView reads a deployment again, with its blockers.
func (a *API) deploymentView(ctx context.Context, q eventstore.Querier, c *call, id string) (DeploymentView, error) {
	d, err := a.deploymentIn(ctx, q, c, id)
	if err != nil {
		return DeploymentView{}, err
	}
	st, err := query.StatusOfCluster(ctx, q, c.env.ClusterID, a.cfg.Now(), transport.DisconnectedAfter)
	if err != nil {
		return DeploymentView{}, err
	}
	return DeploymentView{Deployment: d, Blockers: blockers(d, st)}, nil
}

// deploymentAndStages reads a deployment and its stages after seq after as
// of one moment: a deployment read as over comes with the stage that ended
// it, and the stages come with the deployment's reason and supersededBy.
func (a *API) deploymentAndStages(ctx context.Context, c *call, id string, after int) (DeploymentView, []query.DeploymentStage, error) {
	tx, err := a.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return DeploymentView{}, nil, err
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
	return http.StatusOK, DeploymentDetail{DeploymentView: v, Stages: stages}, nil
}

// TargetView is a service in an environment: the service, its current
// release and latest deployment there, and whether its automatic deploys are
// paused (a rollback pauses them until someone resumes them).
type TargetView struct {
	Service          query.Service      `json:"service"`
	EnvironmentID    string             `json:"environmentId"`
	Environment      string             `json:"environment"`
	CurrentRelease   *query.Release     `json:"currentRelease,omitempty"`
	LatestDeployment *DeploymentView    `json:"latestDeployment,omitempty"`
	DeploysPaused    *query.DeployPause `json:"deploysPaused,omitempty"`
}

func (a *API) targetView(ctx context.Context, c *call) (TargetView, error) {
	v := TargetView{Service: c.service, EnvironmentID: c.env.ID, Environment: c.env.Name}
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
