package query

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

const clusterColumns = `c.id::text, c.org_id::text, c.name, c.created_at,
	(SELECT count(*) FROM servers s WHERE s.cluster_id = c.id AND s.revoked_at IS NULL)`

func scanCluster(row pgx.Row) (api.Cluster, error) {
	var c api.Cluster
	err := row.Scan(&c.ID, &c.OrgID, &c.Name, &c.CreatedAt, &c.Servers)
	return c, err
}

// Clusters lists the live clusters of an organisation by name.
func Clusters(ctx context.Context, q eventstore.Querier, orgID string) ([]api.Cluster, error) {
	if !validID(orgID) {
		return []api.Cluster{}, nil
	}
	return list(ctx, q, "clusters of organisation "+orgID, scanCluster,
		`SELECT `+clusterColumns+` FROM clusters c WHERE c.org_id = $1 AND c.deleted_at IS NULL ORDER BY c.name`, orgID)
}

// ClusterByName finds a live cluster of an organisation by name.
func ClusterByName(ctx context.Context, q eventstore.Querier, orgID, name string) (api.Cluster, error) {
	what := fmt.Sprintf("cluster %q", name)
	if !validID(orgID) {
		return api.Cluster{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanCluster,
		`SELECT `+clusterColumns+` FROM clusters c WHERE c.org_id = $1 AND c.name = $2 AND c.deleted_at IS NULL`, orgID, name)
}

// JoinTokens lists the join tokens of a cluster, newest first, revoked and
// expired ones included (the caller compares ExpiresAt with its clock).
func JoinTokens(ctx context.Context, q eventstore.Querier, clusterID string) ([]api.JoinToken, error) {
	if !validID(clusterID) {
		return []api.JoinToken{}, nil
	}
	return list(ctx, q, "join tokens of cluster "+clusterID, func(row pgx.Row) (api.JoinToken, error) {
		var t api.JoinToken
		err := row.Scan(&t.ID, &t.ClusterID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
		return t, err
	}, `SELECT id::text, cluster_id::text, created_at, expires_at, revoked_at
	      FROM cluster_join_tokens WHERE cluster_id = $1 ORDER BY created_at DESC, id`, clusterID)
}

// Servers lists the servers of a cluster by name, those whose credential is
// revoked last. Connected is whether the server is live at now
// (domain.Lease.Live: a heartbeat within 60 s, not disconnected since).
func Servers(ctx context.Context, q eventstore.Querier, clusterID string, now time.Time) ([]api.Server, error) {
	if !validID(clusterID) {
		return []api.Server{}, nil
	}
	return list(ctx, q, "servers of cluster "+clusterID, func(row pgx.Row) (api.Server, error) {
		var s api.Server
		var last []byte
		var held bool
		err := row.Scan(&s.ID, &s.ClusterID, &s.Name, &s.RegisteredAt, &s.RevokedAt, &s.Version, &s.Arch, &held, &s.LastHeartbeatAt,
			&s.CannotUpgrade, &last)
		s.Connected = domain.Lease{Held: held, RenewedAt: s.LastHeartbeatAt}.Live(now)
		if err == nil {
			s.LastUpgrade, err = decodeLastUpgrade(last)
		}
		return s, err
	}, `SELECT v.id::text, v.cluster_id::text, v.name, v.registered_at, v.revoked_at,
	           coalesce(s.version, ''), coalesce(s.arch, ''), coalesce(s.connected, false), s.last_heartbeat_at,
	           coalesce(v.cannot_upgrade, ''), v.last_upgrade
	      FROM servers v LEFT JOIN server_status s ON s.server_id = v.id
	     WHERE v.cluster_id = $1 ORDER BY v.revoked_at IS NOT NULL, v.name, v.id`, clusterID)
}
