package query_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// Every read of whether a server is connected applies the one rule
// (domain.Lease.Live) at the caller's clock: the servers, the agents'
// standing for upgrades, the cluster's status and the lease an upgrade
// carries agree, 59 s after the last heartbeat (live) and 61 s after (gone,
// although no disconnect was recorded: its replica died).
func TestEveryReadAppliesTheLivenessRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	eu := d.cluster(acme, "eu-1", 2, false)
	server := func(name string, revoked *time.Time) string {
		s := id()
		d.exec(`INSERT INTO servers (id, org_id, cluster_id, name, credential_hash, registered_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			s, acme, eu, name, "hash-"+name, at(3), revoked)
		return s
	}
	status := func(s string, connected bool, beat time.Time) {
		d.exec(`INSERT INTO server_status (server_id, org_id, cluster_id, replica, version, arch, facts, connected, connected_at, last_heartbeat_at)
			VALUES ($1, $2, $3, 'killed', '1.4.0', 'amd64', '{}', $4, $5, $5)`, s, acme, eu, connected, beat)
	}
	beat := at(10)
	rev := at(4)
	alive := server("alive", nil)
	left := server("left", nil)
	revoked := server("revoked", &rev)
	never := server("never", nil)
	status(alive, true, beat)
	status(left, false, beat) // a clean disconnect released its lease
	status(revoked, true, beat.Add(30*time.Second))

	lease, err := query.ServerLease(ctx, d.pool, alive)
	require.NoError(t, err)
	require.True(t, lease.Held)
	require.True(t, lease.RenewedAt.Equal(beat))
	lease, err = query.ServerLease(ctx, d.pool, never)
	require.NoError(t, err)
	require.Equal(t, domain.Lease{}, lease, "never connected: the zero lease, not live")

	for _, c := range []struct {
		after time.Duration
		live  bool
	}{{59 * time.Second, true}, {61 * time.Second, false}} {
		now := beat.Add(c.after)
		servers, err := query.Servers(ctx, d.pool, eu, now)
		require.NoError(t, err)
		connected := map[string]bool{}
		for _, s := range servers {
			connected[s.Name] = s.Connected
		}
		require.Equal(t, map[string]bool{"alive": c.live, "left": false, "never": false, "revoked": true}, connected, c.after)

		standing, err := query.ServerUpgrades(ctx, d.pool, acme, "1.5.0", now)
		require.NoError(t, err)
		for _, s := range standing {
			require.Equal(t, s.Name == "alive" && c.live, s.Connected, "%s at %s", s.Name, c.after)
		}
		one, err := query.ServerUpgradeByID(ctx, d.pool, alive, "1.5.0", now)
		require.NoError(t, err)
		require.Equal(t, c.live, one.Connected, c.after)

		st, err := query.StatusOfCluster(ctx, d.pool, eu, now)
		require.NoError(t, err)
		want := api.ClusterStatus{State: api.StateDisconnected, LastHeartbeatAt: st.LastHeartbeatAt}
		if c.live {
			want.State, want.ConnectedAgents = api.StateConnected, 1
		}
		require.Equal(t, want, st, c.after)
		require.True(t, st.LastHeartbeatAt.Equal(beat), "the revoked server's heartbeat does not count")

		lease, err := query.ServerLease(ctx, d.pool, alive)
		require.NoError(t, err)
		require.Equal(t, c.live, lease.Live(now), c.after)
	}
}
