package eventstore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	actor = domain.Actor{Kind: domain.ActorUser, ID: "u1", Name: "ada@example.com"}
	t0    = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
)

func rec(typ string, n int) eventstore.Record {
	b, _ := json.Marshal(map[string]int{"n": n})
	return eventstore.Record{Type: typ, SchemaVersion: 1, Payload: b}
}

func appendReq(stream string, expected int, recs ...eventstore.Record) eventstore.AppendRequest {
	return eventstore.AppendRequest{StreamID: stream, ExpectedVersion: expected, Actor: actor, OccurredAt: t0, RequestID: "req-1", Records: recs}
}

func newStore(t *testing.T) *eventstore.Store {
	t.Helper()
	return eventstore.New(pgtest.Pool(t), nil)
}

func TestAppendAndReadStream(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()

	a, err := s.Append(ctx, appendReq("project-1", 0, rec("project.created", 1), rec("service.created", 2)))
	require.NoError(t, err)
	require.Equal(t, 2, a.Version)
	b, err := s.Append(ctx, appendReq("project-1", 2, rec("service.created", 3)))
	require.NoError(t, err)
	require.Equal(t, 3, b.Version)
	require.Greater(t, b.Last.Position, a.Last.Position)
	require.NotZero(t, b.Last.TxID)

	evs, err := s.ReadStream(ctx, "project-1", 0)
	require.NoError(t, err)
	require.Len(t, evs, 3)
	for i, e := range evs {
		require.Equal(t, i+1, e.StreamVersion)
		require.Equal(t, actor, e.Actor)
		require.Equal(t, "req-1", e.RequestID)
		require.True(t, e.OccurredAt.Equal(t0))
		require.Equal(t, 1, e.SchemaVersion)
		// Each event its own payload: rows are scanned through one set of
		// targets, never into the last row's bytes.
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i+1), string(e.Payload))
	}
	all, err := eventstore.ReadAll(ctx, s.Pool(), eventstore.Cursor{}, 10)
	require.NoError(t, err)
	batch, err := eventstore.ReadBatch(ctx, s.Pool(), eventstore.Cursor{}, 10)
	require.NoError(t, err)
	require.Equal(t, evs, all)
	require.Equal(t, all, batch, "ReadBatch reads what ReadAll reads")
	evs[0].Payload[0] = 'x'
	require.JSONEq(t, `{"n":2}`, string(evs[1].Payload), "no row shares another's bytes")
	require.Equal(t, b.Last, evs[2].Cursor(), "the append reports where its last event is")
	require.Equal(t, "service.created", evs[2].Type)

	after, err := s.ReadStream(ctx, "project-1", 2)
	require.NoError(t, err)
	require.Len(t, after, 1)
}

func TestAppendAtWrongVersionConflictsAndWritesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Append(ctx, appendReq("s", 0, rec("a", 1), rec("a", 2)))
	require.NoError(t, err)

	for _, expected := range []int{0, 1, 3, 7} {
		_, err := s.Append(ctx, appendReq("s", expected, rec("a", 9)))
		require.ErrorIs(t, err, eventstore.ErrConflict, "expected version %d", expected)
	}
	evs, err := s.ReadStream(ctx, "s", 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	var all int
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&all))
	require.Equal(t, 2, all, "a refused append leaves no event in any stream")
}

func TestAppendRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	bad := []eventstore.AppendRequest{
		{StreamID: "", Actor: actor, OccurredAt: t0, Records: []eventstore.Record{rec("a", 1)}},
		{StreamID: "s", Actor: actor, OccurredAt: t0},
		{StreamID: "s", Actor: domain.Actor{}, OccurredAt: t0, Records: []eventstore.Record{rec("a", 1)}},
		{StreamID: "s", Actor: actor, Records: []eventstore.Record{rec("a", 1)}},
		{StreamID: "s", Actor: actor, OccurredAt: t0, Records: []eventstore.Record{{Type: "a", SchemaVersion: 1, Payload: []byte("{nope")}}},
		{StreamID: "s", Actor: actor, OccurredAt: t0, OrgID: "not-a-uuid", Records: []eventstore.Record{rec("a", 1)}},
	}
	for i, r := range bad {
		_, err := s.Append(ctx, r)
		require.Error(t, err, "request %d", i)
	}
	var n int
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Zero(t, n)
}

