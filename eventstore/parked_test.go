package eventstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
)

// handled records, in order, the events a test handler stored.
func handled(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT position FROM seen ORDER BY n`)
	require.NoError(t, err)
	ps, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return ps
}

// An event the handler cannot handle is parked after the policy's attempts
// and window (injected clock) and does not stop the other streams; later
// events of its stream are parked behind it, in order; a retry once fixed
// handles them in order, and the stream flows again.
func TestPoisonEventIsParkedAndOtherStreamsGoOn(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	pool := s.Pool()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := pool.Exec(ctx, `CREATE TABLE seen (n bigserial PRIMARY KEY, position bigint NOT NULL)`)
	require.NoError(t, err)

	var fixed atomic.Bool
	handle := func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
		for _, e := range evs {
			var p struct{ Poison bool }
			_ = json.Unmarshal(e.Payload, &p)
			if p.Poison && !fixed.Load() {
				return errors.New("the read model rejects this event")
			}
			if _, err := tx.Exec(ctx, `INSERT INTO seen (position) VALUES ($1)`, e.Position); err != nil {
				return err
			}
		}
		return nil
	}
	poisonRec := eventstore.Record{Type: "thing.poisoned", SchemaVersion: 1, Payload: []byte(`{"poison":true}`)}
	a1, err := s.Append(ctx, appendReq("a", 0, rec("thing.made", 1), poisonRec))
	require.NoError(t, err)
	b1, err := s.Append(ctx, appendReq("b", 0, rec("thing.made", 1)))
	require.NoError(t, err)
	a3, err := s.Append(ctx, appendReq("a", 2, rec("thing.made", 3)))
	require.NoError(t, err)
	b2, err := s.Append(ctx, appendReq("b", 1, rec("thing.made", 2)))
	require.NoError(t, err)

	clock := testclock.New(t0) // a sleep moves it at once
	sub := eventstore.Subscription{Name: "poisoned", Handle: handle, BatchSize: 100, PollInterval: 10 * time.Millisecond,
		Park: eventstore.ParkPolicy{Attempts: 5, Window: time.Minute, Now: clock.Now, Sleep: clock.Sleep}}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, sub) }()

	require.Eventually(t, func() bool {
		cur, _, err := eventstore.Checkpoint(ctx, pool, sub.Name)
		return err == nil && !cur.Before(b2.Last)
	}, 20*time.Second, 10*time.Millisecond, "the other stream goes on past the poison event")
	a1pos := a1.Last.Position - 1
	require.Equal(t, []int64{a1pos, b1.Last.Position, b2.Last.Position}, handled(t, pool), "a's first event and b's events, not a's poison nor what follows it")

	parked, err := eventstore.ListParked(ctx, pool, "")
	require.NoError(t, err)
	require.Len(t, parked, 2)
	require.Equal(t, a1.Last.Position, parked[0].Position)
	require.Equal(t, eventstore.ParkedReasonFailed, parked[0].Reason)
	require.Equal(t, "thing.poisoned", parked[0].Type)
	require.Equal(t, "a", parked[0].StreamID)
	require.Contains(t, parked[0].Error, "the read model rejects this event")
	require.GreaterOrEqual(t, parked[0].Attempts, 5)
	require.False(t, parked[0].ParkedAt.Before(t0.Add(time.Minute)), "parked after the window, on the injected clock")
	require.Equal(t, a3.Last.Position, parked[1].Position)
	require.Equal(t, eventstore.ParkedReasonBehind, parked[1].Reason)
	counts, err := eventstore.CountParked(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"poisoned": 2}, counts)
	_, n, err := eventstore.Checkpoint(ctx, pool, sub.Name)
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "parked events are not counted as handled")
	p, err := eventstore.ParkedInTransaction(ctx, pool, sub.Name, a3.Last.TxID)
	require.NoError(t, err)
	require.NotNil(t, p)
	p, err = eventstore.ParkedInTransaction(ctx, pool, sub.Name, b2.Last.TxID)
	require.NoError(t, err)
	require.Nil(t, p)

	// Still broken: a retry fails, and everything stays parked.
	res, err := s.RetryParked(ctx, sub, a1.Last.Position)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Contains(t, res[0].Error, "rejects")
	require.Empty(t, res[0].Positions)
	parked, err = eventstore.ListParked(ctx, pool, sub.Name)
	require.NoError(t, err)
	require.Len(t, parked, 2)
	require.Contains(t, parked[0].LastRetryError, "rejects")
	_, err = s.RetryParked(ctx, sub, b1.Last.Position)
	require.ErrorIs(t, err, eventstore.ErrNotParked)

	// Fixed: the retry handles a's parked events in order.
	fixed.Store(true)
	res, err = s.RetryParked(ctx, sub, a3.Last.Position)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Empty(t, res[0].Error)
	require.Equal(t, []int64{a1.Last.Position, a3.Last.Position}, res[0].Positions)
	require.Equal(t, []int64{a1pos, b1.Last.Position, b2.Last.Position, a1.Last.Position, a3.Last.Position}, handled(t, pool))
	parked, err = eventstore.ListParked(ctx, pool, "")
	require.NoError(t, err)
	require.Empty(t, parked)
	_, n, err = eventstore.Checkpoint(ctx, pool, sub.Name)
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	retried, err := eventstore.RetriedEvents(ctx, pool, sub.Name)
	require.NoError(t, err)
	require.Len(t, retried, 2)
	require.Equal(t, a1.Last.Position, retried[0].Position)
	require.Equal(t, b2.Last, retried[0].After, "handled where the checkpoint stood at the retry")

	// The stream flows again.
	a4, err := s.Append(ctx, appendReq("a", 3, rec("thing.made", 4)))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h := handled(t, pool)
		return h[len(h)-1] == a4.Last.Position
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	<-done
}

// A failure of the database, not of the event, is never parked.
func TestConnectionErrorsAreNotParked(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := s.Append(ctx, appendReq("a", 0, rec("thing.made", 1)))
	require.NoError(t, err)
	var calls atomic.Int64
	clock := testclock.New(t0) // a sleep moves it at once
	sub := eventstore.Subscription{Name: "flaky", BatchSize: 10, PollInterval: 10 * time.Millisecond,
		Park: eventstore.ParkPolicy{Attempts: 2, Window: time.Second, Now: clock.Now, Sleep: clock.Sleep},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
			if calls.Add(1) < 20 {
				return context.DeadlineExceeded
			}
			return nil
		}}
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx, sub) }()
	require.Eventually(t, func() bool {
		_, n, err := eventstore.Checkpoint(ctx, s.Pool(), sub.Name)
		return err == nil && n == 1
	}, 20*time.Second, 10*time.Millisecond)
	parked, err := eventstore.ListParked(ctx, s.Pool(), "")
	require.NoError(t, err)
	require.Empty(t, parked)
	require.GreaterOrEqual(t, calls.Load(), int64(20))
	cancel()
	<-done
}

// Run does not give up when its checkpoint cannot be created at start (the
// database not there for a moment): it retries with backoff until it can.
func TestRunRetriesCreatingItsCheckpoint(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	pool := s.Pool()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := pool.Exec(ctx, `ALTER TABLE subscription_checkpoints RENAME TO subscription_checkpoints_away`)
	require.NoError(t, err)
	var slept atomic.Int64
	clock := testclock.New(t0) // a sleep moves it at once
	var seen atomic.Int64
	sub := eventstore.Subscription{Name: "patient", BatchSize: 10, PollInterval: 10 * time.Millisecond,
		Park: eventstore.ParkPolicy{Now: clock.Now, Sleep: func(ctx context.Context, d time.Duration) bool {
			slept.Add(1)
			return clock.Sleep(ctx, d)
		}},
		Handle: func(ctx context.Context, tx pgx.Tx, evs []eventstore.Event) error {
			seen.Add(int64(len(evs)))
			return nil
		}}
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx, sub) }()
	require.Eventually(t, func() bool { return slept.Load() >= 3 }, 10*time.Second, time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("Run returned while its checkpoint could not be created: %v", err)
	default:
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, clock.Sleeps()[:3], "backoff doubles")
	_, err = pool.Exec(ctx, `ALTER TABLE subscription_checkpoints_away RENAME TO subscription_checkpoints`)
	require.NoError(t, err)
	_, err = s.Append(ctx, appendReq("a", 0, rec("thing.made", 1)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return seen.Load() == 1 }, 20*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-errc)
}

func TestWhichErrorsPark(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, io.ErrUnexpectedEOF, fmt.Errorf("reading: %w", context.Canceled),
		&pgconn.PgError{Code: "08006"}, &pgconn.PgError{Code: "40P01"}, &pgconn.PgError{Code: "57P01"}, &pgconn.PgError{Code: "53300"},
		errors.New("conn closed")} {
		require.True(t, eventstore.Transient(err), "%v is retried, never parked", err)
	}
	for _, err := range []error{errors.New("unknown event type mystery.happened"), &pgconn.PgError{Code: "22P05"}, &pgconn.PgError{Code: "23505"},
		&pgconn.PgError{Code: "P0001"}, fmt.Errorf("projection audit-log: %w", &pgconn.PgError{Code: "42703"}),
		// Commands retry their own conflicts; one that reaches a subscription is a bug.
		fmt.Errorf("recording a revision: %w", eventstore.ErrConflict)} {
		require.False(t, eventstore.Transient(err), "%v is the event's own failure", err)
	}
}
