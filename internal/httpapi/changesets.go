package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// changeSetOf returns the change set a command opened, or the open one of
// the same person that the change joined, if the change waits in one.
func (a *API) changeSetOf(ctx context.Context, res dispatch.Result) (*api.ChangeSet, error) {
	for _, e := range res.Events {
		id := ""
		switch cs := e.(type) {
		case domain.ChangeSetOpened:
			id = cs.ChangeSetID
		case domain.ChangeSetChanged:
			id = cs.ChangeSetID
		}
		if id != "" {
			got, err := query.ChangeSetByID(ctx, a.pool, id)
			return &got, err
		}
	}
	return nil, nil
}

func (a *API) listChangeSets(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	status := r.URL.Query().Get("status")
	switch status {
	case "", "open", "approved", "rejected", "expired":
	default:
		return 0, nil, badRequest("status must be open, approved, rejected or expired")
	}
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	cs, err := query.ChangeSetsAfter(r.Context(), a.pool, c.env.ID, status, after, c.page.limit+1)
	return http.StatusOK, cs, err
}

func (a *API) changeSetIn(ctx context.Context, c *call, id string) (api.ChangeSet, error) {
	cs, err := query.ChangeSetByID(ctx, a.pool, id)
	if err != nil && !isNotFound(err) {
		return cs, err
	}
	if err != nil || cs.EnvironmentID != c.env.ID {
		return cs, notFound("change set " + id)
	}
	return cs, nil
}

func (a *API) getChangeSet(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	cs, err := a.changeSetIn(ctx, c, r.PathValue("changeset"))
	if err != nil {
		return 0, nil, err
	}
	diff, err := query.ChangeSetDiff(ctx, a.pool, cs)
	return http.StatusOK, api.ChangeSetView{ChangeSet: cs, Diff: diff}, err
}

func (a *API) decideChangeSet(approve bool) func(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return func(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
		var req api.ChangeSetDecision
		if len(strings.TrimSpace(string(c.body))) > 0 {
			if err := decodeJSON(c.body, &req); err != nil {
				return 0, nil, err
			}
		}
		id := r.PathValue("changeset")
		ctx := r.Context()
		cs, err := a.changeSetIn(ctx, c, id)
		if err != nil {
			return 0, nil, err
		}
		var cmd domain.ProjectCommand = domain.RejectChangeSet{ChangeSetID: id, Reason: req.Reason}
		if approve {
			cmd = domain.ApproveChangeSet{ChangeSetID: id, Version: req.Version}
		}
		if _, err := a.projectCommand(ctx, r, c, cmd); err != nil {
			return 0, nil, err
		}
		cs, err = query.ChangeSetByID(ctx, a.pool, id)
		return http.StatusOK, cs, err
	}
}
