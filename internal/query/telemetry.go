package query

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ClusterStatus is whether a cluster's agents are in touch.
type ClusterStatus struct {
	// State is Connected or Disconnected: no heartbeat for DisconnectedAfter
	// from any of its servers.
	State           string     `json:"state"`
	LastHeartbeatAt *time.Time `json:"lastHeartbeatAt,omitempty"`
	ConnectedAgents int        `json:"connectedAgents"`
}

// Cluster states.
const (
	StateConnected    = "Connected"
	StateDisconnected = "Disconnected"
)

// StatusOfCluster reads the heartbeats of a cluster's servers; now and the
// threshold come from the caller, so tests use an injected clock.
func StatusOfCluster(ctx context.Context, q eventstore.Querier, clusterID string, now time.Time, after time.Duration) (ClusterStatus, error) {
	var st ClusterStatus
	err := q.QueryRow(ctx, `SELECT max(s.last_heartbeat_at), count(*) FILTER (WHERE s.connected AND s.last_heartbeat_at > $2)
		FROM server_status s JOIN servers v ON v.id = s.server_id AND v.revoked_at IS NULL WHERE s.cluster_id = $1`,
		clusterID, now.Add(-after)).Scan(&st.LastHeartbeatAt, &st.ConnectedAgents)
	if err != nil {
		return st, fmt.Errorf("status of cluster %s: %w", clusterID, err)
	}
	st.State = StateDisconnected
	if st.LastHeartbeatAt != nil && now.Sub(*st.LastHeartbeatAt) < after {
		st.State = StateConnected
	}
	return st, nil
}

// Acknowledgement is a server's last acknowledgement of an environment's revision.
type Acknowledgement struct {
	ServerID string          `json:"serverId"`
	Server   string          `json:"server"`
	Revision int             `json:"revision"`
	Ignored  bool            `json:"ignored"`
	Services json.RawMessage `json:"services"`
	AckedAt  time.Time       `json:"ackedAt"`
}

// Acknowledgements lists the servers' last acknowledgements of an environment.
func Acknowledgements(ctx context.Context, q eventstore.Querier, envID string) ([]Acknowledgement, error) {
	rows, err := q.Query(ctx, `SELECT a.server_id::text, s.name, a.revision, a.ignored, a.services, a.acked_at
		FROM revision_acks a JOIN servers s ON s.id = a.server_id WHERE a.environment_id = $1 ORDER BY s.name`, envID)
	if err != nil {
		return nil, fmt.Errorf("acknowledgements of %s: %w", envID, err)
	}
	defer rows.Close()
	out := []Acknowledgement{}
	for rows.Next() {
		var a Acknowledgement
		if err := rows.Scan(&a.ServerID, &a.Server, &a.Revision, &a.Ignored, &a.Services, &a.AckedAt); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Workload is what an agent reports of one process of one release.
type Workload struct {
	Service   string    `json:"service"`
	Release   int       `json:"release"`
	Process   string    `json:"process"`
	Desired   int       `json:"desired"`
	Ready     int       `json:"ready"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Workloads lists an environment's reported workloads.
func Workloads(ctx context.Context, q eventstore.Querier, envID string) ([]Workload, error) {
	rows, err := q.Query(ctx, `SELECT service, release, process, desired, ready, updated_at FROM workload_status
		WHERE environment_id::text = $1 ORDER BY service, release, process`, envID)
	if err != nil {
		return nil, fmt.Errorf("workloads of %s: %w", envID, err)
	}
	defer rows.Close()
	out := []Workload{}
	for rows.Next() {
		var w Workload
		if err := rows.Scan(&w.Service, &w.Release, &w.Process, &w.Desired, &w.Ready, &w.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// Node is a reported node.
type Node struct {
	Name      string            `json:"name"`
	Ready     bool              `json:"ready"`
	CPU       string            `json:"cpu"`
	Memory    string            `json:"memory"`
	Versions  map[string]string `json:"versions"`
	UpdatedAt time.Time         `json:"updatedAt"`
}

// Nodes lists a cluster's reported nodes.
func Nodes(ctx context.Context, q eventstore.Querier, clusterID string) ([]Node, error) {
	rows, err := q.Query(ctx, `SELECT name, ready, cpu, memory, versions, updated_at FROM node_status WHERE cluster_id::text = $1 ORDER BY name`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("nodes of %s: %w", clusterID, err)
	}
	defer rows.Close()
	out := []Node{}
	for rows.Next() {
		var n Node
		if err := rows.Scan(&n.Name, &n.Ready, &n.CPU, &n.Memory, &n.Versions, &n.UpdatedAt); err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// ClusterEvent is a warning event about a managed object, as reported.
type ClusterEvent struct {
	EnvironmentID string    `json:"environmentId,omitempty"`
	Namespace     string    `json:"namespace"`
	Object        string    `json:"object"`
	Reason        string    `json:"reason"`
	Message       string    `json:"message"`
	Count         int       `json:"count"`
	LastSeen      time.Time `json:"lastSeen"`
}

// ClusterEvents lists a cluster's reported warning events, newest first.
func ClusterEvents(ctx context.Context, q eventstore.Querier, clusterID string) ([]ClusterEvent, error) {
	rows, err := q.Query(ctx, `SELECT coalesce(environment_id::text, ''), namespace, object, reason, message, count, last_seen
		FROM cluster_events WHERE cluster_id::text = $1 ORDER BY last_seen DESC, object`, clusterID)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", clusterID, err)
	}
	defer rows.Close()
	out := []ClusterEvent{}
	for rows.Next() {
		var e ClusterEvent
		if err := rows.Scan(&e.EnvironmentID, &e.Namespace, &e.Object, &e.Reason, &e.Message, &e.Count, &e.LastSeen); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
