package eventstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Appends notify subscribers right after their commit, not inside it:
// PostgreSQL holds a global lock on its notification queue from a notifying
// commit until that commit's WAL is flushed, so notifying inside the append
// would make every append wait for every other append's fsync.
//
// With RunNotifier running, notifications go out from one connection, one
// transaction for all the appends of up to a millisecond (one notification
// per append, each with its own payload so none is folded into another);
// without it, each append sends its own right after committing. Either
// way, a notification lost to a crash between commit and notify is covered
// by the subscribers' polling and the wakers' watermill subscription of the
// events table (Topic).

func (s *Store) notifyAfterCommit(ctx context.Context, payload string) {
	if s.running.Load() {
		select {
		case s.pending <- payload:
			return
		default:
			// The notifier is behind; notify inline rather than wait.
		}
	}
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, NotifyChannel, payload); err != nil {
		s.logger.Warn("notifying subscribers after an append", "payload", payload, "err", err)
	}
}

// notifyEvery is the shortest time between two notification transactions
// of a process's notifier. A notification costs PostgreSQL a transaction
// of its own (it takes a transaction id and writes a commit record); one
// per append cost a quarter of the appends' throughput with the CPU busy.
// An append that comes after a quiet millisecond is notified at once; under
// load each transaction carries every append of the last millisecond, and
// a subscriber hears of an append at most this much later.
const notifyEvery = time.Millisecond

// RunNotifier sends the appends' notifications until ctx ends.
func (s *Store) RunNotifier(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("the notifier is already running")
	}
	defer s.running.Store(false)
	var last time.Time
	payloads := make([]string, 0, 512)
	for {
		select {
		case <-ctx.Done():
			return nil
		case p := <-s.pending:
			payloads = append(payloads[:0], p)
		}
		if wait := notifyEvery - time.Since(last); wait > 0 && !sleep(ctx, wait) {
			return nil
		}
	more:
		for len(payloads) < cap(payloads) {
			select {
			case p := <-s.pending:
				payloads = append(payloads, p)
			default:
				break more
			}
		}
		last = time.Now()
		// One implicit transaction, one notification per append (each
		// with its own payload, so none is folded into another). Its
		// commit does not wait for the WAL flush: a notification's
		// durability is worth nothing (one lost to a crash is covered by
		// the events topic), and the notification queue's lock, held
		// until then, is let go sooner.
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
		b.Queue(`SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`, NotifyChannel, payloads)
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil && ctx.Err() == nil {
			s.logger.Warn("sending append notifications", "count", len(payloads), "err", err)
			if !sleep(ctx, 100*time.Millisecond) {
				return nil
			}
		}
	}
}
