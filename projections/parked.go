package projections

import (
	"context"
	"fmt"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ParkedError means a write's events were parked by the projections instead
// of projected: the change is recorded, but reads do not show it until an
// administrator retries it (nebula audit retry) once the cause is fixed.
type ParkedError struct {
	Event eventstore.Parked
}

func (e *ParkedError) Error() string {
	why := "it cannot be projected: " + e.Event.Error
	if e.Event.Reason == eventstore.ParkedReasonBehind {
		why = "an earlier event of " + e.Event.StreamID + " is parked"
	}
	return fmt.Sprintf("the change was recorded, but the projections parked event %d (%s on %s; %s); reads do not show it until an administrator retries it",
		e.Event.Position, e.Event.Type, e.Event.StreamID, why)
}

// parkedWrite returns a *ParkedError when the projections parked an event of
// the append that ended at cursor.
func parkedWrite(ctx context.Context, q eventstore.Querier, cursor eventstore.Cursor) error {
	p, err := eventstore.ParkedInTransaction(ctx, q, SubscriptionName, cursor.TxID)
	if err != nil {
		return err
	}
	if p != nil {
		return &ParkedError{Event: *p}
	}
	return nil
}

// RetryParked handles again the events the projections parked: those of the
// stream of the event at position, or every one when position is 0.
func (p *Projections) RetryParked(ctx context.Context, position int64) ([]eventstore.Retried, error) {
	return p.cfg.Store.RetryParked(ctx, p.Subscription(nil), position)
}

// replayOrder puts the events that were parked and later retried where the
// live projections handled them (just after the event the checkpoint stood
// at when they were retried) rather than where they were committed, so that
// a replay builds what the live projections built (the audit chain's order
// above all).
type replayOrder struct {
	skip  map[int64]bool
	after map[eventstore.Cursor][]eventstore.Event
}

func loadReplayOrder(ctx context.Context, q eventstore.Querier) (*replayOrder, error) {
	retried, err := eventstore.RetriedEvents(ctx, q, SubscriptionName)
	if err != nil || len(retried) == 0 {
		return nil, err
	}
	positions := make([]int64, len(retried))
	for i, r := range retried {
		positions[i] = r.Position
	}
	evs, err := eventstore.ReadPositions(ctx, q, positions)
	if err != nil {
		return nil, err
	}
	byPos := map[int64]eventstore.Event{}
	for _, e := range evs {
		byPos[e.Position] = e
	}
	o := &replayOrder{skip: map[int64]bool{}, after: map[eventstore.Cursor][]eventstore.Event{}}
	for _, r := range retried {
		e, ok := byPos[r.Position]
		if !ok {
			return nil, fmt.Errorf("retried event %d is missing from the event store", r.Position)
		}
		o.skip[r.Position] = true
		o.after[r.After] = append(o.after[r.After], e)
	}
	return o, nil
}

// apply returns events (in commit order) in the order the live projections
// handled them.
func (o *replayOrder) apply(events []eventstore.Event) []eventstore.Event {
	if o == nil {
		return events
	}
	out := make([]eventstore.Event, 0, len(events))
	for _, e := range events {
		if !o.skip[e.Position] {
			out = append(out, e)
		}
		out = append(out, o.after[e.Cursor()]...)
	}
	return out
}
