package eventstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ParkPolicy decides when an event a subscription keeps failing on is parked
// (set aside, see Parked) so that the events after it, of every other
// stream, go on. An event is parked once it has failed Attempts times, alone
// in its batch, over at least Window; the waits between attempts start at
// Window/15 and double (4, 8, 16, 32 s for a minute). Errors of the database
// connection (it is down, restarting, overloaded) never park anything: they
// are retried forever.
type ParkPolicy struct {
	Attempts int
	Window   time.Duration
	// Now and Sleep are the clock (tests inject one); time.Now and a timer
	// when nil. Sleep returns false when ctx ended first.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) bool
}

func (p *ParkPolicy) setDefaults() {
	if p.Attempts <= 0 {
		p.Attempts = 5
	}
	if p.Window <= 0 {
		p.Window = time.Minute
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Sleep == nil {
		p.Sleep = sleep
	}
}

// Parked is an event set aside by a subscription.
type Parked struct {
	Subscription  string `json:"subscription"`
	Position      int64  `json:"position"`
	StreamID      string `json:"stream"`
	StreamVersion int    `json:"streamVersion"`
	OrgID         string `json:"orgId,omitempty"`
	Type          string `json:"type"`
	// Reason is "failed" for the event that failed, "behind" for the later
	// events of its stream parked after it.
	Reason         string    `json:"reason"`
	Error          string    `json:"error"`
	Attempts       int       `json:"attempts"`
	ParkedAt       time.Time `json:"parkedAt"`
	LastRetryError string    `json:"lastRetryError,omitempty"`
}

// ParkedReasonFailed and ParkedReasonBehind are the reasons an event is parked.
const (
	ParkedReasonFailed = "failed"
	ParkedReasonBehind = "behind"
)

// handlerError is a batch the subscription's handler failed on.
type handlerError struct {
	events []Event
	err    error
}

func (e *handlerError) Error() string {
	return fmt.Sprintf("handling events %d..%d: %v", e.events[0].Position, e.events[len(e.events)-1].Position, e.err)
}

func (e *handlerError) Unwrap() error { return e.err }

// transient reports whether err comes from the database connection or the
// server's state rather than from the events: those are retried, never
// parked.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || pgconn.Timeout(err) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// 08 connection, 40 serialization/deadlock, 53 resources, 57 operator
		// intervention (shutdown), 58 system error.
		switch pg.Code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
		return false
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ne) || errors.As(err, &ce) {
		return true
	}
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "conn busy")
}

const parkedColumns = `subscription, position, stream_id, stream_version, coalesce(org_id::text, ''), event_type, reason, error, attempts, parked_at, last_retry_error`

func scanParked(rows pgx.Rows) ([]Parked, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Parked, error) {
		var p Parked
		err := r.Scan(&p.Subscription, &p.Position, &p.StreamID, &p.StreamVersion, &p.OrgID, &p.Type, &p.Reason, &p.Error, &p.Attempts, &p.ParkedAt, &p.LastRetryError)
		return p, err
	})
}

// ListParked returns the events parked and not retried yet, of one
// subscription or ("") of all, in subscription and commit order.
func ListParked(ctx context.Context, q Querier, subscription string) ([]Parked, error) {
	rows, err := q.Query(ctx, `SELECT `+parkedColumns+` FROM parked_events
		WHERE retried_at IS NULL AND ($1 = '' OR subscription = $1) ORDER BY subscription, transaction_id, position`, subscription)
	if err != nil {
		return nil, fmt.Errorf("listing parked events: %w", err)
	}
	out, err := scanParked(rows)
	if err != nil {
		return nil, fmt.Errorf("listing parked events: %w", err)
	}
	return out, nil
}

