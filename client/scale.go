package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

// Replicas lists how many copies of each of a service's processes run in an
// environment.
func (c *Client) Replicas(ctx context.Context, org, project, env, service string) ([]api.ProcessReplicas, error) {
	return list[api.ProcessReplicas](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/replicas"}, 0)
}

// Scale sets a process's replica count in an environment (process "" when
// the service has one). It returns the counts after the change, or, in a
// protected environment, the change set that waits for approval.
func (c *Client) Scale(ctx context.Context, org, project, env, service, process string, replicas int) ([]api.ProcessReplicas, *api.ChangeSet, error) {
	var out api.ReplicasResponse
	cs, err := c.maybeChangeSet(ctx, request{method: http.MethodPut, path: levelPath(org, project, env, service) + "/replicas",
		in: api.ScaleRequest{Process: process, Replicas: &replicas}}, &out)
	return out.Replicas, cs, err
}
