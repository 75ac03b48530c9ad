package server_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/serveproc"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// subscriptionNames are the checkpointed subscriptions of `nebula serve`:
// the projections, the reactions and the outbound webhooks.
var subscriptionNames = []string{"projections", "reactions", "webhooks"}

// subscriptionLockKey is the advisory lock a subscription's step holds from
// its read to its commit (eventstore's lockKey).
func subscriptionLockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("nebulactrl.subscription." + name))
	return int64(h.Sum64())
}

// asRole returns dbURL for a login role of its own (a superuser, as the
// test's), so the test can tell which replica holds a subscription's lock:
// the control plane names every connection "nebulactrl", but
// pg_stat_activity says which role each one is.
func asRole(t *testing.T, pool *pgxpool.Pool, dbURL string) (string, string) {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("replica_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	password := fmt.Sprint(time.Now().UnixNano())
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'`, role, password))
	require.NoError(t, err)
	t.Cleanup(func() {
		// What the replica created (a log partition) goes to the test's
		// role, so the role can go.
		_, _ = pool.Exec(ctx, fmt.Sprintf(`REASSIGN OWNED BY %s TO current_user`, role))
		_, _ = pool.Exec(ctx, fmt.Sprintf(`DROP OWNED BY %s`, role))
		_, _ = pool.Exec(ctx, fmt.Sprintf(`DROP ROLE %s`, role))
	})
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	u.User = url.UserPassword(role, password)
	return u.String(), role
}

// Two replicas, commands appended through both, and one of them killed
// with SIGKILL while it holds a subscription's lock (in the middle of a
// batch: read, handled, not yet committed): every event is still handled
// exactly once by every subscription. A batch handled twice would count its
// events twice in the checkpoint and leave a gap in the audit log's
// sequence (its rows are upserted by position); an event skipped would
// leave the count short and the log without its row.
func TestEveryEventHandledOnceWhenAReplicaDiesMidBatch(t *testing.T) {
	bin := serveproc.Binary(t)
	dbURL := pgtest.URL(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// B first: it migrates the database, as the test's role.
	b := serveproc.Start(t, bin, dbURL, key)
	urlA, roleA := asRole(t, pool, dbURL)
	a := serveproc.Start(t, bin, urlA, key)

	token := (&servertest.Server{URL: b.URL}).Setup(t, "root@example.com", "acme")
	cb, err := client.New(b.URL, token)
	require.NoError(t, err)
	ca, err := client.New(a.URL, token)
	require.NoError(t, err)
	_, err = cb.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	const writers = 4
	for w := range writers {
		_, err := cb.CreateProject(ctx, "acme", fmt.Sprintf("p%d", w))
		require.NoError(t, err)
		_, err = cb.CreateEnvironment(ctx, "acme", fmt.Sprintf("p%d", w), api.CreateEnvironmentRequest{Name: "prod", Cluster: "eu-1"})
		require.NoError(t, err)
	}

	// Writers change variables through both replicas until A dies, then
	// through B alone; a command sent to A as it dies may or may not have
	// been appended.
	var killed atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr atomic.Value
	var sent atomic.Int64
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, toA := cb, i%2 == 0 && !killed.Load()
				if toA {
					c = ca
				}
				_, err := c.SetVariables(ctx, "acme", fmt.Sprintf("p%d", w), "prod", "", []api.VariableInput{{Name: "N", Value: fmt.Sprint(i)}})
				if err != nil && !toA {
					writeErr.CompareAndSwap(nil, fmt.Errorf("writer %d through replica B: %w", w, err))
					return
				}
				sent.Add(1)
			}
		}()
	}

	keys := make([]int64, len(subscriptionNames))
	for i, n := range subscriptionNames {
		keys[i] = subscriptionLockKey(n)
	}
	// Once the commands flow, wait until A holds a subscription's lock,
	// then kill it at once.
	wait.Within(t, 60*time.Second, "commands appended through both replicas", func() bool { return sent.Load() >= 40 })
	deadline := time.Now().Add(60 * time.Second)
	var holding string
	for holding == "" {
		require.True(t, time.Now().Before(deadline), "replica A never held a subscription's lock while commands were appended")
		err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(a.state, ','), '') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'advisory' AND l.granted AND a.usename = $2
			  AND ((l.classid::bigint << 32) | l.objid::bigint) = ANY($1::bigint[])`, keys, roleA).Scan(&holding)
		require.NoError(t, err)
	}
	a.Kill(t)
	killed.Store(true)
	t.Logf("replica A killed holding a subscription's lock (its connections were %s), after %d commands", holding, sent.Load())

	// B goes on alone for a while, then the writers stop.
	before := sent.Load()
	wait.Within(t, 60*time.Second, "commands appended through replica B after the kill", func() bool { return sent.Load() >= before+20 })
	close(stop)
	wg.Wait()
	if err, ok := writeErr.Load().(error); ok {
		require.NoError(t, err)
	}

	// Every subscription reaches the last event, and stays there (the
	// projections and reactions append events of their own).
	caughtUp := func() bool {
		var behind int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) n(name)
			LEFT JOIN subscription_checkpoints c USING (name)
			WHERE c.name IS NULL OR (c.transaction_id, c.position) <>
				(SELECT transaction_id, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1)`,
			subscriptionNames).Scan(&behind)
		require.NoError(t, err)
		return behind == 0
	}
	wait.Within(t, 90*time.Second, "every subscription caught up with the last event", func() bool {
		if !caughtUp() {
			return false
		}
		time.Sleep(2 * time.Second)
		return caughtUp()
	})

	var events, parked int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM parked_events`).Scan(&parked))
	require.Zero(t, parked, "no event parked")
	for _, name := range subscriptionNames {
		var handled int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT events FROM subscription_checkpoints WHERE name = $1`, name).Scan(&handled))
		require.Equal(t, events, handled, "subscription %s handled each of the %d events once", name, events)
	}
	var rows, maxSeq, outOfOrder, broken int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(max(seq), 0) FROM audit_log`).Scan(&rows, &maxSeq))
	require.Equal(t, events, rows, "one audit row per event")
	require.Equal(t, rows, maxSeq, "the audit sequence has no gap")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM audit_log a
		JOIN (SELECT position, row_number() OVER (ORDER BY transaction_id, position) AS n FROM events) e USING (position)
		WHERE a.seq <> e.n`).Scan(&outOfOrder))
	require.Zero(t, outOfOrder, "the audit log is in commit order")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT prev_hash, lag(hash) OVER (ORDER BY seq) AS before, seq FROM audit_log) c
		WHERE seq > 1 AND prev_hash IS DISTINCT FROM before`).Scan(&broken))
	require.Zero(t, broken, "the audit chain is unbroken")
	var revisions, compiled int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM revisions`).Scan(&revisions))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE event_type = 'revision.compiled'`).Scan(&compiled))
	require.Equal(t, compiled, revisions, "one revision per compiled revision event")
	t.Logf("%d events, %d revisions, %d commands sent", events, revisions, sent.Load())
}
