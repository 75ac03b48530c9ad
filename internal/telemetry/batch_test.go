package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// batchWorld is one organisation's cluster with n environments on it and n
// servers whose agents connected (each holding its lease).
type batchWorld struct {
	pool    *pgxpool.Pool
	store   *telemetry.Store
	src     telemetry.Source
	envs    []string
	servers []string
	at      time.Time
}

func newBatchWorld(t *testing.T, n int) batchWorld {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	w := batchWorld{pool: pool, store: telemetry.New(pool, nil), src: telemetry.Source{OrgID: uuid.NewString(), ClusterID: uuid.NewString()},
		at: time.Now().UTC().Truncate(time.Microsecond)}
	for i := 0; i < n; i++ {
		env, server := uuid.NewString(), uuid.NewString()
		_, err := pool.Exec(ctx, `INSERT INTO environments VALUES ($1, $2, $2, 'staging', $3, false, now(), NULL)`, env, w.src.OrgID, w.src.ClusterID)
		require.NoError(t, err)
		require.NoError(t, w.store.SaveConnected(ctx, w.src, telemetry.Connection{ServerID: server, Replica: "r1", Session: "s-" + server, Version: "1.5.0", Arch: "amd64", At: w.at}))
		w.envs, w.servers = append(w.envs, env), append(w.servers, server)
	}
	return w
}

func (w batchWorld) heartbeatAt(t *testing.T, server string) (time.Time, bool) {
	t.Helper()
	var at time.Time
	var leader bool
	require.NoError(t, w.pool.QueryRow(context.Background(), `SELECT last_heartbeat_at, leader FROM server_status WHERE server_id = $1`, server).Scan(&at, &leader))
	return at.UTC(), leader
}

func (w batchWorld) ack(t *testing.T, env, server string) (revision int, hash string, found bool) {
	t.Helper()
	err := w.pool.QueryRow(context.Background(), `SELECT revision, hash FROM revision_acks WHERE environment_id = $1 AND server_id = $2`, env, server).Scan(&revision, &hash)
	if err != nil {
		return 0, "", false
	}
	return revision, hash, true
}

// Queued heartbeats and acknowledgements are written as the single saves
// wrote them, the latest of each server's and of each (environment,
// server)'s, and an acknowledgement of an environment on another cluster is
// not kept.
func TestTheBatcherWritesTheLatestOfEachHeartbeatAndAcknowledgement(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 3)
	b := telemetry.NewBatcher(w.store, time.Hour, nil) // flushed by hand
	later := w.at.Add(10 * time.Second)
	for i, s := range w.servers {
		b.Heartbeat(telemetry.Heartbeat{ServerID: s, Session: "s-" + s, At: w.at.Add(time.Second)})
		b.Heartbeat(telemetry.Heartbeat{ServerID: s, Session: "s-" + s, Leader: i == 1, At: later})
		b.Ack(telemetry.AckRecord{Source: w.src, ServerID: s, Ack: transport.Ack{EnvironmentID: w.envs[i], Revision: 1, Hash: "one"}, At: w.at})
		b.Ack(telemetry.AckRecord{Source: w.src, ServerID: s, Ack: transport.Ack{EnvironmentID: w.envs[i], Revision: 2, Hash: "two"}, At: later})
	}
	other := telemetry.Source{OrgID: w.src.OrgID, ClusterID: uuid.NewString()}
	b.Ack(telemetry.AckRecord{Source: other, ServerID: w.servers[0], Ack: transport.Ack{EnvironmentID: w.envs[1], Revision: 9, Hash: "elsewhere"}, At: later})

	_, _, found := w.ack(t, w.envs[0], w.servers[0])
	require.False(t, found, "nothing is written before the flush")
	require.NoError(t, b.Flush(context.Background()))
	for i, s := range w.servers {
		at, leader := w.heartbeatAt(t, s)
		require.Equal(t, later, at, "the latest heartbeat renews the lease")
		require.Equal(t, i == 1, leader)
		rev, hash, found := w.ack(t, w.envs[i], s)
		require.True(t, found)
		require.Equal(t, 2, rev)
		require.Equal(t, "two", hash)
	}
	_, _, found = w.ack(t, w.envs[1], w.servers[0])
	require.False(t, found, "an acknowledgement from another cluster's server is not kept")
}

