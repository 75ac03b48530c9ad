package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

// Backups lists the control-plane backups in the destination, newest first
// (instance administrator).
func (c *Client) Backups(ctx context.Context) ([]api.Backup, error) {
	return list[api.Backup](ctx, c, request{method: http.MethodGet, path: "/api/v1/instance/backups"}, 0)
}

// CreateBackup takes a control-plane backup now (instance administrator).
func (c *Client) CreateBackup(ctx context.Context) (api.Backup, error) {
	var out api.Backup
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/instance/backups"}, &out)
	return out, err
}
