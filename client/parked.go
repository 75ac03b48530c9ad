package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/nebulactrl/nebulactrl/api"
)

// ParkedEvents lists the events the subscriptions parked because they could
// not handle them, of one subscription or ("") of all (instance
// administrator).
func (c *Client) ParkedEvents(ctx context.Context, subscription string) (api.ParkedEvents, error) {
	var out api.ParkedEvents
	var q url.Values
	if subscription != "" {
		q = url.Values{"subscription": {subscription}}
	}
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/api/v1/instance/parked-events", query: q}, &out)
	return out, err
}

// RetryParked handles parked events again: the stream of the one at
// req.Position, or every parked stream with req.All (instance
// administrator). A stream whose retry failed is reported in the answer, its
// events still parked.
func (c *Client) RetryParked(ctx context.Context, req api.RetryParkedRequest) (api.RetryParkedResponse, error) {
	var out api.RetryParkedResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/instance/parked-events/retry", in: req}, &out)
	return out, err
}
