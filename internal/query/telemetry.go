package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/transport"
)

// StatusOfCluster reads the leases of a cluster's live servers (credential
// not revoked): the cluster is Connected while one of them is live at now
// (domain.Lease.Live, the one rule), and ConnectedAgents counts those. now
// is the caller's clock, so tests inject it.
func StatusOfCluster(ctx context.Context, q eventstore.Querier, clusterID string, now time.Time) (api.ClusterStatus, error) {
	sts, err := StatusOfClusters(ctx, q, []string{clusterID}, now)
	if err != nil {
		return api.ClusterStatus{State: api.StateDisconnected}, fmt.Errorf("status of cluster %s: %w", clusterID, err)
	}
	return sts[clusterID], nil
}

// StatusOfClusters is StatusOfCluster for many clusters in one statement:
// every one of clusterIDs has a status in the map (Disconnected when none
// of its servers ever connected).
func StatusOfClusters(ctx context.Context, q eventstore.Querier, clusterIDs []string, now time.Time) (map[string]api.ClusterStatus, error) {
	rows, err := q.Query(ctx, `SELECT s.cluster_id::text, s.connected, s.last_heartbeat_at
		FROM server_status s JOIN servers v ON v.id = s.server_id AND v.revoked_at IS NULL WHERE s.cluster_id = ANY($1::text[]::uuid[])`, clusterIDs)
	if err != nil {
		return nil, fmt.Errorf("status of clusters: %w", err)
	}
	type clusterLease struct {
		cluster string
		domain.Lease
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (clusterLease, error) {
		var l clusterLease
		err := r.Scan(&l.cluster, &l.Held, &l.RenewedAt)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("status of clusters: %w", err)
	}
	leases := map[string][]domain.Lease{}
	for _, l := range all {
		leases[l.cluster] = append(leases[l.cluster], l.Lease)
	}
	out := make(map[string]api.ClusterStatus, len(clusterIDs))
	for _, id := range clusterIDs {
		// The rows name clusters in PostgreSQL's form of a uuid; the map
		// is keyed by the caller's.
		canonical := id
		if u, err := uuid.Parse(id); err == nil {
			canonical = u.String()
		}
		st := api.ClusterStatus{State: api.StateDisconnected}
		for _, l := range leases[canonical] {
			if l.RenewedAt != nil && (st.LastHeartbeatAt == nil || l.RenewedAt.After(*st.LastHeartbeatAt)) {
				st.LastHeartbeatAt = l.RenewedAt
			}
		}
		if st.ConnectedAgents = domain.LiveCount(leases[canonical], now); st.ConnectedAgents > 0 {
			st.State = api.StateConnected
		}
		out[id] = st
	}
	return out, nil
}

// ServerLease reads a server's liveness record (the zero lease when its
// agent never connected): what an upgrade command carries, for the domain
// to decide with domain.Lease.Live at the command's time.
func ServerLease(ctx context.Context, q eventstore.Querier, serverID string) (domain.Lease, error) {
	var l domain.Lease
	if !validID(serverID) {
		return l, nil
	}
	err := q.QueryRow(ctx, `SELECT connected, last_heartbeat_at FROM server_status WHERE server_id = $1`, serverID).Scan(&l.Held, &l.RenewedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Lease{}, nil
	}
	if err != nil {
		return domain.Lease{}, fmt.Errorf("the lease of server %s: %w", serverID, err)
	}
	return l, nil
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

// MeshReport is what a cluster's agent last reported of its mesh nodes.
type MeshReport struct {
	Nodes      []transport.MeshNodeReport
	ReportedAt time.Time
}

// MeshStatus returns the organisation's clusters' last mesh reports.
func MeshStatus(ctx context.Context, q eventstore.Querier, orgID string) (map[string]MeshReport, error) {
	rows, err := q.Query(ctx, `SELECT cluster_id::text, nodes, reported_at FROM mesh_status WHERE org_id::text = $1`, orgID)
	if err != nil {
		return nil, fmt.Errorf("mesh status of %s: %w", orgID, err)
	}
	defer rows.Close()
	out := map[string]MeshReport{}
	for rows.Next() {
		var id string
		var r MeshReport
		if err := rows.Scan(&id, &r.Nodes, &r.ReportedAt); err != nil {
			return nil, err
		}
		out[id] = r
	}
	return out, rows.Err()
}

// MeshHandshakeFresh is how recent a node's latest handshake must be for it
// to count as reachable (WireGuard rekeys every 2 minutes).
const MeshHandshakeFresh = 3 * time.Minute

// MeshReachable is the one rule of a mesh node's health: its cluster's
// agent reported it within MeshHandshakeFresh and it made a handshake with
// a peer within it (a node alone in the mesh is reachable); the reason says
// why not. alone says the mesh has no other node.
func MeshReachable(r transport.MeshNodeReport, reportedAt, now time.Time, alone bool) (bool, string) {
	if reportedAt.IsZero() {
		return false, "its cluster's agent has not reported it"
	}
	if age := now.Sub(reportedAt); age > MeshHandshakeFresh {
		return false, "no report from its cluster's agent for " + age.Round(time.Second).String()
	}
	if alone {
		return true, "it has no peer yet"
	}
	var latest time.Time
	for _, p := range r.Peers {
		if t, err := time.Parse(time.RFC3339, p.LastHandshake); err == nil && t.After(latest) {
			latest = t
		}
	}
	switch {
	case latest.IsZero():
		return false, "no handshake with any peer yet"
	case now.Sub(latest) > MeshHandshakeFresh:
		return false, "no handshake with any peer for " + now.Sub(latest).Round(time.Second).String()
	}
	return true, ""
}

// MeshHealth counts the reported mesh nodes of every organisation by
// whether they are reachable (for the metrics).
func MeshHealth(ctx context.Context, q eventstore.Querier, now time.Time) (reachable, unreachable int, err error) {
	// Clusters that were deleted left the mesh: their last report is not
	// counted.
	rows, err := q.Query(ctx, `SELECT m.org_id::text, m.nodes, m.reported_at FROM mesh_status m
		JOIN clusters c ON c.id = m.cluster_id AND c.deleted_at IS NULL`)
	if err != nil {
		return 0, 0, fmt.Errorf("mesh health: %w", err)
	}
	defer rows.Close()
	type rep struct {
		nodes []transport.MeshNodeReport
		at    time.Time
	}
	byOrg := map[string][]rep{}
	for rows.Next() {
		var org string
		var r rep
		if err := rows.Scan(&org, &r.nodes, &r.at); err != nil {
			return 0, 0, err
		}
		byOrg[org] = append(byOrg[org], r)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	for _, reps := range byOrg {
		total := 0
		for _, r := range reps {
			total += len(r.nodes)
		}
		for _, r := range reps {
			for _, n := range r.nodes {
				if ok, _ := MeshReachable(n, r.at, now, total == 1); ok {
					reachable++
				} else {
					unreachable++
				}
			}
		}
	}
	return reachable, unreachable, nil
}
