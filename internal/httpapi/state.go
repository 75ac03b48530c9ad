package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/projections"
)

func (a *API) listAcknowledgements(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	acks, err := query.Acknowledgements(r.Context(), a.pool, c.env.ID)
	return http.StatusOK, acks, err
}

func (a *API) state(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	var rev api.Revision
	var err error
	at := r.URL.Query().Get("at")
	switch {
	case at != "" && r.URL.Query().Get("revision") != "":
		return 0, nil, badRequest("give either revision or at, not both")
	case at != "":
		t, perr := time.Parse(time.RFC3339, at)
		if perr != nil {
			return 0, nil, badRequest("query parameter at must be an RFC 3339 time")
		}
		rev, err = projections.StateAt(ctx, a.pool, c.env.ID, t)
	default:
		n, qerr := intQuery(r, "revision", 0, 1, 1<<30)
		if qerr != nil {
			return 0, nil, qerr
		}
		rev, err = projections.RevisionNumber(ctx, a.pool, c.env.ID, n)
	}
	if errors.Is(err, projections.ErrNoRevision) {
		return 0, nil, notFound("revision")
	}
	if err != nil {
		return 0, nil, err
	}
	// The stored document carries secrets sealed; none are opened here.
	return http.StatusOK, rev, nil
}

func (a *API) logs(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	limit, err := intQuery(r, "limit", 200, 1, 5000)
	if err != nil {
		return 0, nil, err
	}
	after, err := seqCursor(r)
	if err != nil {
		return 0, nil, err
	}
	lines, err := a.cfg.Telemetry.Logs(r.Context(), c.env.ID, c.service.Name, after, limit)
	if err != nil {
		return 0, nil, err
	}
	if lines == nil {
		lines = []api.LogLine{}
	}
	next := after
	if len(lines) > 0 {
		next = lines[len(lines)-1].ID
	}
	return http.StatusOK, api.LogPage{Items: lines, Next: strconv.FormatInt(next, 10)}, nil
}

func (a *API) workloads(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ws, err := query.Workloads(r.Context(), a.pool, c.env.ID)
	return http.StatusOK, ws, err
}
