package eventstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Handler processes a batch of events inside tx. Whatever it writes through
// tx commits together with the subscription's checkpoint, or not at all.
type Handler func(ctx context.Context, tx pgx.Tx, events []Event) error

// Subscription is a named, checkpointed reader of all events in commit order.
// The name is stable: renaming a subscription re-consumes everything.
type Subscription struct {
	Name      string
	Handle    Handler
	BatchSize int
	// PollInterval is the fallback when no wake-up arrives (default 1 s).
	PollInterval time.Duration
	// Wake, when set, makes the subscription look for events at once.
	Wake <-chan struct{}
	// Park decides when an event the handler keeps failing on is parked.
	Park ParkPolicy
	// Settle, when set, lets events gather while the subscription is busy:
	// when events were appended while a step that handled events ran (a
	// wake-up is waiting when it ends), the next step waits Settle (on
	// Park's clock), so a burst of appends is handled in a few large
	// batches rather than one small one for each append (every step reads
	// the checkpoint, the events and the horizon, and writes the
	// checkpoint). A wake-up that comes while the subscription waits is
	// acted on at once: a single change, or changes one after another,
	// wait for nothing.
	Settle time.Duration
}

func (s *Subscription) setDefaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = 5000
	}
	if s.PollInterval <= 0 {
		s.PollInterval = time.Second
	}
	s.Park.setDefaults()
}

func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte("nebulactrl.subscription." + name))
	return int64(h.Sum64())
}

// EnsureCheckpoint creates the subscription's checkpoint row if it is missing.
func EnsureCheckpoint(ctx context.Context, q Querier, name string) error {
	_, err := q.Exec(ctx, `INSERT INTO subscription_checkpoints (name) VALUES ($1) ON CONFLICT DO NOTHING`, name)
	if err != nil {
		return fmt.Errorf("creating checkpoint of %s: %w", name, err)
	}
	return nil
}

// Checkpoint returns where a subscription stands and how many events it has handled.
func Checkpoint(ctx context.Context, q Querier, name string) (Cursor, int64, error) {
	var c Cursor
	var tx, n int64
	err := q.QueryRow(ctx, `SELECT transaction_id::text::bigint, position, events FROM subscription_checkpoints WHERE name = $1`, name).
		Scan(&tx, &c.Position, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return Cursor{}, 0, nil
	}
	if err != nil {
		return Cursor{}, 0, fmt.Errorf("reading checkpoint of %s: %w", name, err)
	}
	c.TxID = uint64(tx)
	return c, n, nil
}

// pendingQuery finds whether any event exists after a cursor (committed, but
// perhaps not below the commit horizon yet). It walks the commit-order index
// from the cursor and stops at the first row. It must not be written as
// EXISTS (...): PostgreSQL drops the ORDER BY and LIMIT of an EXISTS
// subquery, and from the sixth run of the prepared statement on its generic
// plan scans the whole events table from the start for that first row, a
// cost that grows with the log and is paid by every subscription step that
// reads less than a full batch.
const pendingQuery = `SELECT true FROM events WHERE (transaction_id, position) > ($1::text::xid8, $2)
	ORDER BY transaction_id, position LIMIT 1`

// Step handles at most one batch. It returns how many events it handled; 0
// with a nil error when there was nothing to do or another process holds the
// subscription (its lock is per subscription and per transaction, so only one
// process handles a subscription at a time: exactly once across replicas).
// Events of a stream with a parked event are parked behind it, not handled.
func (s *Store) Step(ctx context.Context, sub Subscription) (int, error) {
	sub.setDefaults()
	r, err := s.step(ctx, sub, sub.BatchSize)
	return r.n, err
}

// stepped is what one step did: how many events it passed (handled or
// parked), up to which, and whether events committed after them are still
// behind the commit horizon (an older transaction is open): their wake-up
// has come and gone, so the caller must look again soon rather than wait for
// the next one.
type stepped struct {
	n       int
	last    Cursor
	pending bool
}

