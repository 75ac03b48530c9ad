package query

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ProcessReplicas is how many copies of one of a service's processes run in
// an environment. Scaled says the count was set for this environment; when
// false it is the process's default from the service.
type ProcessReplicas struct {
	Process  string `json:"process"`
	Replicas int    `json:"replicas"`
	Scaled   bool   `json:"scaled"`
}

// Replicas returns the replica count of every process of a service in an
// environment: the environment's own count where one was set, else the
// process's default.
func Replicas(ctx context.Context, q eventstore.Querier, envID string, svc Service) ([]ProcessReplicas, error) {
	out := make([]ProcessReplicas, 0, len(svc.Processes))
	if !validID(envID) || !validID(svc.ID) {
		return out, nil
	}
	scaled, err := list(ctx, q, "replica counts of service "+svc.ID, func(row pgx.Row) (ProcessReplicas, error) {
		var p ProcessReplicas
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

func replicasOf(p domain.Process, set map[string]int) ProcessReplicas {
	if n, ok := set[p.Name]; ok {
		return ProcessReplicas{Process: p.Name, Replicas: n, Scaled: true}
	}
	return ProcessReplicas{Process: p.Name, Replicas: p.Replicas}
}
