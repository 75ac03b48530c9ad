package query

import (
	"context"
	"fmt"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// StatusOfCluster reads the heartbeats of a cluster's servers; now and the
// threshold come from the caller, so tests use an injected clock.
func StatusOfCluster(ctx context.Context, q eventstore.Querier, clusterID string, now time.Time, after time.Duration) (api.ClusterStatus, error) {
	var st api.ClusterStatus
	err := q.QueryRow(ctx, `SELECT max(s.last_heartbeat_at), count(*) FILTER (WHERE s.connected AND s.last_heartbeat_at > $2)
		FROM server_status s JOIN servers v ON v.id = s.server_id AND v.revoked_at IS NULL WHERE s.cluster_id = $1`,
		clusterID, now.Add(-after)).Scan(&st.LastHeartbeatAt, &st.ConnectedAgents)
	if err != nil {
		return st, fmt.Errorf("status of cluster %s: %w", clusterID, err)
	}
	st.State = api.StateDisconnected
	if st.LastHeartbeatAt != nil && now.Sub(*st.LastHeartbeatAt) < after {
		st.State = api.StateConnected
	}
	return st, nil
}

// Acknowledgements lists the servers' last acknowledgements of an environment.
func Acknowledgements(ctx context.Context, q eventstore.Querier, envID string) ([]api.Acknowledgement, error) {
	rows, err := q.Query(ctx, `SELECT a.server_id::text, s.name, a.revision, a.ignored, a.services, a.acked_at
		FROM revision_acks a JOIN servers s ON s.id = a.server_id WHERE a.environment_id = $1 ORDER BY s.name`, envID)
	if err != nil {
		return nil, fmt.Errorf("acknowledgements of %s: %w", envID, err)
	}
	defer rows.Close()
	out := []api.Acknowledgement{}
	for rows.Next() {
		var a api.Acknowledgement
		if err := rows.Scan(&a.ServerID, &a.Server, &a.Revision, &a.Ignored, &a.Services, &a.AckedAt); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Workloads lists an environment's reported workloads.
func Workloads(ctx context.Context, q eventstore.Querier, envID string) ([]api.Workload, error) {
	rows, err := q.Query(ctx, `SELECT service, release, process, desired, ready, updated_at FROM workload_status
		WHERE environment_id::text = $1 ORDER BY service, release, process`, envID)
	if err != nil {
		return nil, fmt.Errorf("workloads of %s: %w", envID, err)
	}
	defer rows.Close()
	out := []api.Workload{}
	for rows.Next() {
		var w api.Workload
		if err := rows.Scan(&w.Service, &w.Release, &w.Process, &w.Desired, &w.Ready, &w.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// Nodes lists a cluster's reported nodes.
func Nodes(ctx context.Context, q eventstore.Querier, clusterID string) ([]api.Node, error) {
	rows, err := q.Query(ctx, `SELECT name, ready, cpu, memory, versions, updated_at FROM node_status WHERE cluster_id::text = $1 ORDER BY name`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("nodes of %s: %w", clusterID, err)
	}
	defer rows.Close()
	out := []api.Node{}
	for rows.Next() {
		var n api.Node
		if err := rows.Scan(&n.Name, &n.Ready, &n.CPU, &n.Memory, &n.Versions, &n.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// ClusterEvents lists a cluster's reported warning events, newest first.
func ClusterEvents(ctx context.Context, q eventstore.Querier, clusterID string) ([]api.ClusterEvent, error) {
	rows, err := q.Query(ctx, `SELECT coalesce(environment_id::text, ''), namespace, object, reason, message, count, last_seen
		FROM cluster_events WHERE cluster_id::text = $1 ORDER BY last_seen DESC, object`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", clusterID, err)
	}
	defer rows.Close()
	out := []api.ClusterEvent{}
	for rows.Next() {
		var e api.ClusterEvent
		if err := rows.Scan(&e.EnvironmentID, &e.Namespace, &e.Object, &e.Reason, &e.Message, &e.Count, &e.LastSeen); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
