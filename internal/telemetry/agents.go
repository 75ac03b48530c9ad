package telemetry

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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

// Heartbeat is one agent's heartbeat: it renews its server's lease.
type Heartbeat struct {
	ServerID string
	// Session is the connection the heartbeat came on (the Batcher's
	// Forget drops only that connection's).
	Session string
	Leader  bool
	At      time.Time
}

// SaveHeartbeats renews many servers' leases in one statement, each only
// while its connection (Session) holds it, and never back in time: a
// heartbeat of a connection replaced since, or one written late, renews
// nothing. Each server must be named at most once.
func (s *Store) SaveHeartbeats(ctx context.Context, beats []Heartbeat) error {
	return saveHeartbeats(ctx, s.pool, beats)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func saveHeartbeats(ctx context.Context, db execer, beats []Heartbeat) error {
	if len(beats) == 0 {
		return nil
	}
	ids, sessions, leaders, ats := make([]string, len(beats)), make([]string, len(beats)), make([]bool, len(beats)), make([]time.Time, len(beats))
	for i, b := range beats {
		ids[i], sessions[i], leaders[i], ats[i] = b.ServerID, b.Session, b.Leader, b.At
	}
	_, err := db.Exec(ctx, `UPDATE server_status s SET last_heartbeat_at = b.at, leader = b.leader, connected = true
		FROM unnest($1::text[]::uuid[], $2::text[], $3::boolean[], $4::timestamptz[]) AS b(server_id, session, leader, at)
		WHERE s.server_id = b.server_id AND s.session = b.session AND s.last_heartbeat_at <= b.at`,
		ids, sessions, leaders, ats)
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

// AckRecord is one server's acknowledgement of an environment's revision.
type AckRecord struct {
	Source
	ServerID string
	transport.Ack
	At time.Time
}

// SaveAck keeps a server's last acknowledgement of an environment, when the
// environment runs on the server's cluster (src.ClusterID).
func (s *Store) SaveAck(ctx context.Context, src Source, serverID string, a transport.Ack, at time.Time) error {
	return s.SaveAcks(ctx, []AckRecord{{Source: src, ServerID: serverID, Ack: a, At: at}})
}

// SaveAcks keeps many acknowledgements in one statement: each is kept when
// its environment runs on its server's cluster, unless a later one is kept
// already (one retried after the agent acknowledged again elsewhere). Each
// (environment, server) must be named at most once.
func (s *Store) SaveAcks(ctx context.Context, acks []AckRecord) error {
	return saveAcks(ctx, s.pool, acks)
}

func saveAcks(ctx context.Context, db execer, acks []AckRecord) error {
	if len(acks) == 0 {
		return nil
	}
	n := len(acks)
	envs, servers, orgs, clusters, hashes := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	revisions, ignored, services, ats := make([]int64, n), make([]bool, n), make([]string, n), make([]time.Time, n)
	for i, a := range acks {
		b, _ := json.Marshal(a.Services)
		envs[i], servers[i], orgs[i], clusters[i], hashes[i] = a.EnvironmentID, a.ServerID, a.OrgID, a.ClusterID, a.Hash
		revisions[i], ignored[i], services[i], ats[i] = int64(a.Revision), a.Ignored, string(b), a.At
	}
	_, err := db.Exec(ctx, `INSERT INTO revision_acks (environment_id, server_id, org_id, revision, hash, ignored, services, acked_at)
		SELECT a.environment_id, a.server_id, a.org_id, a.revision, a.hash, a.ignored, a.services, a.at
		FROM unnest($1::text[]::uuid[], $2::text[]::uuid[], $3::text[]::uuid[], $4::bigint[], $5::text[], $6::boolean[], $7::text[]::jsonb[], $8::timestamptz[], $9::text[]::uuid[])
			AS a(environment_id, server_id, org_id, revision, hash, ignored, services, at, cluster_id)
		JOIN environments e ON e.id = a.environment_id AND e.cluster_id = a.cluster_id
		ON CONFLICT (environment_id, server_id) DO UPDATE SET revision = EXCLUDED.revision, hash = EXCLUDED.hash,
			ignored = EXCLUDED.ignored, services = EXCLUDED.services, acked_at = EXCLUDED.acked_at
			WHERE revision_acks.acked_at <= EXCLUDED.acked_at`,
		envs, servers, orgs, revisions, hashes, ignored, services, ats, clusters)
	return err
}