// One value the database cannot store (a NUL character, a revision out of
// range) is dropped alone: every other agent's acknowledgement in the same
// batch is written.
func TestOneUnstorableAcknowledgementDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 4)
	b := telemetry.NewBatcher(w.store, time.Hour, nil)
	bad := []transport.Ack{
		{EnvironmentID: w.envs[0], Revision: 3, Hash: "nul\x00byte"},
		{EnvironmentID: w.envs[1], Revision: 1 << 40, Hash: "huge"},
		{EnvironmentID: w.envs[2], Revision: 3, Hash: "ok", Services: []transport.ServiceOutcome{{Service: "a\x00b"}}},
	}
	for i, a := range bad {
		b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[i], Ack: a, At: w.at})
	}
	b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[3], Ack: transport.Ack{EnvironmentID: w.envs[3], Revision: 5, Hash: "fine"}, At: w.at})
	require.NoError(t, b.Flush(context.Background()))
	for i := range bad {
		_, _, found := w.ack(t, w.envs[i], w.servers[i])
		require.False(t, found, "the unstorable acknowledgement %d is dropped", i)
	}
	rev, hash, found := w.ack(t, w.envs[3], w.servers[3])
	require.True(t, found, "the good one in the same batch is written")
	require.Equal(t, 5, rev)
	require.Equal(t, "fine", hash)
}

// A connection's heartbeat still queued when it disconnects does not renew
// the lease after the disconnect released it; another connection's does.
func TestAHeartbeatQueuedBeforeADisconnectDoesNotReviveTheLease(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 2)
	ctx := context.Background()
	b := telemetry.NewBatcher(w.store, time.Hour, nil)
	gone, stays := w.servers[0], w.servers[1]
	b.Heartbeat(telemetry.Heartbeat{ServerID: gone, Session: "s-" + gone, At: w.at.Add(time.Second)})
	b.Heartbeat(telemetry.Heartbeat{ServerID: stays, Session: "s-" + stays, At: w.at.Add(time.Second)})
	// A disconnect of another session of the same server keeps the queued one.
	b.Forget(stays, "an-older-session")
	b.Forget(gone, "s-"+gone)
	require.NoError(t, w.store.SaveDisconnected(ctx, gone, "r1", "s-"+gone))
	require.NoError(t, b.Flush(ctx))
	var connected bool
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT connected FROM server_status WHERE server_id = $1`, gone).Scan(&connected))
	require.False(t, connected, "the released lease stays released")
	at, _ := w.heartbeatAt(t, stays)
	require.Equal(t, w.at.Add(time.Second), at, "the other server's heartbeat is written")
}

// What the database did not take (it did not answer) is written at the next
// flush, unless something newer replaced it meanwhile.
func TestWhatAFlushCouldNotWriteIsWrittenByTheNext(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 2)
	b := telemetry.NewBatcher(w.store, time.Hour, nil)
	b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[0], Ack: transport.Ack{EnvironmentID: w.envs[0], Revision: 1, Hash: "first"}, At: w.at})
	b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[1], Ack: transport.Ack{EnvironmentID: w.envs[1], Revision: 1, Hash: "first"}, At: w.at})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, b.Flush(cancelled))
	b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[1], Ack: transport.Ack{EnvironmentID: w.envs[1], Revision: 2, Hash: "newer"}, At: w.at})
	require.NoError(t, b.Flush(context.Background()))
	_, hash, found := w.ack(t, w.envs[0], w.servers[0])
	require.True(t, found)
	require.Equal(t, "first", hash, "the unwritten acknowledgement was kept for the next flush")
	rev, hash, _ := w.ack(t, w.envs[1], w.servers[1])
	require.Equal(t, 2, rev)
	require.Equal(t, "newer", hash, "the newer one replaced the unwritten one")
}

// Without a flush by hand, what is queued is written within the batch's
// interval.
func TestQueuedAcknowledgementsAreWrittenWithinTheInterval(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 1)
	b := telemetry.NewBatcher(w.store, 20*time.Millisecond, nil)
	b.Ack(telemetry.AckRecord{Source: w.src, ServerID: w.servers[0], Ack: transport.Ack{EnvironmentID: w.envs[0], Revision: 4, Hash: "h"}, At: w.at})
	require.Eventually(t, func() bool {
		rev, _, found := w.ack(t, w.envs[0], w.servers[0])
		return found && rev == 4
	}, 10*time.Second, 10*time.Millisecond)
}

// A heartbeat renews only a lease its connection holds: one of a connection
// replaced since (the agent reconnected) renews nothing, nor does one older
// than the renewal the row has.
func TestAHeartbeatRenewsOnlyItsOwnConnectionsLease(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 1)
	ctx := context.Background()
	server := w.servers[0]
	require.NoError(t, w.store.SaveConnected(ctx, w.src, telemetry.Connection{ServerID: server, Replica: "r1", Session: "newer", Version: "1.5.0", Arch: "amd64", At: w.at.Add(time.Second)}))
	require.NoError(t, w.store.SaveDisconnected(ctx, server, "r1", "newer"))
	b := telemetry.NewBatcher(w.store, time.Hour, nil)
	b.Heartbeat(telemetry.Heartbeat{ServerID: server, Session: "s-" + server, At: w.at.Add(2 * time.Second)})
	require.NoError(t, b.Flush(ctx))
	var connected bool
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT connected FROM server_status WHERE server_id = $1`, server).Scan(&connected))
	require.False(t, connected, "the replaced connection's heartbeat does not take the released lease")

	require.NoError(t, w.store.SaveConnected(ctx, w.src, telemetry.Connection{ServerID: server, Replica: "r1", Session: "third", Version: "1.5.0", Arch: "amd64", At: w.at.Add(10 * time.Second)}))
	b.Heartbeat(telemetry.Heartbeat{ServerID: server, Session: "third", At: w.at.Add(5 * time.Second)})
	require.NoError(t, b.Flush(ctx))
	at, _ := w.heartbeatAt(t, server)
	require.Equal(t, w.at.Add(10*time.Second), at, "a late heartbeat does not move the renewal back")
}