// step handles at most limit events. A handler's failure is a *handlerError.
func (s *Store) step(ctx context.Context, sub Subscription, limit int) (stepped, error) {
	var r stepped
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return r, fmt.Errorf("subscription %s: beginning: %w", sub.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var locked bool
	// An advisory lock assigns no transaction id, so this transaction does not
	// hold back the commit horizon it is about to read behind.
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, lockKey(sub.Name)).Scan(&locked); err != nil {
		return r, fmt.Errorf("subscription %s: locking: %w", sub.Name, err)
	}
	if !locked {
		return r, nil
	}
	cur, _, err := Checkpoint(ctx, tx, sub.Name)
	if err != nil {
		return r, err
	}
	events, err := ReadAll(ctx, tx, cur, limit)
	if err != nil {
		return r, fmt.Errorf("subscription %s: %w", sub.Name, err)
	}
	if len(events) < limit {
		last := cur
		if len(events) > 0 {
			last = events[len(events)-1].Cursor()
		}
		err := tx.QueryRow(ctx, pendingQuery, fmt.Sprint(last.TxID), last.Position).Scan(&r.pending)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return stepped{}, fmt.Errorf("subscription %s: %w", sub.Name, err)
		}
		if len(events) == 0 {
			return r, nil
		}
	}
	handle, err := s.divert(ctx, tx, sub, events)
	if err != nil {
		return stepped{}, fmt.Errorf("subscription %s: %w", sub.Name, err)
	}
	if len(handle) > 0 {
		if err := sub.Handle(ctx, tx, handle); err != nil {
			return stepped{}, fmt.Errorf("subscription %s: %w", sub.Name, &handlerError{events: handle, err: err})
		}
	}
	last := events[len(events)-1].Cursor()
	tag, err := tx.Exec(ctx, `UPDATE subscription_checkpoints SET transaction_id = $2::text::xid8, position = $3, events = events + $4 WHERE name = $1`,
		sub.Name, fmt.Sprint(last.TxID), last.Position, len(handle))
	if err != nil {
		return stepped{}, fmt.Errorf("subscription %s: saving checkpoint: %w", sub.Name, err)
	}
	if tag.RowsAffected() != 1 {
		return stepped{}, fmt.Errorf("subscription %s: checkpoint row is missing", sub.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return stepped{}, fmt.Errorf("subscription %s: committing: %w", sub.Name, err)
	}
	r.n, r.last = len(events), last
	return r, nil
}

// poison is what Run knows of the events its handler failed on.
type poison struct {
	// narrowUntil: events are handled one at a time until the checkpoint
	// reaches it (the last event of the batch that failed).
	narrowUntil Cursor
	// The single event failing now, since when, how often, the next wait.
	event    *Event
	first    time.Time
	attempts int
	delay    time.Duration
}

