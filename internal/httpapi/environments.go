package httpapi

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func (a *API) listEnvironments(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	e, err := query.Environments(r.Context(), a.pool, c.project.ID)
	return http.StatusOK, e, err
}

func (a *API) clusterID(ctx context.Context, orgID, name string) (string, error) {
	cl, err := query.ClusterByName(ctx, a.pool, orgID, name)
	if err != nil {
		if isNotFound(err) {
			return "", errorf(http.StatusUnprocessableEntity, "validation_failed", "the organisation has no cluster %s", name)
		}
		return "", err
	}
	return cl.ID, nil
}

func (a *API) createEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateEnvironmentRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"name": req.Name, "cluster": req.Cluster}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	cluster, err := a.clusterID(ctx, c.org.ID, req.Cluster)
	if err != nil {
		return 0, nil, err
	}
	id := uuid.NewString()
	if _, err := a.projectCommand(ctx, r, c, domain.CreateEnvironment{EnvironmentID: id, Name: req.Name, ClusterID: cluster, Protected: req.Protected}); err != nil {
		return 0, nil, err
	}
	e, err := query.EnvironmentByName(ctx, a.pool, c.project.ID, req.Name)
	return http.StatusCreated, e, err
}

func (a *API) getEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, c.env, nil
}

func (a *API) updateEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.UpdateEnvironmentRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	cmd := domain.UpdateEnvironment{EnvironmentID: c.env.ID, ClusterID: c.env.ClusterID, Protected: c.env.Protected}
	if req.Cluster != nil {
		id, err := a.clusterID(ctx, c.org.ID, *req.Cluster)
		if err != nil {
			return 0, nil, err
		}
		cmd.ClusterID = id
	}
	if req.Protected != nil {
		cmd.Protected = *req.Protected
	}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	e, err := query.EnvironmentByName(ctx, a.pool, c.project.ID, c.env.Name)
	return http.StatusOK, e, err
}

func (a *API) deleteEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteEnvironment{EnvironmentID: c.env.ID})
}
