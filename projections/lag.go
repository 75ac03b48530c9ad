package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Lag is how far a subscription is behind the event store: the events
// committed after its checkpoint, and the first of them. An event that no
// projection can store keeps the projections at that event; the lag names it.
type Lag struct {
	Subscription string `json:"subscription"`
	Events       int64  `json:"events"`
	// First is the oldest event not handled yet, when there is one.
	FirstPosition int64     `json:"firstPosition,omitempty"`
	FirstType     string    `json:"firstType,omitempty"`
	FirstStream   string    `json:"firstStream,omitempty"`
	FirstAt       time.Time `json:"firstAt,omitzero"`
	// Parked counts the events the subscription set aside (it cannot handle
	// them) and has not handled since; FirstParked is the oldest of them.
	// They are not lag (the subscription moved past them), but the
	// projections are incomplete until they are retried.
	Parked      int64 `json:"parked,omitempty"`
	FirstParked int64 `json:"firstParked,omitempty"`
}

// Behind reports whether the subscription has events left to handle.
func (l Lag) Behind() bool { return l.Events > 0 }

// Complete reports whether the subscription handled every event: none left
// and none parked.
func (l Lag) Complete() bool { return !l.Behind() && l.Parked == 0 }

// String says in a line what the lag is.
func (l Lag) String() string {
	var parked string
	if l.Parked > 0 {
		parked = fmt.Sprintf("; %d events PARKED from position %d (nebula audit parked)", l.Parked, l.FirstParked)
	}
	if !l.Behind() {
		return l.Subscription + ": current" + parked
	}
	return fmt.Sprintf("%s: %d events behind the event store, from position %d (%s on %s, %s)",
		l.Subscription, l.Events, l.FirstPosition, l.FirstType, l.FirstStream, l.FirstAt.UTC().Format(time.RFC3339)) + parked
}

// addParked counts the events the subscription parked.
func addParked(ctx context.Context, q eventstore.Querier, lag *Lag) error {
	err := q.QueryRow(ctx, `SELECT count(*), coalesce(min(position), 0) FROM parked_events WHERE subscription = $1 AND retried_at IS NULL`,
		lag.Subscription).Scan(&lag.Parked, &lag.FirstParked)
	if err != nil {
		return fmt.Errorf("counting the parked events of %s: %w", lag.Subscription, err)
	}
	return nil
}

// SubscriptionLag measures one subscription's lag through q.
func SubscriptionLag(ctx context.Context, q eventstore.Querier, subscription string) (Lag, error) {
	lag := Lag{Subscription: subscription}
	cur, _, err := eventstore.Checkpoint(ctx, q, subscription)
	if err != nil {
		return lag, err
	}
	if err := addParked(ctx, q, &lag); err != nil {
		return lag, err
	}
	err = q.QueryRow(ctx, `SELECT count(*) FROM events WHERE (transaction_id, position) > ($1::text::xid8, $2)`,
		fmt.Sprint(cur.TxID), cur.Position).Scan(&lag.Events)
	if err != nil {
		return lag, fmt.Errorf("measuring the lag of %s: %w", subscription, err)
	}
	if lag.Events == 0 {
		return lag, nil
	}
	err = q.QueryRow(ctx, `SELECT position, event_type, stream_id, occurred_at FROM events
		WHERE (transaction_id, position) > ($1::text::xid8, $2) ORDER BY transaction_id, position LIMIT 1`,
		fmt.Sprint(cur.TxID), cur.Position).Scan(&lag.FirstPosition, &lag.FirstType, &lag.FirstStream, &lag.FirstAt)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return lag, fmt.Errorf("measuring the lag of %s: %w", subscription, err)
	}
	return lag, nil
}

// WaitCaughtUp waits until the projections handled every event committed
// when it was called, at most timeout, and no longer than two seconds without
// progress; it returns the lag then (none when they got there: events
// committed since do not count; the events parked are counted always). A lag
// left after the wait means the projections are stuck (or very slow).
func WaitCaughtUp(ctx context.Context, q eventstore.Querier, timeout time.Duration) (Lag, error) {
	var head eventstore.Cursor
	var tx int64
	err := q.QueryRow(ctx, `SELECT transaction_id::text::bigint, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1`).
		Scan(&tx, &head.Position)
	if errors.Is(err, pgx.ErrNoRows) {
		lag := Lag{Subscription: SubscriptionName}
		return lag, addParked(ctx, q, &lag)
	}
	if err != nil {
		return Lag{}, err
	}
	head.TxID = uint64(tx)
	deadline := time.Now().Add(timeout)
	var last eventstore.Cursor
	moved := time.Now()
	for {
		cur, _, err := eventstore.Checkpoint(ctx, q, SubscriptionName)
		if err != nil {
			return Lag{}, err
		}
		if !cur.Before(head) {
			lag := Lag{Subscription: SubscriptionName}
			return lag, addParked(ctx, q, &lag)
		}
		if cur != last {
			last, moved = cur, time.Now()
		}
		if time.Now().After(deadline) || time.Since(moved) > 2*time.Second {
			return SubscriptionLag(ctx, q, SubscriptionName)
		}
		select {
		case <-ctx.Done():
			return Lag{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
