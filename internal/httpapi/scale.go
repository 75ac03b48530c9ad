package httpapi

import (
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func (a *API) listReplicas(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	rs, err := query.Replicas(r.Context(), a.pool, c.env.ID, c.service)
	return http.StatusOK, rs, err
}

// scale sets a process's replica count. Like every change it makes a new
// release of what runs now and deploys it; in a protected environment it
// waits in a change set (202).
func (a *API) scale(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.ScaleRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if req.Replicas == nil {
		return 0, nil, invalidField("replicas", "replicas is required (0 to 1000)")
	}
	process := req.Process
	if process == "" {
		if len(c.service.Processes) != 1 {
			return 0, nil, invalidField("process", "service %s has %d processes: name the one to scale", c.service.Name, len(c.service.Processes))
		}
		process = c.service.Processes[0].Name
	}
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, domain.Scale{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Process: process, Replicas: *req.Replicas})
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	rs, err := query.Replicas(ctx, a.pool, c.env.ID, c.service)
	return http.StatusOK, api.ReplicasResponse{Replicas: rs}, err
}
