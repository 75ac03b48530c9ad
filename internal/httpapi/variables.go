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

func (a *API) listVariables(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var vars []api.Variable
	var err error
	if c.service.ID == "" {
		vars, err = query.Variables(r.Context(), a.pool, c.env.ID, "")
	} else {
		vars, err = query.EffectiveVariables(r.Context(), a.pool, c.env.ID, c.service.ID)
	}
	return http.StatusOK, vars, err
}

func (a *API) setVariables(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.SetVariablesRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Variables) == 0 {
		return 0, nil, badRequest("no variables to set")
	}
	ctx := r.Context()
	vars := make([]domain.Variable, 0, len(req.Variables))
	for _, in := range req.Variables {
		if err := domain.ValidateVariableName(in.Name); err != nil {
			return 0, nil, err
		}
		v := domain.Variable{Name: in.Name, Value: in.Value}
		if in.Secret {
			// Sealed here, before the value becomes part of any command or log.
			sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(in.Value))
			if err != nil {
				return 0, nil, err
			}
			v = domain.Variable{Name: in.Name, Secret: &sealed}
		}
		vars = append(vars, v)
	}
	res, err := a.projectCommand(ctx, r, c, domain.SetVariables{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Variables: vars})
	if err != nil {
		return 0, nil, err
	}
	return a.variablesAfter(ctx, r, c, res)
}

func (a *API) variablesAfter(ctx context.Context, r *http.Request, c *call, res dispatch.Result) (int, any, error) {
	cs, err := a.changeSetOf(ctx, res)
	if err != nil {
		return 0, nil, err
	}
	_, listed, err := a.listVariables(nil, r, c)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if cs != nil {
		status = http.StatusAccepted
	}
	return status, api.VariablesResponse{Variables: listed.([]api.Variable), ChangeSet: cs}, nil
}

func (a *API) unsetVariable(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, domain.UnsetVariables{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Names: []string{r.PathValue("name")}})
	if err != nil {
		return 0, nil, err
	}
	return a.variablesAfter(ctx, r, c, res)
}

func (a *API) listDomains(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	d, err := query.Domains(r.Context(), a.pool, c.env.ID, c.service.ID)
	return http.StatusOK, d, err
}

func (a *API) addDomain(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.AddDomainRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	host := strings.ToLower(strings.TrimSpace(req.Host))
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, domain.AddDomain{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Host: host})
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	d, err := a.domainOf(ctx, c, host)
	return http.StatusCreated, d, err
}

func (a *API) removeDomain(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	d, err := a.domainOf(ctx, c, r.PathValue("host"))
	if err != nil {
		return 0, nil, err
	}
	host := d.Host
	res, err := a.projectCommand(ctx, r, c, domain.RemoveDomain{EnvironmentID: c.env.ID, Host: host})
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	return http.StatusNoContent, nil, nil
}
