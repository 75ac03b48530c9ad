package query_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func TestClustersJoinTokensServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	other := d.org("other", 1)
	eu := d.cluster(acme, "k3s-eu", 2, false)
	us := d.cluster(acme, "k3s-us", 3, false)
	d.cluster(acme, "k3s-gone", 4, true)
	d.cluster(other, "theirs", 5, false)

	server := func(cluster, name, cred string, registered int, revoked *time.Time) string {
		s := id()
		d.exec(`INSERT INTO servers (id, org_id, cluster_id, name, credential_hash, registered_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			s, acme, cluster, name, cred, at(registered), revoked)
		return s
	}
	rev := at(30)
	s2 := server(eu, "node-2", "credential-hash-2", 11, nil)
	s1 := server(eu, "node-1", "credential-hash-1", 10, nil)
	s0 := server(eu, "node-0", "credential-hash-0", 9, &rev)
	server(us, "node-us", "credential-hash-us", 12, nil)

	clusters, err := query.Clusters(ctx, d.pool, acme)
	require.NoError(t, err)
	require.Len(t, clusters, 2)
	require.Equal(t, api.Cluster{ID: eu, OrgID: acme, Name: "k3s-eu", CreatedAt: clusters[0].CreatedAt, Servers: 2}, clusters[0])
	require.True(t, clusters[0].CreatedAt.Equal(at(2)))
	require.Equal(t, us, clusters[1].ID)
	require.Equal(t, 1, clusters[1].Servers)

	c, err := query.ClusterByName(ctx, d.pool, acme, "k3s-us")
	require.NoError(t, err)
	require.Equal(t, us, c.ID)
	for _, name := range []string{"k3s-gone", "theirs", "missing"} {
		_, err = query.ClusterByName(ctx, d.pool, acme, name)
		require.ErrorIs(t, err, query.ErrNotFound, name)
	}
	none, err := query.Clusters(ctx, d.pool, "bad")
	require.NoError(t, err)
	require.Empty(t, none)

	servers, err := query.Servers(ctx, d.pool, eu, at(41))
	require.NoError(t, err)
	require.Len(t, servers, 3)
	require.Equal(t, []string{s1, s2, s0}, []string{servers[0].ID, servers[1].ID, servers[2].ID})
	require.Equal(t, api.Server{ID: s1, ClusterID: eu, Name: "node-1", RegisteredAt: servers[0].RegisteredAt}, servers[0])
	require.True(t, servers[0].RegisteredAt.Equal(at(10)))
	require.NotNil(t, servers[2].RevokedAt)
	require.True(t, servers[2].RevokedAt.Equal(rev))
	require.NotContains(t, jsonOf(t, servers), "credential-hash")

	// What the agent last reported: its version, connection and heartbeat.
	d.exec(`INSERT INTO server_status (server_id, org_id, cluster_id, replica, version, arch, facts, connected, connected_at, last_heartbeat_at)
		VALUES ($1, $2, $3, 'r1', '1.4.2', 'arm64', '{}', true, $4, $5)`, s2, acme, eu, at(40), at(41))
	servers, err = query.Servers(ctx, d.pool, eu, at(41).Add(59*time.Second))
	require.NoError(t, err)
	require.Equal(t, s2, servers[1].ID)
	require.Equal(t, "1.4.2", servers[1].Version)
	require.True(t, servers[1].Connected, "live 59 s after its heartbeat")
	require.NotNil(t, servers[1].LastHeartbeatAt)
	require.True(t, servers[1].LastHeartbeatAt.Equal(at(41)))
	require.Empty(t, servers[0].Version, "a server whose agent never connected")
	require.False(t, servers[0].Connected)
	require.Nil(t, servers[0].LastHeartbeatAt)
	// No heartbeat for 61 s: not connected, though no disconnect was
	// recorded (its replica died); the heartbeat's time stays.
	servers, err = query.Servers(ctx, d.pool, eu, at(41).Add(61*time.Second))
	require.NoError(t, err)
	require.False(t, servers[1].Connected, "61 s without a heartbeat")
	require.True(t, servers[1].LastHeartbeatAt.Equal(at(41)))

	joinToken := func(cluster, hash string, created int, revoked *time.Time) string {
		j := id()
		d.exec(`INSERT INTO cluster_join_tokens (id, org_id, cluster_id, token_hash, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			j, acme, cluster, hash, at(created), at(created+60), revoked)
		return j
	}
	j1 := joinToken(eu, "join-hash-1", 1, &rev)
	j2 := joinToken(eu, "join-hash-2", 2, nil)
	joinToken(us, "join-hash-us", 3, nil)

	tokens, err := query.JoinTokens(ctx, d.pool, eu)
	require.NoError(t, err)
	require.Len(t, tokens, 2)
	require.Equal(t, j2, tokens[0].ID)
	require.Equal(t, eu, tokens[0].ClusterID)
	require.True(t, tokens[0].CreatedAt.Equal(at(2)))
	require.True(t, tokens[0].ExpiresAt.Equal(at(62)))
	require.Nil(t, tokens[0].RevokedAt)
	require.Equal(t, j1, tokens[1].ID)
	require.NotNil(t, tokens[1].RevokedAt)
	require.NotContains(t, jsonOf(t, tokens), "join-hash")
}

func TestSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)

	s, err := query.Settings(ctx, d.pool)
	require.NoError(t, err)
	require.Equal(t, api.InstanceSettings{AgentAutoUpgrade: true}, s, "on by default")

	d.exec(`INSERT INTO instance_settings (id, agent_auto_upgrade, updated_at) VALUES (1, false, $1)`, at(5))
	s, err = query.Settings(ctx, d.pool)
	require.NoError(t, err)
	require.False(t, s.AgentAutoUpgrade)
	require.NotNil(t, s.UpdatedAt)
	require.True(t, s.UpdatedAt.Equal(at(5)))
}