func TestConcurrentAppendsAtSameVersionExactlyOneWins(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Append(ctx, appendReq("race", 0, rec("a", 0)))
	require.NoError(t, err)

	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, errs[i] = s.Append(ctx, appendReq("race", 1, rec("a", i)))
		}()
	}
	close(start)
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
			continue
		}
		require.ErrorIs(t, err, eventstore.ErrConflict)
	}
	require.Equal(t, 1, wins)
	evs, err := s.ReadStream(ctx, "race", 0)
	require.NoError(t, err)
	require.Len(t, evs, 2)
}

func TestNameClaimsAreUniqueAndReleasable(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	claim := eventstore.Claim{Scope: "org:1:project", Name: "shop"}

	r := appendReq("project-a", 0, rec("project.created", 1))
	r.Claims = []eventstore.Claim{claim}
	_, err := s.Append(ctx, r)
	require.NoError(t, err)

	r = appendReq("project-b", 0, rec("project.created", 1))
	r.Claims = []eventstore.Claim{claim}
	_, err = s.Append(ctx, r)
	require.ErrorIs(t, err, eventstore.ErrNameTaken)
	require.ErrorIs(t, err, eventstore.ErrConflict)
	evs, err := s.ReadStream(ctx, "project-b", 0)
	require.NoError(t, err)
	require.Empty(t, evs, "the losing append wrote nothing")

	// Another stream cannot release a claim it does not hold.
	r = appendReq("project-b", 0, rec("noop", 1))
	r.Releases = []eventstore.Claim{claim}
	r.Claims = []eventstore.Claim{claim}
	_, err = s.Append(ctx, r)
	require.ErrorIs(t, err, eventstore.ErrNameTaken)

	r = appendReq("project-a", 1, rec("project.deleted", 2))
	r.Releases = []eventstore.Claim{claim}
	_, err = s.Append(ctx, r)
	require.NoError(t, err)

	r = appendReq("project-b", 0, rec("project.created", 1))
	r.Claims = []eventstore.Claim{claim}
	_, err = s.Append(ctx, r)
	require.NoError(t, err, "a released name can be claimed again")
}

func TestConcurrentDuplicateNamesOneWins(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := appendReq(fmt.Sprintf("org-%d", i), 0, rec("organisation.created", i))
			r.Claims = []eventstore.Claim{{Scope: "org.name", Name: "acme"}}
			_, errs[i] = s.Append(ctx, r)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		if err == nil {
			wins++
		} else {
			require.ErrorIs(t, err, eventstore.ErrNameTaken)
		}
	}
	require.Equal(t, 1, wins)
}

// collector is a subscription handler that records what it sees, and writes
// one row per event in the subscription's transaction.
type collector struct {
	mu   sync.Mutex
	seen []int64
}

func (c *collector) handle(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
	for _, e := range evs {
		if _, err := tx.Exec(ctx, `INSERT INTO seen (position, times) VALUES ($1, 1)
			ON CONFLICT (position) DO UPDATE SET times = seen.times + 1`, e.Position); err != nil {
			return err
		}
	}
	c.mu.Lock()
	for _, e := range evs {
		c.seen = append(c.seen, e.Position)
	}
	c.mu.Unlock()
	return nil
}

