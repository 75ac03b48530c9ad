package eventstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5"
)

// Waker wakes subscribers of this process right after any process commits an
// append: LISTEN/NOTIFY on a dedicated connection (one notification per
// append) for speed, and a watermill-sql subscription of the events
// themselves (Topic: the events table, read in commit order behind the
// commit horizon) as the fallback that catches notifications lost to a crash
// between commit and notify or while reconnecting.
type Waker struct {
	store    *Store
	group    string
	channels []string

	mu      sync.Mutex
	subs    []chan struct{}
	changed chan struct{}
	// appended holds the payloads (stream@version) of append notifications
	// since the last TakeAppended; overflow says some were not kept.
	appended []string
	overflow bool
}

// maxAppended bounds the payloads kept between two TakeAppended calls.
const maxAppended = 10000

// TakeAppended returns the streams appended to (as stream@version) since the
// last call, and whether some were lost (too many, or a reconnect): then the
// caller must look at everything.
func (w *Waker) TakeAppended() ([]string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out, lost := w.appended, w.overflow
	w.appended, w.overflow = nil, false
	return out, lost
}

func (w *Waker) note(payload string, lost bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lost || len(w.appended) >= maxAppended {
		w.overflow = true
		return
	}
	w.appended = append(w.appended, payload)
}

// NewWaker returns a waker; group names this process's watermill consumer
// group (a stable name per replica, such as the host name). Besides appends,
// it listens on the extra channels given.
func (s *Store) NewWaker(group string, extra ...string) *Waker {
	return &Waker{store: s, group: group, channels: append([]string{NotifyChannel}, extra...), changed: make(chan struct{})}
}

// Changed returns a channel that is closed at the next wake-up: a broadcast
// for any number of short-lived waiters (take it before checking state).
func (w *Waker) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Subscribe returns a channel that receives (coalesced) wake-ups.
func (w *Waker) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch
}

func (w *Waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	for _, ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Run listens until ctx ends.
func (w *Waker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.listen(ctx) }()
	go func() { defer wg.Done(); w.topic(ctx, time.Second) }()
	wg.Wait()
	return nil
}

func (w *Waker) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		w.store.logger.Warn("event notifications interrupted, reconnecting", "err", err, "retry_in", backoff)
		if !sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (w *Waker) listenOnce(ctx context.Context) error {
	conn, err := w.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is dedicated to LISTEN from now on; hijack it so the
	// pool never hands it to anyone else.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	for _, ch := range w.channels {
		if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return fmt.Errorf("listening on %s: %w", ch, err)
		}
	}
	// Anything committed while we were not listening: look now, at everything.
	w.note("", true)
	w.wake()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == NotifyChannel {
			w.note(n.Payload, false)
		}
		w.wake()
	}
}

// topic consumes Topic, the events table, as this process's consumer group,
// polling every poll when it is idle. Subscribers read the events table
// themselves, so a message is only a wake-up; the group starts at the
// commit horizon each time (EventsOffsets), and every message after that is
// an event committed since.
func (w *Waker) topic(ctx context.Context, poll time.Duration) {
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(w.store.pool), wsql.SubscriberConfig{
		ConsumerGroup:  w.group,
		SchemaAdapter:  EventsSchema{},
		OffsetsAdapter: EventsOffsets{},
		PollInterval:   poll,
	}, watermill.NopLogger{})
	if err != nil {
		w.store.logger.Error("events topic subscriber", "err", err)
		return
	}
	defer sub.Close()
	for ctx.Err() == nil {
		msgs, err := sub.Subscribe(ctx, Topic)
		if err != nil {
			// The group's row could not be written (the database is
			// away): try again, as the LISTEN side does.
			w.store.logger.Warn("subscribing to the events topic, retrying", "err", err)
			if !sleep(ctx, jitter(5*time.Second)) {
				return
			}
			continue
		}
		for msg := range msgs {
			// What was appended, as a notification says it: readers of
			// TakeAppended (the agents' push) act on it as on a LISTEN.
			var m TopicMessage
			if json.Unmarshal(msg.Payload, &m) == nil && m.StreamID != "" {
				w.note(m.StreamID+"@"+strconv.Itoa(m.Version), false)
			}
			w.wake()
			msg.Ack()
		}
	}
}

// jitter spreads retries of many processes: d/2 .. d.
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(time.Now().UnixNano()%int64(d/2+1))
}

// Throttle calls look whenever wake fires, at most once every `every`, and
// every `poll` without a wake, until ctx ends. A wake inside the interval is
// deferred to its end, never dropped: wakes come in bursts (each append,
// each projected batch), and the one that matters is often the last of a
// burst.
func Throttle(ctx context.Context, wake <-chan struct{}, every, poll time.Duration, look func(context.Context)) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	var last time.Time
	var deferred <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			if wait := every - time.Since(last); wait > 0 {
				if deferred == nil {
					deferred = time.After(wait)
				}
				continue
			}
		case <-deferred:
		case <-tick.C:
		}
		deferred = nil
		last = time.Now()
		look(ctx)
	}
}
