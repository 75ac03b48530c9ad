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
}

func (s *Subscription) setDefaults() {
	if s.BatchSize <= 0 {
		s.BatchSize = 5000
	}
	if s.PollInterval <= 0 {
		s.PollInterval = time.Second
	}
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
func (s *Store) Step(ctx context.Context, sub Subscription) (int, error) {
	n, _, err := s.step(ctx, sub)
	return n, err
}

// step handles at most one batch and also reports whether events committed
// after the checkpoint are still behind the commit horizon (an older
// transaction is open): their wake-up has come and gone, so the caller must
// look again soon rather than wait for the next one.
func (s *Store) step(ctx context.Context, sub Subscription) (int, bool, error) {
	sub.setDefaults()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, false, fmt.Errorf("subscription %s: beginning: %w", sub.Name, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var locked bool
	// An advisory lock assigns no transaction id, so this transaction does not
	// hold back the commit horizon it is about to read behind.
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, lockKey(sub.Name)).Scan(&locked); err != nil {
		return 0, false, fmt.Errorf("subscription %s: locking: %w", sub.Name, err)
	}
	if !locked {
		return 0, false, nil
	}
	cur, _, err := Checkpoint(ctx, tx, sub.Name)
	if err != nil {
		return 0, false, err
	}
	events, err := ReadAll(ctx, tx, cur, sub.BatchSize)
	if err != nil {
		return 0, false, fmt.Errorf("subscription %s: %w", sub.Name, err)
	}
	var pending bool
	if len(events) < sub.BatchSize {
		last := cur
		if len(events) > 0 {
			last = events[len(events)-1].Cursor()
		}
		err := tx.QueryRow(ctx, pendingQuery, fmt.Sprint(last.TxID), last.Position).Scan(&pending)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return 0, false, fmt.Errorf("subscription %s: %w", sub.Name, err)
		}
		if len(events) == 0 {
			return 0, pending, nil
		}
	}
	if err := sub.Handle(ctx, tx, events); err != nil {
		return 0, false, fmt.Errorf("subscription %s: handling events %d..%d: %w", sub.Name, events[0].Position, events[len(events)-1].Position, err)
	}
	last := events[len(events)-1].Cursor()
	tag, err := tx.Exec(ctx, `UPDATE subscription_checkpoints SET transaction_id = $2::text::xid8, position = $3, events = events + $4 WHERE name = $1`,
		sub.Name, fmt.Sprint(last.TxID), last.Position, len(events))
	if err != nil {
		return 0, false, fmt.Errorf("subscription %s: saving checkpoint: %w", sub.Name, err)
	}
	if tag.RowsAffected() != 1 {
		return 0, false, fmt.Errorf("subscription %s: checkpoint row is missing", sub.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, false, fmt.Errorf("subscription %s: committing: %w", sub.Name, err)
	}
	return len(events), pending, nil
}

// Run handles batches until ctx ends: at once while full batches come, then
// whenever Wake fires or PollInterval passes. Errors are logged and retried
// with backoff; a subscription never stops on a bad batch.
func (s *Store) Run(ctx context.Context, sub Subscription) error {
	sub.setDefaults()
	if err := EnsureCheckpoint(ctx, s.pool, sub.Name); err != nil {
		return err
	}
	backoff := 100 * time.Millisecond
	wait := 5 * time.Millisecond
	for {
		n, pending, err := s.step(ctx, sub)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.logger.Error("subscription failed, retrying", "subscription", sub.Name, "err", err, "retry_in", backoff)
			if !sleep(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if n > 0 {
			// The horizon moved: what still waits behind it waits for
			// another transaction.
			wait = 5 * time.Millisecond
		}
		if n == sub.BatchSize {
			continue
		}
		if pending {
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
