package telemetry

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nebulactrl/nebulactrl/transport"
)

// The agents' connections and acknowledgements (server_status,
// revision_acks): kept as telemetry, not events. The agent link bounds
// what an agent sends before it calls these.
//
// A server_status row is the server's lease (domain.Lease): connected is
// Held, last_heartbeat_at RenewedAt. The hello takes it, each heartbeat
// renews it, a clean disconnect releases it; nobody needs to release what a
// replica that died held, since the lease expires by time. Whether it is
// live is decided by domain.Lease.Live alone, never from connected.

// Connection is what an agent's hello tells of its server's connection.
type Connection struct {
	ServerID string
	// Replica is the control-plane process the agent is connected to, and
	// Session the connection (a new one at each connect).
	Replica, Session, Version, Arch string
	Facts                           transport.Facts
	At                              time.Time
}

// SaveConnected records that a server's agent connected (and said hello):
// it takes the server's lease.
func (s *Store) SaveConnected(ctx context.Context, src Source, c Connection) error {
	facts, _ := json.Marshal(c.Facts)
	_, err := s.pool.Exec(ctx, `INSERT INTO server_status (server_id, org_id, cluster_id, replica, session, version, arch, facts, leader, connected, connected_at, last_heartbeat_at)
		VALUES ($1, $2, $3, $4, $10, $5, $6, $7, $8, true, $9, $9)
		ON CONFLICT (server_id) DO UPDATE SET replica = EXCLUDED.replica, session = EXCLUDED.session, version = EXCLUDED.version, arch = EXCLUDED.arch,
			facts = EXCLUDED.facts, leader = EXCLUDED.leader, connected = true, connected_at = EXCLUDED.connected_at,
			last_heartbeat_at = EXCLUDED.last_heartbeat_at`,
		c.ServerID, src.OrgID, src.ClusterID, c.Replica, c.Version, c.Arch, facts, c.Facts.Leader, c.At, c.Session)
	return err
}

// SaveHeartbeat keeps a server's last-seen time and whether its agent leads:
// it renews the server's lease.
func (s *Store) SaveHeartbeat(ctx context.Context, serverID string, leader bool, at time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE server_status SET last_heartbeat_at = $2, leader = $3, connected = true WHERE server_id = $1`,
		serverID, at, leader)
	return err
}

// SaveDisconnected records that a server's connection (session, to
// replica) ended: it releases the server's lease, unless another connection
// took it since (to another replica, or a new one to the same replica whose
// hello came before this one's disconnect).
func (s *Store) SaveDisconnected(ctx context.Context, serverID, replica, session string) error {
	_, err := s.pool.Exec(ctx, `UPDATE server_status SET connected = false WHERE server_id = $1 AND replica = $2 AND session = $3`,
		serverID, replica, session)
	return err
}

// SaveAck keeps a server's last acknowledgement of an environment, when the
// environment runs on the server's cluster (src.ClusterID).
func (s *Store) SaveAck(ctx context.Context, src Source, serverID string, a transport.Ack, at time.Time) error {
	services, _ := json.Marshal(a.Services)
	_, err := s.pool.Exec(ctx, `INSERT INTO revision_acks (environment_id, server_id, org_id, revision, hash, ignored, services, acked_at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM environments WHERE id = $1 AND cluster_id = $9)
		ON CONFLICT (environment_id, server_id) DO UPDATE SET revision = EXCLUDED.revision, hash = EXCLUDED.hash,
			ignored = EXCLUDED.ignored, services = EXCLUDED.services, acked_at = EXCLUDED.acked_at`,
		a.EnvironmentID, serverID, src.OrgID, a.Revision, a.Hash, a.Ignored, services, at, src.ClusterID)
	return err
}
