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