// CountParked returns how many events each subscription has parked and not
// retried yet (subscriptions with none are absent).
func CountParked(ctx context.Context, q Querier) (map[string]int64, error) {
	rows, err := q.Query(ctx, `SELECT subscription, count(*) FROM parked_events WHERE retried_at IS NULL GROUP BY subscription`)
	if err != nil {
		return nil, fmt.Errorf("counting parked events: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var s string
		var n int64
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}

// ParkedInTransaction returns the first event of the append transaction
// txID that subscription parked, if any: a writer that waited for its events
// to be handled learns they were parked instead.
func ParkedInTransaction(ctx context.Context, q Querier, subscription string, txID uint64) (*Parked, error) {
	rows, err := q.Query(ctx, `SELECT `+parkedColumns+` FROM parked_events
		WHERE subscription = $1 AND transaction_id = $2::text::xid8 AND retried_at IS NULL ORDER BY position LIMIT 1`,
		subscription, fmt.Sprint(txID))
	if err != nil {
		return nil, fmt.Errorf("reading parked events: %w", err)
	}
	ps, err := scanParked(rows)
	if err != nil || len(ps) == 0 {
		return nil, err
	}
	return &ps[0], nil
}

// divert parks the events of streams that already have a parked event in
// sub, inside the step's transaction, and returns the others for the
// handler. Nothing is handled on top of a missing event.
func (s *Store) divert(ctx context.Context, tx pgx.Tx, sub Subscription, events []Event) ([]Event, error) {
	var any bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM parked_events WHERE subscription = $1 AND retried_at IS NULL)`, sub.Name).Scan(&any); err != nil {
		return nil, fmt.Errorf("reading parked streams: %w", err)
	}
	if !any {
		return events, nil
	}
	seen := map[string]bool{}
	var streams []string
	for _, e := range events {
		if !seen[e.StreamID] {
			seen[e.StreamID] = true
			streams = append(streams, e.StreamID)
		}
	}
	rows, err := tx.Query(ctx, `SELECT stream_id, min(position) FROM parked_events
		WHERE subscription = $1 AND retried_at IS NULL AND stream_id = ANY($2) GROUP BY stream_id`, sub.Name, streams)
	if err != nil {
		return nil, fmt.Errorf("reading parked streams: %w", err)
	}
	blocked := map[string]int64{}
	for rows.Next() {
		var st string
		var p int64
		if err := rows.Scan(&st, &p); err != nil {
			rows.Close()
			return nil, err
		}
		blocked[st] = p
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading parked streams: %w", err)
	}
	if len(blocked) == 0 {
		return events, nil
	}
	keep := events[:0:0]
	now := sub.Park.Now()
	for _, e := range events {
		first, ok := blocked[e.StreamID]
		if !ok {
			keep = append(keep, e)
			continue
		}
		msg := fmt.Sprintf("event %d of stream %s is parked: this later event waits behind it", first, e.StreamID)
		if err := insertParked(ctx, tx, sub.Name, e, ParkedReasonBehind, msg, 0, now); err != nil {
			return nil, err
		}
		s.logger.Error("event parked behind an earlier parked event of its stream", "subscription", sub.Name, "position", e.Position,
			"stream", e.StreamID, "type", e.Type, "parked_first", first)
	}
	return keep, nil
}

func insertParked(ctx context.Context, tx pgx.Tx, sub string, e Event, reason, msg string, attempts int, at time.Time) error {
	var org any
	if e.OrgID != "" {
		org = e.OrgID
	}
	_, err := tx.Exec(ctx, `INSERT INTO parked_events (subscription, position, transaction_id, stream_id, stream_version, org_id,
		event_type, reason, error, attempts, parked_at) VALUES ($1, $2, $3::text::xid8, $4, $5, $6::uuid, $7, $8, $9, $10, $11)`,
		sub, e.Position, fmt.Sprint(e.TxID), e.StreamID, e.StreamVersion, org, e.Type, reason, truncate(msg, 4000), attempts, at)
	if err != nil {
		return fmt.Errorf("parking event %d: %w", e.Position, err)
	}
	return nil
}

// truncate shortens an error message to at most n bytes of valid text.
func truncate(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", `\0`), "?")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// park sets ev aside for sub and moves the checkpoint past it, if the
// checkpoint still stands just before it (another replica may have moved on).
func (s *Store) park(ctx context.Context, sub Subscription, ev Event, cause error, attempts int) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, lockKey(sub.Name)).Scan(&locked); err != nil || !locked {
		return false, err
	}
	cur, _, err := Checkpoint(ctx, tx, sub.Name)
	if err != nil {
		return false, err
	}
	next, err := ReadAll(ctx, tx, cur, 1)
	if err != nil {
		return false, err
	}
	if len(next) == 0 || next[0].Cursor() != ev.Cursor() {
		return false, nil
	}
	if err := insertParked(ctx, tx, sub.Name, ev, ParkedReasonFailed, cause.Error(), attempts, sub.Park.Now()); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, `UPDATE subscription_checkpoints SET transaction_id = $2::text::xid8, position = $3 WHERE name = $1`,
		sub.Name, fmt.Sprint(ev.TxID), ev.Position); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, err
	}
	return true, nil
}

// Retried is the outcome of retrying one stream's parked events.
type Retried struct {
	Subscription string `json:"subscription"`
	StreamID     string `json:"stream"`
	// Positions are the events handled, in order (none when it failed).
	Positions []int64 `json:"positions"`
	// Error is why the retry failed; the events stay parked.
	Error string `json:"error,omitempty"`
}

// ErrNotParked means no event is parked at the position given.
var ErrNotParked = errors.New("no event is parked there")

// RetryParked handles again, in order, the parked events of the stream of the
// event parked at position in sub (every parked stream when position is 0),
// with the subscription's own handler, once whatever made them fail is fixed.
// Each stream is retried in its own transaction under the subscription's
// lock: all its parked events are handled, or none and they stay parked
// with the new error. A retried stream is handled normally again.
func (s *Store) RetryParked(ctx context.Context, sub Subscription, position int64) ([]Retried, error) {
	sub.setDefaults()
	var streams []string
	var err error
	if position == 0 {
		var rows pgx.Rows
		rows, err = s.pool.Query(ctx, `SELECT stream_id FROM parked_events WHERE subscription = $1 AND retried_at IS NULL
			GROUP BY stream_id ORDER BY min(position)`, sub.Name)
		if err == nil {
			streams, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
	} else {
		var st string
		err = s.pool.QueryRow(ctx, `SELECT stream_id FROM parked_events WHERE subscription = $1 AND position = $2 AND retried_at IS NULL`,
			sub.Name, position).Scan(&st)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("%w: subscription %s has no parked event at position %d", ErrNotParked, sub.Name, position)
		}
		streams = []string{st}
	}
	if err != nil {
		return nil, fmt.Errorf("finding parked events of %s: %w", sub.Name, err)
	}
	var out []Retried
	for _, st := range streams {
		r, err := s.retryStream(ctx, sub, st)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func (s *Store) retryStream(ctx context.Context, sub Subscription, stream string) (Retried, error) {
	res := Retried{Subscription: sub.Name, StreamID: stream}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	// Waits for a running step to end; none starts until this commits.
	if err := LockSubscription(ctx, tx, sub.Name); err != nil {
		return res, err
	}
	rows, err := tx.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE position IN
		(SELECT position FROM parked_events WHERE subscription = $1 AND stream_id = $2 AND retried_at IS NULL)
		ORDER BY stream_version`, sub.Name, stream)
	if err != nil {
		return res, fmt.Errorf("reading parked events of %s: %w", stream, err)
	}
	events, err := scanEvents(rows, 16)
	if err != nil {
		return res, fmt.Errorf("reading parked events of %s: %w", stream, err)
	}
	if len(events) == 0 {
		return res, nil
	}
	cur, _, err := Checkpoint(ctx, tx, sub.Name)
	if err != nil {
		return res, err
	}
	if herr := sub.Handle(ctx, tx, events); herr != nil {
		_ = tx.Rollback(ctx)
		res.Error = herr.Error()
		_, err := s.pool.Exec(ctx, `UPDATE parked_events SET last_retry_error = $3 WHERE subscription = $1 AND stream_id = $2 AND retried_at IS NULL`,
			sub.Name, stream, truncate(herr.Error(), 4000))
		if err != nil {
			return res, err
		}
		s.logger.Error("retrying parked events failed; they stay parked", "subscription", sub.Name, "stream", stream, "err", herr)
		return res, nil
	}
	for _, e := range events {
		_, err := tx.Exec(ctx, `UPDATE parked_events SET retried_at = $3, retried_after_tx = $4::text::xid8, retried_after_position = $5,
			retry_seq = nextval('parked_events_retry_seq') WHERE subscription = $1 AND position = $2`,
			sub.Name, e.Position, sub.Park.Now(), fmt.Sprint(cur.TxID), cur.Position)
		if err != nil {
			return res, fmt.Errorf("marking event %d retried: %w", e.Position, err)
		}
		res.Positions = append(res.Positions, e.Position)
	}
	if _, err := tx.Exec(ctx, `UPDATE subscription_checkpoints SET events = events + $2 WHERE name = $1`, sub.Name, len(events)); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, fmt.Errorf("committing the retry of %s: %w", stream, err)
	}
	s.logger.Warn("parked events retried and handled", "subscription", sub.Name, "stream", stream, "events", len(events))
	return res, nil
}

