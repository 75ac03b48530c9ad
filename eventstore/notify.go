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
// With RunNotifier running, notifications go out from one connection in
// pipelined batches (one notification per append, each with its own payload
// so none is folded into another); without it, each append sends its own
// right after committing. Either way, a notification lost to a crash between
// commit and notify is covered by the subscribers' polling and the wakers'
// watermill subscription of the events table (Topic).

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

// RunNotifier sends the appends' notifications until ctx ends.
func (s *Store) RunNotifier(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("the notifier is already running")
	}
	defer s.running.Store(false)
	for {
		var first string
		select {
		case <-ctx.Done():
			return nil
		case first = <-s.pending:
		}
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, first)
	more:
		for b.Len() < 512 {
			select {
			case p := <-s.pending:
				b.Queue(`SELECT pg_notify($1, $2)`, NotifyChannel, p)
			default:
				break more
			}
		}
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil && ctx.Err() == nil {
			s.logger.Warn("sending append notifications", "count", b.Len(), "err", err)
			if !sleep(ctx, 100*time.Millisecond) {
				return nil
			}
		}
	}
}
