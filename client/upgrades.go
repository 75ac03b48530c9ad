package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

// UpgradeServer upgrades a server's agent to the control plane's version
// (202: it goes on in the background); force installs a version the agent
// rolled back in the last 24 hours.
func (c *Client) UpgradeServer(ctx context.Context, serverID string, force bool) (api.UpgradeAccepted, error) {
	var out api.UpgradeAccepted
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/servers/%s/upgrade", serverID), in: api.UpgradeRequest{Force: force}}, &out)
	return out, err
}

// UpgradeAgents starts a staged rollout over the organisation's servers that
// can be upgraded now, one at a time in name order.
func (c *Client) UpgradeAgents(ctx context.Context, org string) (api.RolloutAccepted, error) {
	var out api.RolloutAccepted
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/servers/upgrade", in: api.RolloutRequest{Org: org}}, &out)
	return out, err
}

// InstanceUpgrade reads the control plane's version, every server's version
// skew and last upgrade, and the last pre-upgrade backup (instance
// administrator).
func (c *Client) InstanceUpgrade(ctx context.Context) (api.InstanceUpgrade, error) {
	var out api.InstanceUpgrade
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/api/v1/instance/upgrade"}, &out)
	return out, err
}