// RetriedEvent is a parked event a retry handled: where the live
// subscription handled it (just after the event at After, in Seq order).
type RetriedEvent struct {
	Position int64
	After    Cursor
	Seq      int64
}

// RetriedEvents lists the events of sub that were parked and then retried,
// in the order they were handled, for a replay that must handle them where
// the live subscription did.
func RetriedEvents(ctx context.Context, q Querier, subscription string) ([]RetriedEvent, error) {
	rows, err := q.Query(ctx, `SELECT position, retried_after_tx::text::bigint, retried_after_position, retry_seq FROM parked_events
		WHERE subscription = $1 AND retried_at IS NOT NULL ORDER BY retry_seq`, subscription)
	if err != nil {
		return nil, fmt.Errorf("reading retried events: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetriedEvent, error) {
		var e RetriedEvent
		var tx int64
		err := r.Scan(&e.Position, &tx, &e.After.Position, &e.Seq)
		e.After.TxID = uint64(tx)
		return e, err
	})
}

// ReadPositions reads the events at the given positions, in that order.
func ReadPositions(ctx context.Context, q Querier, positions []int64) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE position = ANY($1)`, positions)
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	evs, err := scanEvents(rows, len(positions))
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	at := map[int64]Event{}
	for _, e := range evs {
		at[e.Position] = e
	}
	out := make([]Event, 0, len(positions))
	for _, p := range positions {
		if e, ok := at[p]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

// RetryParkedIn retries parked events in one of subs: the one named (every
// one when name is ""), at position (its stream; every parked stream when
// position is 0). A position parked in several subscriptions needs a name.
func (s *Store) RetryParkedIn(ctx context.Context, subs []Subscription, name string, position int64) ([]Retried, error) {
	var pick []Subscription
	for _, sub := range subs {
		if name == "" || sub.Name == name {
			pick = append(pick, sub)
		}
	}
	if len(pick) == 0 {
		return nil, fmt.Errorf("%w: there is no subscription %q", ErrNotParked, name)
	}
	if position != 0 && len(pick) > 1 {
		var holders []Subscription
		for _, sub := range pick {
			var n int
			if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM parked_events WHERE subscription = $1 AND position = $2 AND retried_at IS NULL`,
				sub.Name, position).Scan(&n); err != nil {
				return nil, fmt.Errorf("finding parked event %d: %w", position, err)
			}
			if n > 0 {
				holders = append(holders, sub)
			}
		}
		switch len(holders) {
		case 0:
			return nil, fmt.Errorf("%w: no event is parked at position %d", ErrNotParked, position)
		case 1:
			pick = holders
		default:
			return nil, fmt.Errorf("%w: event %d is parked by %d subscriptions; name one", ErrNotParked, position, len(holders))
		}
	}
	var out []Retried
	for _, sub := range pick {
		r, err := s.RetryParked(ctx, sub, position)
		out = append(out, r...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