// Run handles batches until ctx ends: at once while full batches come, then
// whenever Wake fires or PollInterval passes. A subscription never stops:
// errors of the database are logged and retried with backoff (creating the
// checkpoint at start too). When the handler fails on a batch, its events
// are handled one at a time to find the one it fails on; that one is retried
// as sub.Park says and then parked (logged at ERROR with its position), and
// every later event of its stream is parked behind it, while the other
// streams go on. Store.RetryParked handles them again once fixed.
func (s *Store) Run(ctx context.Context, sub Subscription) error {
	sub.setDefaults()
	backoff := 100 * time.Millisecond
	for {
		err := EnsureCheckpoint(ctx, s.pool, sub.Name)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.logger.Error("subscription cannot start, retrying", "subscription", sub.Name, "err", err, "retry_in", backoff)
		if !sub.Park.Sleep(ctx, backoff) {
			return nil
		}
		backoff = min(backoff*2, 30*time.Second)
	}
	backoff = 100 * time.Millisecond
	wait := 5 * time.Millisecond
	var p poison
	for {
		limit := sub.BatchSize
		if p.narrowUntil != (Cursor{}) {
			limit = 1
		}
		if sub.Settle > 0 {
			// A wake-up already here is for what this step reads; one
			// waiting when it ends came while it ran.
			select {
			case <-sub.Wake:
			default:
			}
		}
		r, err := s.step(ctx, sub, limit)
		var herr *handlerError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &herr) && !transient(herr.err):
			if len(herr.events) > 1 {
				p.narrowUntil = herr.events[len(herr.events)-1].Cursor()
				s.logger.Error("subscription failed on a batch, handling its events one at a time", "subscription", sub.Name, "err", err)
				continue
			}
			ev := herr.events[0]
			now := sub.Park.Now()
			if p.event == nil || p.event.Cursor() != ev.Cursor() {
				p.event, p.first, p.attempts, p.delay = &ev, now, 0, sub.Park.Window/15
				if p.narrowUntil == (Cursor{}) {
					p.narrowUntil = ev.Cursor()
				}
			}
			p.attempts++
			if p.attempts >= sub.Park.Attempts && now.Sub(p.first) >= sub.Park.Window {
				parked, perr := s.park(ctx, sub, ev, herr.err, p.attempts)
				if perr != nil {
					s.logger.Error("subscription cannot park an event, retrying", "subscription", sub.Name, "position", ev.Position, "err", perr)
					if !sub.Park.Sleep(ctx, backoff) {
						return nil
					}
					backoff = min(backoff*2, 30*time.Second)
					continue
				}
				if parked {
					s.logger.Error("event parked: the subscription cannot handle it and goes on without it and without the later events of its stream (nebula audit parked, nebula audit retry)",
						"subscription", sub.Name, "position", ev.Position, "stream", ev.StreamID, "type", ev.Type, "attempts", p.attempts, "err", herr.err)
				}
				p.event = nil
				if !ev.Cursor().Before(p.narrowUntil) {
					p = poison{}
				}
				continue
			}
			s.logger.Error("subscription failed on an event, retrying before parking it", "subscription", sub.Name, "position", ev.Position,
				"stream", ev.StreamID, "type", ev.Type, "attempt", p.attempts, "of", sub.Park.Attempts, "err", herr.err, "retry_in", p.delay)
			if !sub.Park.Sleep(ctx, p.delay) {
				return nil
			}
			p.delay = min(p.delay*2, sub.Park.Window)
			continue
		case err != nil:
			s.logger.Error("subscription failed, retrying", "subscription", sub.Name, "err", err, "retry_in", backoff)
			if !sub.Park.Sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if r.n > 0 && p.narrowUntil != (Cursor{}) && !r.last.Before(p.narrowUntil) {
			p = poison{}
		}
		if r.n > 0 && p.event != nil && !r.last.Before(p.event.Cursor()) {
			p.event = nil
		}
		if r.n > 0 {
			// The horizon moved: what still waits behind it waits for
			// another transaction.
			wait = 5 * time.Millisecond
		}
		if r.n == limit {
			continue
		}
		if r.pending {
			// Committed events wait behind an older open transaction: look
			// again soon, less often the longer it stays open, and at once
			// when another append is announced (its transaction may have
			// been the one in the way).
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-sub.Wake:
				t.Stop()
			case <-t.C:
				wait = min(wait*2, 200*time.Millisecond)
			}
			continue
		}
		wait = 5 * time.Millisecond
		if r.n > 0 && sub.Settle > 0 {
			// Busy: events were appended while this step ran (their
			// wake-up is waiting already). Let more gather first.
			select {
			case <-sub.Wake:
				if !sub.Park.Sleep(ctx, sub.Settle) {
					return nil
				}
				continue
			default:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sub.Wake:
		case <-time.After(sub.PollInterval):
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// LockSubscription takes a subscription's lock for the rest of tx, pausing
// whichever process runs it (for the replay tool, which compares the live
// projection with a rebuilt one and needs it to stand still).
func LockSubscription(ctx context.Context, tx pgx.Tx, name string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey(name)); err != nil {
		return fmt.Errorf("locking subscription %s: %w", name, err)
	}
	return nil
}
