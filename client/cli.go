package client

import (
	"context"
	"net/http"
)

// RevokeServer revokes a server's credential: its agent is disconnected at
// once and refused afterwards.
func (c *Client) RevokeServer(ctx context.Context, org, cluster, serverID string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: clusterPath(org, cluster) + path("/servers/%s", serverID)}, nil)
	return err
}
