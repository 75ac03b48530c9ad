package httpapi

import (
	"context"
	"net/http"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func (a *API) projectCommand(ctx context.Context, r *http.Request, c *call, cmd domain.ProjectCommand) (dispatch.Result, error) {
	res, err := a.cmd.Project(ctx, commandContext(r, c), c.org.ID, c.project.ID, cmd)
	if err != nil {
		return res, err
	}
	c.version = res.Version
	return res, a.settle(ctx, res)
}

func (a *API) listProjects(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	p, err := query.Projects(r.Context(), a.pool, c.org.ID)
	return http.StatusOK, p, err
}

func (a *API) createProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateProjectRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	res, err := a.cmd.Project(ctx, commandContext(r, c), c.org.ID, id, domain.CreateProject{ProjectID: id, OrgID: c.org.ID, Name: req.Name})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	p, err := query.ProjectByName(ctx, a.pool, c.org.ID, req.Name)
	return http.StatusCreated, p, err
}

func (a *API) getProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, c.project, nil
}

func (a *API) deleteProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteProject{})
}

// noContentOrChangeSet runs a command that happens at once (204), or waits in
// a change set of a protected environment (202 with the change set).
func (a *API) noContentOrChangeSet(r *http.Request, c *call, cmd domain.ProjectCommand) (int, any, error) {
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	cs, err := a.changeSetOf(ctx, res)
	if cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	return http.StatusNoContent, nil, nil
}
