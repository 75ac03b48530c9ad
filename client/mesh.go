package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

// Mesh returns the organisation's WireGuard mesh: every node with its
// address, key fingerprint, endpoint and peers' handshakes.
func (c *Client) Mesh(ctx context.Context, org string) (api.Mesh, error) {
	var out api.Mesh
	_, err := c.call(ctx, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/mesh", org)}, &out)
	return out, err
}

// UpdateMesh sets the mesh range.
func (c *Client) UpdateMesh(ctx context.Context, org string, req api.MeshSettingsRequest) (api.Mesh, error) {
	var out api.Mesh
	_, err := c.call(ctx, request{method: http.MethodPut, path: path("/api/v1/orgs/%s/mesh", org), in: req}, &out)
	return out, err
}

// RotateMeshKeys asks a cluster's nodes (node: one of them) for new keys.
func (c *Client) RotateMeshKeys(ctx context.Context, org, cluster, node string) (api.MeshRotateResponse, error) {
	var out api.MeshRotateResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: clusterPath(org, cluster) + "/mesh/rotate", in: api.MeshRotateRequest{Node: node}}, &out)
	return out, err
}