func createSeen(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS seen (position bigint PRIMARY KEY, times int NOT NULL)`)
	require.NoError(t, err)
}

// The late-commit test: an append held open while later appends commit must
// not be skipped once it commits. It runs on a cluster of its own because the
// held transaction holds back the commit horizon of every database there.
func TestLateCommitIsNeverSkipped(t *testing.T) {
	t.Parallel()
	cluster := pgtest.Cluster(t, nil)
	pool := pgtest.MigratedDB(t, cluster, "latecommit")
	s := eventstore.New(pool, nil)
	ctx := context.Background()
	createSeen(t, pool)
	c := &collector{}
	sub := eventstore.Subscription{Name: "late", Handle: c.handle, BatchSize: 100}
	require.NoError(t, eventstore.EnsureCheckpoint(ctx, pool, sub.Name))

	_, err := s.Append(ctx, appendReq("before", 0, rec("a", 1)))
	require.NoError(t, err)

	held, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = s.AppendTx(ctx, held, appendReq("held", 0, rec("a", 2)))
	require.NoError(t, err)

	for i := range 5 {
		_, err := s.Append(ctx, appendReq(fmt.Sprintf("after-%d", i), 0, rec("a", 3+i)))
		require.NoError(t, err)
	}
	// Only what committed before the held transaction began is readable.
	_, err = s.Step(ctx, sub)
	require.NoError(t, err)
	require.Len(t, c.seen, 1, "the subscriber must stop at the held transaction")

	require.NoError(t, held.Commit(ctx))
	for {
		n, err := s.Step(ctx, sub)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	var heldPos int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT position FROM events WHERE stream_id = 'held'`).Scan(&heldPos))
	require.Contains(t, c.seen, heldPos, "the late commit was skipped")
	require.Len(t, c.seen, 7)
	var dup int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seen WHERE times <> 1`).Scan(&dup))
	require.Zero(t, dup)
}

func TestSubscriptionRunsOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := eventstore.New(pool, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createSeen(t, pool)
	for i := range 50 {
		_, err := s.Append(ctx, appendReq(fmt.Sprintf("s-%d", i), 0, rec("a", i)))
		require.NoError(t, err)
	}
	// Two runners of the same subscription, as in two replicas.
	c1, c2 := &collector{}, &collector{}
	var wg sync.WaitGroup
	for _, c := range []*collector{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.Run(ctx, eventstore.Subscription{Name: "twice", Handle: c.handle, BatchSize: 7, PollInterval: 10 * time.Millisecond})
		}()
	}
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM seen`).Scan(&n)
		return n == 50
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	wg.Wait()
	var dup int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM seen WHERE times <> 1`).Scan(&dup))
	require.Zero(t, dup)
	require.Len(t, append(c1.seen, c2.seen...), 50)
}

func TestWakerWakesOnAppend(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := eventstore.New(pool, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := s.NewWaker("test")
	ch := w.Subscribe()
	go w.Run(ctx)
	// The first wake-up comes when listening starts.
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up when listening started")
	}
	_, _ = w.TakeAppended()
	_, err := s.Append(ctx, appendReq("w", 0, rec("a", 1)))
	require.NoError(t, err)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up after an append")
	}
	// The notification (or the events topic's poll) names the append.
	require.Eventually(t, func() bool {
		appended, _ := w.TakeAppended()
		for _, a := range appended {
			if a == "w@1" {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "the append's notification names its stream and version")
}

func TestCheckpointIsCommittedWithHandlerWrites(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	s := eventstore.New(pool, nil)
	ctx := context.Background()
	createSeen(t, pool)
	for i := range 3 {
		_, err := s.Append(ctx, appendReq(fmt.Sprintf("c-%d", i), 0, rec("a", i)))
		require.NoError(t, err)
	}
	boom := errors.New("boom")
	sub := eventstore.Subscription{Name: "fails", Handle: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO seen VALUES (1, 1)`); err != nil {
			return err
		}
		return boom
	}}
	require.NoError(t, eventstore.EnsureCheckpoint(ctx, pool, sub.Name))
	// Other tests' transactions on the shared cluster may hold the horizon
	// back for a moment: step until the batch is seen.
	var err error
	require.Eventually(t, func() bool {
		_, err = s.Step(ctx, sub)
		return err != nil
	}, 10*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, err, boom)
	cur, n, err := eventstore.Checkpoint(ctx, pool, sub.Name)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, cur.Position)
	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seen`).Scan(&rows))
	require.Zero(t, rows, "the handler's writes roll back with the checkpoint")
}

const killChildEnv = "NEBULA_EVENTSTORE_KILL_CHILD_URL"

// TestKillChild is the child of TestSIGKILLLosesNothing; it does nothing unless
// started by it.
func TestKillChild(t *testing.T) {
	url := os.Getenv(killChildEnv)
	if url == "" {
		return
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	s := eventstore.New(pool, nil)
	c := &collector{}
	go s.Run(ctx, eventstore.Subscription{Name: "killed", Handle: c.handle, BatchSize: 10, PollInterval: time.Millisecond})
	for i := 0; ; i++ {
		stream := fmt.Sprintf("k-%d", i%10)
		v, err := eventstore.StreamVersion(ctx, pool, stream)
		require.NoError(t, err)
		if _, err := s.Append(ctx, appendReq(stream, v, rec("a", i))); err != nil {
			continue
		}
		fmt.Printf("appended %s %d\n", stream, v+1)
	}
}

// A child process killed with SIGKILL in the middle of a stream of appends:
// every append that returned success is in the store, and the subscription,
// restarted, handles every event exactly once.
func TestSIGKILLLosesNothing(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	createSeen(t, pool)

	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), killChildEnv+"="+url)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	acked := map[string]int{}
	sc := bufio.NewScanner(out)
	lines := 0
	for sc.Scan() {
		var stream string
		var v int
		if n, _ := fmt.Sscanf(sc.Text(), "appended %s %d", &stream, &v); n != 2 {
			continue
		}
		acked[stream] = max(acked[stream], v)
		if lines++; lines == 300 {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			break
		}
	}
	_ = cmd.Wait()
	require.Equal(t, 300, lines, "the child must have appended before it was killed")

	ctx := context.Background()
	s := eventstore.New(pool, nil)
	for stream, v := range acked {
		have, err := eventstore.StreamVersion(ctx, pool, stream)
		require.NoError(t, err)
		require.GreaterOrEqual(t, have, v, "acknowledged append to %s lost", stream)
	}
	c := &collector{}
	sub := eventstore.Subscription{Name: "killed", Handle: c.handle, BatchSize: 10}
	var total int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&total))
	require.Eventually(t, func() bool {
		for {
			n, err := s.Step(ctx, sub)
			require.NoError(t, err)
			if n == 0 {
				break
			}
		}
		var seen int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seen`).Scan(&seen))
		return seen == total
	}, 20*time.Second, 10*time.Millisecond)
	var dup int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM seen WHERE times <> 1`).Scan(&dup))
	require.Zero(t, dup, "an event was handled twice")
	_, n, err := eventstore.Checkpoint(ctx, pool, "killed")
	require.NoError(t, err)
	require.EqualValues(t, total, n)
}

// The check a subscription step makes for events committed after what it
// read runs in every step that reads less than a full batch: it must walk the
// commit-order index from the cursor, not scan the log, also on the generic
// plan PostgreSQL gives a prepared statement from its sixth run on.
func TestPendingCheckWalksTheIndexOnTheGenericPlan(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO events (stream_id, stream_version, event_type, schema_version, payload, actor_kind, actor_id, actor_name, occurred_at)
		SELECT 'filler-' || g, 1, 'a', 1, '{}', 'user', 'u1', 'ada', now() FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE events`)
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	defer conn.Exec(context.WithoutCancel(ctx), `RESET plan_cache_mode`) //nolint:errcheck
	_, err = conn.Exec(ctx, `PREPARE pending_check(text, bigint) AS `+eventstore.PendingQuery)
	require.NoError(t, err)
	defer conn.Exec(context.WithoutCancel(ctx), `DEALLOCATE pending_check`) //nolint:errcheck
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE pending_check('0', 0)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := fmt.Sprint(lines)
	require.Contains(t, plan, "events_commit_order", "the check must use the commit-order index: %s", plan)
	require.NotContains(t, plan, "Seq Scan", "the check must not scan the log: %s", plan)

	var pending bool
	require.NoError(t, conn.QueryRow(ctx, `EXECUTE pending_check('0', 0)`).Scan(&pending))
	require.True(t, pending)
	err = conn.QueryRow(ctx, fmt.Sprintf(`EXECUTE pending_check('%d', 0)`, uint64(1)<<62)).Scan(&pending)
	require.ErrorIs(t, err, pgx.ErrNoRows, "nothing after the last event")
}

