package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// RetryParkedFunc retries parked events: of the subscription named (all when
// ""), the stream of the event at position (every parked stream when 0).
type RetryParkedFunc func(ctx context.Context, subscription string, position int64) ([]eventstore.Retried, error)

func (a *API) listParked(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	sub := r.URL.Query().Get("subscription")
	if len(sub) > 100 {
		return 0, nil, badRequest("query parameter subscription is too long")
	}
	evs, err := eventstore.ListParked(r.Context(), a.pool, sub)
	if err != nil {
		return 0, nil, err
	}
	out := api.ParkedEvents{Events: make([]api.ParkedEvent, len(evs))}
	for i, e := range evs {
		out.Events[i] = api.ParkedEvent{Subscription: e.Subscription, Position: e.Position, StreamID: e.StreamID, StreamVersion: e.StreamVersion,
			OrgID: e.OrgID, Type: e.Type, Reason: e.Reason, Error: e.Error, Attempts: e.Attempts, ParkedAt: e.ParkedAt, LastRetryError: e.LastRetryError}
	}
	return http.StatusOK, out, nil
}

func (a *API) retryParked(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.RetryParkedRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	switch {
	case req.Position < 0:
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "position must be positive")
	case req.All == (req.Position != 0):
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "give either a parked event's position or all")
	case len(req.Subscription) > 100:
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "subscription is longer than 100 bytes")
	}
	if a.cfg.RetryParked == nil {
		return 0, nil, errorf(http.StatusServiceUnavailable, "unavailable", "this server does not run the subscriptions")
	}
	res, err := a.cfg.RetryParked(r.Context(), req.Subscription, req.Position)
	if errors.Is(err, eventstore.ErrNotParked) {
		return 0, nil, errorf(http.StatusNotFound, "not_found", "%s", err.Error())
	}
	if err != nil {
		return 0, nil, err
	}
	out := api.RetryParkedResponse{Retried: make([]api.RetriedEvents, len(res))}
	for i, x := range res {
		out.Retried[i] = api.RetriedEvents{Subscription: x.Subscription, StreamID: x.StreamID, Positions: x.Positions, Error: x.Error}
		out.Failed = out.Failed || x.Error != ""
		a.logger.Warn("parked events retried", "actor", c.actor.Name, "subscription", x.Subscription, "stream", x.StreamID,
			"positions", x.Positions, "error", x.Error)
	}
	return http.StatusOK, out, nil
}
