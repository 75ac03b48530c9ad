package query

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Replicas returns the replica count of every process of a service in an
// environment: the environment's own count where one was set, else the
// process's default.
func Replicas(ctx context.Context, q eventstore.Querier, envID string, svc api.Service) ([]api.ProcessReplicas, error) {
	out := make([]api.ProcessReplicas, 0, len(svc.Processes))
	if !validID(envID) || !validID(svc.ID) {
		return out, nil
	}
	scaled, err := list(ctx, q, "replica counts of service "+svc.ID, func(row pgx.Row) (api.ProcessReplicas, error) {
		var p api.ProcessReplicas
		err := row.Scan(&p.Process, &p.Replicas)
		return p, err
	}, `SELECT process, replicas FROM replica_counts WHERE environment_id = $1 AND service_id = $2`, envID, svc.ID)
	if err != nil {
		return nil, err
	}
	set := make(map[string]int, len(scaled))
	for _, s := range scaled {
		set[s.Process] = s.Replicas
	}
	for _, p := range svc.Processes {
		out = append(out, replicasOf(p, set))
	}
	return out, nil
}

func replicasOf(p api.Process, set map[string]int) api.ProcessReplicas {
	if n, ok := set[p.Name]; ok {
		return api.ProcessReplicas{Process: p.Name, Replicas: n, Scaled: true}
	}
	return api.ProcessReplicas{Process: p.Name, Replicas: p.Replicas}
}
