package query

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Cluster is a K3s cluster of an organisation.
type Cluster struct {
	ID        string    `json:"id"`
	OrgID     string    `json:"orgId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Servers counts the cluster's servers whose credential is not revoked.
	Servers int `json:"servers"`
}

// JoinToken is a token a server joins a cluster with, without its hash.
type JoinToken struct {
	ID        string     `json:"id"`
	ClusterID string     `json:"clusterId"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt time.Time  `json:"expiresAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// Server is a server registered in a cluster, without its credential hash.
type Server struct {
	ID           string     `json:"id"`
	ClusterID    string     `json:"clusterId"`
	Name         string     `json:"name"`
	RegisteredAt time.Time  `json:"registeredAt"`
	RevokedAt    *time.Time `json:"revokedAt,omitempty"`
	// Version, Connected and LastHeartbeatAt are what its agent last
	// reported (empty, false and null before it first connected); whether
	// it counts as connected now also depends on how old the heartbeat is.
	Version         string     `json:"version"`
	Connected       bool       `json:"connected"`
	LastHeartbeatAt *time.Time `json:"lastHeartbeatAt"`
	// Skew, CannotUpgrade and LastUpgrade: see ServerUpgrade (upgrades.go);
	// Skew is filled by WithSkew.
	Skew          string       `json:"skew"`
	CannotUpgrade string       `json:"cannotUpgrade"`
	LastUpgrade   *LastUpgrade `json:"lastUpgrade,omitempty"`
}

const clusterColumns = `c.id::text, c.org_id::text, c.name, c.created_at,
	(SELECT count(*) FROM servers s WHERE s.cluster_id = c.id AND s.revoked_at IS NULL)`

func scanCluster(row pgx.Row) (Cluster, error) {
	var c Cluster
	err := row.Scan(&c.ID, &c.OrgID, &c.Name, &c.CreatedAt, &c.Servers)
	return c, err
}

// Clusters lists the live clusters of an organisation by name.
func Clusters(ctx context.Context, q eventstore.Querier, orgID string) ([]Cluster, error) {
	if !validID(orgID) {
		return []Cluster{}, nil
	}
	return list(ctx, q, "clusters of organisation "+orgID, scanCluster,
		`SELECT `+clusterColumns+` FROM clusters c WHERE c.org_id = $1 AND c.deleted_at IS NULL ORDER BY c.name`, orgID)
}

// ClusterByName finds a live cluster of an organisation by name.
func ClusterByName(ctx context.Context, q eventstore.Querier, orgID, name string) (Cluster, error) {
	what := fmt.Sprintf("cluster %q", name)
	if !validID(orgID) {
		return Cluster{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanCluster,
		`SELECT `+clusterColumns+` FROM clusters c WHERE c.org_id = $1 AND c.name = $2 AND c.deleted_at IS NULL`, orgID, name)
}

// JoinTokens lists the join tokens of a cluster, newest first, revoked and
// expired ones included (the caller compares ExpiresAt with its clock).
func JoinTokens(ctx context.Context, q eventstore.Querier, clusterID string) ([]JoinToken, error) {
	if !validID(clusterID) {
		return []JoinToken{}, nil
	}
	return list(ctx, q, "join tokens of cluster "+clusterID, func(row pgx.Row) (JoinToken, error) {
		var t JoinToken
		err := row.Scan(&t.ID, &t.ClusterID, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
		return t, err
	}, `SELECT id::text, cluster_id::text, created_at, expires_at, revoked_at
	      FROM cluster_join_tokens WHERE cluster_id = $1 ORDER BY created_at DESC, id`, clusterID)
}

// Servers lists the servers of a cluster by name, those whose credential is
// revoked last.
func Servers(ctx context.Context, q eventstore.Querier, clusterID string) ([]Server, error) {
	if !validID(clusterID) {
		return []Server{}, nil
	}
	return list(ctx, q, "servers of cluster "+clusterID, func(row pgx.Row) (Server, error) {
		var s Server
		var last []byte
		err := row.Scan(&s.ID, &s.ClusterID, &s.Name, &s.RegisteredAt, &s.RevokedAt, &s.Version, &s.Connected, &s.LastHeartbeatAt,
			&s.CannotUpgrade, &last)
		if err == nil {
			s.LastUpgrade, err = decodeLastUpgrade(last)
		}
		return s, err
	}, `SELECT v.id::text, v.cluster_id::text, v.name, v.registered_at, v.revoked_at,
	           coalesce(s.version, ''), coalesce(s.connected, false), s.last_heartbeat_at,
	           coalesce(v.cannot_upgrade, ''), v.last_upgrade
	      FROM servers v LEFT JOIN server_status s ON s.server_id = v.id
	     WHERE v.cluster_id = $1 ORDER BY v.revoked_at IS NOT NULL, v.name, v.id`, clusterID)
}
