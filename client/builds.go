package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nebulactrl/nebulactrl/api"
)

// DeployWith deploys as the request says: an image, or (a Git service) the
// tracked branch's head or a commit, which builds first.
func (c *Client) DeployWith(ctx context.Context, org, project, env, service string, req api.DeployRequest) (api.DeployResponse, error) {
	var out api.DeployResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: levelPath(org, project, env, service) + "/deployments",
		in: req, creating: true}, &out)
	return out, err
}

// Builds lists a project's builds (of one service when service is not
// ""), newest first, at most limit (0: every one).
func (c *Client) Builds(ctx context.Context, org, project, service string, limit int) ([]api.Build, error) {
	q := url.Values{}
	if service != "" {
		q.Set("service", service)
	}
	return list[api.Build](ctx, c, request{method: http.MethodGet, path: projectPath(org, project) + "/builds", query: q}, limit)
}

// Build reads a build.
func (c *Client) Build(ctx context.Context, org, id string) (api.Build, error) {
	var out api.Build
	_, err := c.call(ctx, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/builds/%s", org, id)}, &out)
	return out, err
}

// CancelBuild cancels a build that has not finished.
func (c *Client) CancelBuild(ctx context.Context, org, id string) (api.Build, error) {
	var out api.Build
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/orgs/%s/builds/%s/cancel", org, id)}, &out)
	return out, err
}

// BuildLogs reads a page of a build's output after cursor ("": from the
// first line); the page's Next is where to follow from.
func (c *Client) BuildLogs(ctx context.Context, org, id, cursor string, limit int) (api.BuildLogPage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.BuildLogPage
	_, err := c.call(ctx, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/builds/%s/logs", org, id), query: q}, &out)
	return out, err
}

// Webhook reads a project's push webhook (its URL, whether a secret is set).
func (c *Client) Webhook(ctx context.Context, org, project string) (api.WebhookInfo, error) {
	var out api.WebhookInfo
	_, err := c.call(ctx, request{method: http.MethodGet, path: projectPath(org, project) + "/webhook"}, &out)
	return out, err
}

// RotateWebhook makes the project's webhook secret (the first or a new
// one), returned this once.
func (c *Client) RotateWebhook(ctx context.Context, org, project string) (api.WebhookSecret, error) {
	var out api.WebhookSecret
	_, err := c.call(ctx, request{method: http.MethodPost, path: projectPath(org, project) + "/webhook/rotate"}, &out)
	return out, err
}

// Deliveries lists the deliveries a project's webhook received, newest first.
func (c *Client) Deliveries(ctx context.Context, org, project string, limit int) ([]api.Delivery, error) {
	return list[api.Delivery](ctx, c, request{method: http.MethodGet, path: projectPath(org, project) + "/webhook/deliveries"}, limit)
}

// Track sets the branch a Git service follows in an environment (none:
// it follows no branch).
func (c *Client) Track(ctx context.Context, org, project, env, service, branch string, none bool) (api.TrackingView, error) {
	var out api.TrackingView
	_, err := c.call(ctx, request{method: http.MethodPut, path: levelPath(org, project, env, service) + "/tracking",
		in: api.TrackRequest{Branch: branch, None: none}}, &out)
	return out, err
}