// A busy subscription lets events gather (Settle): when events were
// appended while a step ran, the next step waits Settle on the
// subscription's clock and handles them in one batch; a wake-up that comes
// while the subscription waits is acted on at once. On a cluster of its
// own, so that no other test's transaction holds the commit horizon and
// splits the batch.
func TestABusySubscriptionLetsEventsGather(t *testing.T) {
	t.Parallel()
	cluster := pgtest.Cluster(t, nil)
	pool := pgtest.MigratedDB(t, cluster, "settle")
	s := eventstore.New(pool, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const settle = time.Hour // never really slept: the clock is the test's
	settling, release := make(chan struct{}, 1), make(chan struct{})
	var mu sync.Mutex
	var batches [][]string
	handled := make(chan struct{}, 10)
	// The handler of the first batch it is given holds it until told, so
	// that appends land while a step runs.
	entered, hold := make(chan struct{}, 10), make(chan struct{})
	wake := make(chan struct{}, 1)
	sub := eventstore.Subscription{Name: "settle", Wake: wake, PollInterval: time.Hour, Settle: settle,
		Handle: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
			var streams []string
			for _, e := range evs {
				streams = append(streams, e.StreamID)
			}
			entered <- struct{}{}
			if streams[0] == "second" {
				<-hold
			}
			mu.Lock()
			batches = append(batches, streams)
			mu.Unlock()
			handled <- struct{}{}
			return nil
		},
		Park: eventstore.ParkPolicy{Sleep: func(ctx context.Context, d time.Duration) bool {
			if d != settle {
				time.Sleep(d)
				return ctx.Err() == nil
			}
			settling <- struct{}{}
			select {
			case <-release:
				return true
			case <-ctx.Done():
				return false
			}
		}}}
	require.NoError(t, eventstore.EnsureCheckpoint(ctx, pool, sub.Name))
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, sub) }()
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal(what)
		}
	}

	// Changes one after another, each while the subscription waits: each
	// handled at once. (It waits once its step's checkpoint committed; a
	// moment later it is in its wait.)
	idle := func(events int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, pool.QueryRow(ctx, `SELECT events FROM subscription_checkpoints WHERE name = 'settle'`).Scan(&n))
			return n == events
		}, 10*time.Second, 5*time.Millisecond)
		time.Sleep(20 * time.Millisecond)
	}
	idle(0)
	for _, stream := range []string{"first", "second"} {
		_, err := s.Append(ctx, appendReq(stream, 0, rec("a", 1)))
		require.NoError(t, err)
		poke()
		within(entered, "a change that comes while the subscription waits is handled at once")
		if stream == "first" {
			within(handled, "the first change is handled")
			idle(1)
		}
	}
	select {
	case <-settling:
		t.Fatal("settled for changes that came one after another")
	default:
	}
	// A burst while the step for "second" runs.
	for i := range 5 {
		_, err := s.Append(ctx, appendReq(fmt.Sprintf("burst-%d", i), 0, rec("a", i)))
		require.NoError(t, err)
		poke()
	}
	close(hold)
	within(handled, "the second change is handled")
	within(settling, "events appended while a step ran: the next step settles")
	close(release)
	within(handled, "the gathered events are handled after settling")
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, [][]string{{"first"}, {"second"}, {"burst-0", "burst-1", "burst-2", "burst-3", "burst-4"}}, batches)
}
