package webhooks_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/webhooks"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// The cluster-links job reads every watched cluster's leases at once and
// sends a command only for a cluster whose state differs from what was last
// recorded: a pass over unchanged clusters sends none, a cluster whose last
// agent's lease expired (on the injected clock) is recorded disconnected,
// and each transition is recorded once.
func TestTheClusterLinksJobCommandsOnlyClustersThatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	store := eventstore.New(pool, nil)
	var mu sync.Mutex
	commands := 0
	cmd, err := dispatch.New(dispatch.Config{Store: store, Observe: func(command, outcome string) {
		if command == "ObserveClusterLink" {
			mu.Lock()
			commands++
			mu.Unlock()
		}
	}})
	require.NoError(t, err)
	now := time.Now().UTC().Truncate(time.Second)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	hooks, err := webhooks.New(webhooks.Config{Store: store, Commands: cmd, Secrets: seal.New(pool, mk, nil), Poll: time.Hour, Now: clock})
	require.NoError(t, err)
	org := uuid.NewString()
	live, never, expired := uuid.NewString(), uuid.NewString(), uuid.NewString()
	for i, c := range []string{live, never, expired} {
		require.NoError(t, hookstore.WatchCluster(ctx, pool, c, org))
		if c == never {
			continue
		}
		server := uuid.NewString()
		_, err := pool.Exec(ctx, `INSERT INTO servers (id, org_id, cluster_id, name, credential_hash, registered_at) VALUES ($1, $2, $3, $4, $5, now())`,
			server, org, c, "s", "hash-"+server)
		require.NoError(t, err)
		renewed := now.Add(-time.Second)
		if c == expired {
			renewed = now.Add(-2 * domain.LivenessWindow)
		}
		_, err = pool.Exec(ctx, `INSERT INTO server_status (server_id, org_id, cluster_id, replica, version, arch, facts, connected, connected_at, last_heartbeat_at)
			VALUES ($1, $2, $3, 'r', '1', 'amd64', '{}', true, $4, $4)`, server, org, c, renewed)
		require.NoError(t, err, i)
	}
	changes := func() []domain.ClusterLinkChanged {
		t.Helper()
		var out []domain.ClusterLinkChanged
		for _, c := range []string{live, never, expired} {
			events, err := store.ReadStream(ctx, domain.ClusterLinkStream(c), 0)
			require.NoError(t, err)
			for _, e := range events {
				d, err := domain.Decode(e.Type, e.SchemaVersion, e.Payload)
				require.NoError(t, err)
				out = append(out, d.(domain.ClusterLinkChanged))
			}
		}
		return out
	}
	pass := func() int {
		t.Helper()
		mu.Lock()
		before := commands
		mu.Unlock()
		require.NoError(t, hooks.ObserveClusters(ctx))
		mu.Lock()
		defer mu.Unlock()
		return commands - before
	}

	require.Equal(t, 3, pass(), "the first pass observes every cluster once")
	got := changes()
	require.Len(t, got, 1, "only the live cluster is recorded: the others were never connected")
	require.Equal(t, live, got[0].ClusterID)
	require.True(t, got[0].Connected)
	require.Zero(t, pass(), "nothing changed: no command")

	mu.Lock()
	now = now.Add(domain.LivenessWindow)
	mu.Unlock()
	require.Equal(t, 1, pass(), "the live cluster's lease expired: one command")
	got = changes()
	require.Len(t, got, 2)
	require.False(t, got[1].Connected, "recorded disconnected")
	require.Zero(t, pass())
	require.Len(t, changes(), 2, "each transition is recorded once")
}
