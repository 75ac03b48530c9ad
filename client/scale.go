package client

import (
	"context"
	"net/http"

	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// Replicas lists how many copies of each of a service's processes run in an
// environment.
func (c *Client) Replicas(ctx context.Context, org, project, env, service string) ([]query.ProcessReplicas, error) {
	return list[query.ProcessReplicas](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/replicas"}, 0)
}

// Scale sets a process's replica count in an environment (process "" when
// the service has one). It returns the counts after the change, or, in a
// protected environment, the change set that waits for approval.
func (c *Client) Scale(ctx context.Context, org, project, env, service, process string, replicas int) ([]query.ProcessReplicas, *query.ChangeSet, error) {
	var out httpapi.ReplicasResponse
	cs, err := c.maybeChangeSet(ctx, request{method: http.MethodPut, path: levelPath(org, project, env, service) + "/replicas",
		in: httpapi.ScaleRequest{Process: process, Replicas: &replicas}}, &out)
	return out.Replicas, cs, err
}
