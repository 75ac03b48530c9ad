package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// A server's lease belongs to the connection that took it: the late
// disconnect of an earlier connection (to the same replica, whose hello for
// the new connection came first) does not release it; the disconnect of the
// connection holding it does, and one to another replica never does.
func TestALateDisconnectDoesNotReleaseANewerConnectionsLease(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	s := telemetry.New(pool, nil)
	src := telemetry.Source{OrgID: uuid.NewString(), ClusterID: uuid.NewString()}
	server := uuid.NewString()
	held := func() bool {
		t.Helper()
		var connected bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT connected FROM server_status WHERE server_id = $1`, server).Scan(&connected))
		return connected
	}
	at := time.Now().UTC()
	require.NoError(t, s.SaveConnected(ctx, src, telemetry.Connection{ServerID: server, Replica: "r1", Session: "first", Version: "1.5.0", Arch: "amd64", At: at}))
	require.NoError(t, s.SaveConnected(ctx, src, telemetry.Connection{ServerID: server, Replica: "r1", Session: "second", Version: "1.5.0", Arch: "amd64", At: at.Add(time.Second)}))
	require.NoError(t, s.SaveDisconnected(ctx, server, "r1", "first"))
	require.True(t, held(), "the first connection's late disconnect leaves the second's lease")
	require.NoError(t, s.SaveDisconnected(ctx, server, "r2", "second"))
	require.True(t, held(), "a disconnect from another replica never releases it")
	require.NoError(t, s.SaveDisconnected(ctx, server, "r1", "second"))
	require.False(t, held(), "the holder's disconnect releases it")
}