// A connection's heartbeat that a failing flush queued again is forgotten
// with the connection: Forget waits for the flush under way. The flush is
// held on a row lock until it times out, and Forget is called meanwhile.
func TestAHeartbeatOfAFailedFlushIsForgottenWithItsConnection(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 1)
	ctx := context.Background()
	server := w.servers[0]
	b := telemetry.NewBatcher(w.store, time.Hour, nil)
	b.Heartbeat(telemetry.Heartbeat{ServerID: server, Session: "s-" + server, At: time.Now().UTC()})

	lock, err := w.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, `SELECT 1 FROM server_status WHERE server_id = $1 FOR UPDATE`, server)
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		failed <- b.Flush(fctx)
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, w.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'UPDATE server_status%'`).Scan(&waiting))
		return waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the flush waits on the row")
	forgotten := make(chan struct{})
	go func() { b.Forget(server, "s-"+server); close(forgotten) }()
	require.Error(t, <-failed, "the flush times out and queues the heartbeat again")
	<-forgotten
	require.NoError(t, lock.Rollback(ctx))

	require.NoError(t, w.store.SaveDisconnected(ctx, server, "r1", "s-"+server))
	require.NoError(t, b.Flush(ctx))
	var connected bool
	require.NoError(t, w.pool.QueryRow(ctx, `SELECT connected FROM server_status WHERE server_id = $1`, server).Scan(&connected))
	require.False(t, connected, "the requeued heartbeat of the ended connection does not revive its lease")
}

// An acknowledgement written late (a retry) does not replace a later one.
func TestALateAcknowledgementDoesNotReplaceALaterOne(t *testing.T) {
	t.Parallel()
	w := newBatchWorld(t, 1)
	ctx := context.Background()
	later := telemetry.AckRecord{Source: w.src, ServerID: w.servers[0], Ack: transport.Ack{EnvironmentID: w.envs[0], Revision: 5, Hash: "later"}, At: w.at.Add(time.Second)}
	require.NoError(t, w.store.SaveAcks(ctx, []telemetry.AckRecord{later}))
	early := later
	early.Revision, early.Hash, early.At = 4, "early", w.at
	require.NoError(t, w.store.SaveAcks(ctx, []telemetry.AckRecord{early}))
	rev, hash, _ := w.ack(t, w.envs[0], w.servers[0])
	require.Equal(t, 5, rev)
	require.Equal(t, "later", hash)
}
