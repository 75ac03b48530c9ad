package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/projections"
)

// A projection stuck at an event is visible at once: the lag names the
// event, and `audit verify` and `audit replay` fail instead of reporting
// "intact" and "equal" over what happened to be projected (found from
// outside: they looked only at what was projected).
func TestStuckProjectionsFailVerifyAndReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	small(t, b)
	b.catchUp(t)
	lag, err := projections.SubscriptionLag(ctx, b.pool, projections.SubscriptionName)
	require.NoError(t, err)
	require.False(t, lag.Behind())

	// An event no projection can handle, as a bug or an older binary would
	// leave one: written past every check, straight into the table.
	_, err = b.pool.Exec(ctx, `INSERT INTO events (stream_id, stream_version, event_type, schema_version, payload,
		actor_kind, actor_id, actor_name, request_id, occurred_at)
		VALUES ('mystery-1', 1, 'mystery.happened', 1, '{}', 'system', 'test', 'test', 'r', now())`)
	require.NoError(t, err)
	// Other tests' transactions may hold the commit horizon (shared by the
	// cluster's databases) for a moment before the event is readable.
	require.Eventually(t, func() bool {
		_, err := b.proj.CatchUp(ctx)
		return err != nil
	}, 20*time.Second, 10*time.Millisecond, "the projections stop at the event rather than skip it")

	lag, err = projections.SubscriptionLag(ctx, b.pool, projections.SubscriptionName)
	require.NoError(t, err)
	require.True(t, lag.Behind())
	require.Equal(t, "mystery.happened", lag.FirstType)
	require.Contains(t, lag.String(), "mystery-1")

	chain, err := projections.Verify(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, chain.OK, "the chain stops short of the event store")
	require.Contains(t, chain.Problem, "stuck")
	rep, err := projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, rep.Equal(), "a replay of what was projected is not the events")
}
