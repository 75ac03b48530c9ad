package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

func clusterPath(org, cluster string) string {
	return path("/api/v1/orgs/%s/clusters/%s", org, cluster)
}

// Clusters lists an organisation's clusters.
func (c *Client) Clusters(ctx context.Context, org string) ([]api.Cluster, error) {
	return list[api.Cluster](ctx, c, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/clusters", org)}, 0)
}

// CreateCluster creates a cluster; the answer carries its first join token,
// whose secret is shown only there.
func (c *Client) CreateCluster(ctx context.Context, org string, req api.CreateClusterRequest) (api.ClusterResponse, error) {
	var out api.ClusterResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/orgs/%s/clusters", org), in: req, creating: true}, &out)
	return out, err
}

// Cluster reads a cluster.
func (c *Client) Cluster(ctx context.Context, org, cluster string) (api.ClusterResponse, error) {
	var out api.ClusterResponse
	_, err := c.call(ctx, request{method: http.MethodGet, path: clusterPath(org, cluster)}, &out)
	return out, err
}

// DeleteCluster deletes a cluster that runs no environment.
func (c *Client) DeleteCluster(ctx context.Context, org, cluster string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: clusterPath(org, cluster)}, nil)
	return err
}

// JoinTokens lists a cluster's join tokens (never their secrets).
func (c *Client) JoinTokens(ctx context.Context, org, cluster string) ([]api.JoinToken, error) {
	return list[api.JoinToken](ctx, c, request{method: http.MethodGet, path: clusterPath(org, cluster) + "/join-tokens"}, 0)
}

// CreateJoinToken issues a join token; its secret is in the answer only.
func (c *Client) CreateJoinToken(ctx context.Context, org, cluster string, req api.JoinTokenRequest) (api.CreatedJoinToken, error) {
	var out api.CreatedJoinToken
	_, err := c.call(ctx, request{method: http.MethodPost, path: clusterPath(org, cluster) + "/join-tokens", in: req, creating: true}, &out)
	return out, err
}

// RevokeJoinToken revokes a join token.
func (c *Client) RevokeJoinToken(ctx context.Context, org, cluster, id string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: clusterPath(org, cluster) + path("/join-tokens/%s", id)}, nil)
	return err
}

// Servers lists the servers (agent installations) of a cluster.
func (c *Client) Servers(ctx context.Context, org, cluster string) ([]api.Server, error) {
	return list[api.Server](ctx, c, request{method: http.MethodGet, path: clusterPath(org, cluster) + "/servers"}, 0)
}
