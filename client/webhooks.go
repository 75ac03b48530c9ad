package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

// Outbound webhooks: an organisation's endpoints and their deliveries
// (docs/webhooks.md). Managing them takes webhooks:write; reading them
// audit:read (Owners and Admins).

func webhookPath(org, id string) string { return path("/api/v1/orgs/%s/webhooks/%s", org, id) }

// WebhookEndpoints lists the organisation's outbound webhook endpoints (never
// their secrets).
func (c *Client) WebhookEndpoints(ctx context.Context, org string) ([]api.WebhookEndpoint, error) {
	return list[api.WebhookEndpoint](ctx, c, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/webhooks", org)}, 0)
}

// WebhookEndpoint returns one endpoint.
func (c *Client) WebhookEndpoint(ctx context.Context, org, id string) (api.WebhookEndpoint, error) {
	var out api.WebhookEndpoint
	_, err := c.call(ctx, request{method: http.MethodGet, path: webhookPath(org, id)}, &out)
	return out, err
}

// CreateWebhookEndpoint creates an endpoint; the answer carries its signing secret
// (whsec_...), shown this once.
func (c *Client) CreateWebhookEndpoint(ctx context.Context, org string, req api.CreateWebhookRequest) (api.WebhookEndpointSecret, error) {
	var out api.WebhookEndpointSecret
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/orgs/%s/webhooks", org), in: req}, &out)
	return out, err
}

// DeleteWebhookEndpoint deletes an endpoint; its pending deliveries fail.
func (c *Client) DeleteWebhookEndpoint(ctx context.Context, org, id string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: webhookPath(org, id)}, nil)
	return err
}

// RotateWebhookEndpoint makes the endpoint a new secret (shown once in the
// answer); the one before keeps signing beside it for 24 hours.
func (c *Client) RotateWebhookEndpoint(ctx context.Context, org, id string) (api.WebhookEndpointSecret, error) {
	var out api.WebhookEndpointSecret
	_, err := c.call(ctx, request{method: http.MethodPost, path: webhookPath(org, id) + "/rotate"}, &out)
	return out, err
}

// EnableWebhookEndpoint enables a disabled endpoint again.
func (c *Client) EnableWebhookEndpoint(ctx context.Context, org, id string) (api.WebhookEndpoint, error) {
	var out api.WebhookEndpoint
	_, err := c.call(ctx, request{method: http.MethodPost, path: webhookPath(org, id) + "/enable"}, &out)
	return out, err
}

// WebhookDeliveries lists an endpoint's deliveries, newest first (limit
// > 0: at most that many).
func (c *Client) WebhookDeliveries(ctx context.Context, org, id string, limit int) ([]api.WebhookDelivery, error) {
	return list[api.WebhookDelivery](ctx, c, request{method: http.MethodGet, path: webhookPath(org, id) + "/deliveries"}, limit)
}

// WebhookDelivery returns a delivery with its payload and every attempt.
func (c *Client) WebhookDelivery(ctx context.Context, org, id, delivery string) (api.WebhookDeliveryDetail, error) {
	var out api.WebhookDeliveryDetail
	_, err := c.call(ctx, request{method: http.MethodGet, path: webhookPath(org, id) + path("/deliveries/%s", delivery)}, &out)
	return out, err
}

// RedeliverWebhook sends a delivery again with the same webhook-id.
func (c *Client) RedeliverWebhook(ctx context.Context, org, id, delivery string) (api.WebhookDelivery, error) {
	var out api.WebhookDelivery
	_, err := c.call(ctx, request{method: http.MethodPost, path: webhookPath(org, id) + path("/deliveries/%s/redeliver", delivery)}, &out)
	return out, err
}
