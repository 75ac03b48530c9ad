package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Batcher writes the agents' heartbeats and acknowledgements in batches.
// Written one statement each, 10,000 agents' heartbeats (one every 15 s)
// were 667 commits a second, and a burst's acknowledgements one more commit
// per environment: most of the database's work while nothing changed, and
// what the commands waited behind. Queued, the latest of each server's
// heartbeats and of each (environment, server) acknowledgement is written
// within BatchEvery, all in one transaction without waiting for the WAL flush:
// this is telemetry, and a database crash loses at most its last moment,
// which the next heartbeat (15 s) or acknowledgement restores.
type Batcher struct {
	store *Store
	every time.Duration
	log   *slog.Logger

	mu        sync.Mutex
	beats     map[string]Heartbeat
	acks      map[ackKey]AckRecord
	scheduled bool
	due       time.Time // when the scheduled flush comes
	// retryAt is when to try again after the database did not answer:
	// no flush is scheduled before it.
	retryAt time.Time

	// flushing is held while a batch is written, so Forget can wait for
	// a heartbeat already on its way.
	flushing sync.Mutex
}

type ackKey struct{ env, server string }

// BatchEvery is how long a heartbeat or acknowledgement waits at most before
// it is written; MaxBatch how many queued start a flush at once. What a
// flush could not write is tried again RetryEvery later, for as long as it
// can still matter (KeepTrying after it was received): a heartbeat that old
// renews a lease that expired anyway, and a database that long gone (or a
// pool closed) is not waited for with every agent's last word.
const (
	BatchEvery = 50 * time.Millisecond
	MaxBatch   = 2048
	RetryEvery = time.Second
	KeepTrying = time.Minute
)

// NewBatcher returns a batcher writing through store (every is BatchEvery
// when zero; log may be nil).
func NewBatcher(store *Store, every time.Duration, log *slog.Logger) *Batcher {
	if every <= 0 {
		every = BatchEvery
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Batcher{store: store, every: every, log: log, beats: map[string]Heartbeat{}, acks: map[ackKey]AckRecord{}}
}

// Heartbeat queues a heartbeat; a later one of the same server replaces it.
func (b *Batcher) Heartbeat(h Heartbeat) {
	b.mu.Lock()
	b.beats[h.ServerID] = h
	b.scheduleLocked()
	b.mu.Unlock()
}

// Ack queues an acknowledgement; a later one of the same environment and
// server replaces it.
func (b *Batcher) Ack(a AckRecord) {
	b.mu.Lock()
	b.acks[ackKey{a.EnvironmentID, a.ServerID}] = a
	b.scheduleLocked()
	b.mu.Unlock()
}

// Forget drops the queued heartbeat of a connection that ended, once any
// flush under way is done (one that failed queues its heartbeats again):
// called before the disconnect is recorded, so that no heartbeat of the
// connection renews the lease after its release.
func (b *Batcher) Forget(serverID, session string) {
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if h, ok := b.beats[serverID]; ok && h.Session == session {
		delete(b.beats, serverID)
	}
}

// scheduleLocked makes sure a flush comes: within every, at once when
// MaxBatch are queued, not before retryAt after a failure; one timer at a
// time unless an earlier flush is needed.
func (b *Batcher) scheduleLocked() {
	delay := b.every
	if len(b.beats)+len(b.acks) >= MaxBatch {
		delay = 0
	}
	if wait := time.Until(b.retryAt); wait > delay {
		delay = wait
	}
	at := time.Now().Add(delay)
	if b.scheduled && !b.due.After(at) {
		return
	}
	b.scheduled, b.due = true, at
	time.AfterFunc(delay, func() { _ = b.Flush(context.Background()) })
}

// Flush writes what is queued now. What could not be written (the database
// did not answer) is queued again unless something newer replaced it; one
// entry the database refuses (a value it cannot store) is dropped alone,
// with a warning, never the batch with it.
func (b *Batcher) Flush(ctx context.Context) error {
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	beats, acks := b.beats, b.acks
	b.beats, b.acks, b.scheduled = map[string]Heartbeat{}, map[ackKey]AckRecord{}, false
	b.mu.Unlock()
	if len(beats) == 0 && len(acks) == 0 {
		return nil
	}
	hs := make([]Heartbeat, 0, len(beats))
	for _, h := range beats {
		hs = append(hs, h)
	}
	as := make([]AckRecord, 0, len(acks))
	for _, a := range acks {
		as = append(as, a)
	}
	err := b.store.writeBatch(ctx, hs, as)
	if isRefused(err) {
		err = b.writeEach(ctx, hs, as)
	} else if err != nil {
		b.requeue(hs, as)
	}
	if err != nil {
		b.log.Warn("writing agents' heartbeats and acknowledgements; trying again", "err", err, "in", RetryEvery)
		return err
	}
	b.mu.Lock()
	b.retryAt = time.Time{}
	b.mu.Unlock()
	return nil
}

// writeEach writes a refused batch one entry at a time, dropping those the
// database refuses; at the first error that is not about the data (the
// database stopped answering) the rest is queued again.
func (b *Batcher) writeEach(ctx context.Context, hs []Heartbeat, as []AckRecord) error {
	for i, h := range hs {
		err := b.store.writeBatch(ctx, []Heartbeat{h}, nil)
		switch {
		case isRefused(err):
			b.log.Warn("dropping a heartbeat the database refuses", "server", h.ServerID, "err", err)
		case err != nil:
			b.requeue(hs[i:], as)
			return err
		}
	}
	for i, a := range as {
		err := b.store.writeBatch(ctx, nil, []AckRecord{a})
		switch {
		case isRefused(err):
			b.log.Warn("dropping an acknowledgement the database refuses", "server", a.ServerID, "environment", a.EnvironmentID, "err", err)
		case err != nil:
			b.requeue(nil, as[i:])
			return err
		}
	}
	return nil
}

// requeue queues entries again that nothing newer replaced meanwhile and
// that can still matter (KeepTrying), and puts the next try RetryEvery off.
func (b *Batcher) requeue(hs []Heartbeat, as []AckRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for _, h := range hs {
		if _, newer := b.beats[h.ServerID]; !newer && now.Sub(h.At) < KeepTrying {
			b.beats[h.ServerID] = h
		}
	}
	for _, a := range as {
		k := ackKey{a.EnvironmentID, a.ServerID}
		if _, newer := b.acks[k]; !newer && now.Sub(a.At) < KeepTrying {
			b.acks[k] = a
		}
	}
	b.retryAt = now.Add(RetryEvery)
	if len(b.beats)+len(b.acks) > 0 {
		b.scheduleLocked()
	}
}

// isRefused is an error about the data (class 22: a value out of range, a
// character that cannot be stored, ...), not about the database answering.
func isRefused(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && strings.HasPrefix(pg.Code, "22")
}

// writeBatch writes heartbeats and acknowledgements in one transaction that
// does not wait for the WAL flush (telemetry; see Batcher).
func (s *Store) writeBatch(ctx context.Context, hs []Heartbeat, as []AckRecord) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
		return err
	}
	if err := saveHeartbeats(ctx, tx, hs); err != nil {
		return err
	}
	if err := saveAcks(ctx, tx, as); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
