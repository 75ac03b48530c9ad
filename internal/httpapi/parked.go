package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// RetryParkedFunc retries parked events: of the subscription named (all when
// ""), the stream of the event at position (every parked stream when 0).
type RetryParkedFunc func(ctx context.Context, subscription string, position int64) ([]eventstore.Retried, error)

// ParkedEvents lists the events the subscriptions set aside because they
// could not handle them.
type ParkedEvents struct {
	Events []eventstore.Parked `json:"events"`
}

// RetryParkedRequest names what to retry: one parked event's stream
// (position) or every parked stream (all), in one subscription or in every
// one.
type RetryParkedRequest struct {
	Subscription string `json:"subscription,omitempty"`
	Position     int64  `json:"position,omitempty"`
	All          bool   `json:"all,omitempty"`
}

// RetryParkedResponse says, per stream, what the retry handled or why it
// failed (then the events stay parked).
type RetryParkedResponse struct {
	Retried []eventstore.Retried `json:"retried"`
	// Failed is true when any stream's retry failed.
	Failed bool `json:"failed"`
}

func (a *API) listParked(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	sub := r.URL.Query().Get("subscription")
	if len(sub) > 100 {
		return 0, nil, badRequest("query parameter subscription is too long")
	}
	evs, err := eventstore.ListParked(r.Context(), a.pool, sub)
	if err != nil {
		return 0, nil, err
	}
	if evs == nil {
		evs = []eventstore.Parked{}
	}
	return http.StatusOK, ParkedEvents{Events: evs}, nil
}

func (a *API) retryParked(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req RetryParkedRequest
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
	out := RetryParkedResponse{Retried: res}
	if out.Retried == nil {
		out.Retried = []eventstore.Retried{}
	}
	for _, x := range res {
		out.Failed = out.Failed || x.Error != ""
		a.logger.Warn("parked events retried", "actor", c.actor.Name, "subscription", x.Subscription, "stream", x.StreamID,
			"positions", x.Positions, "error", x.Error)
	}
	return http.StatusOK, out, nil
}
