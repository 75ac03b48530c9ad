package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The reads of the events table that other packages need besides the
// commit-order reads of subscriptions: they name streams and event types as
// arguments (domain.RevisionStream(id), domain.AgentUpgraded{}.EventType()),
// and no package but this one writes SQL against the events table.

// StreamVersions returns the current version of each of the streams that
// has events (a stream without events is left out).
func StreamVersions(ctx context.Context, q Querier, streamIDs []string) (map[string]int, error) {
	out := make(map[string]int, len(streamIDs))
	if len(streamIDs) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT stream_id, max(stream_version) FROM events WHERE stream_id = ANY($1::text[]) GROUP BY stream_id`, streamIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the versions of %d streams: %w", len(streamIDs), err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var v int
		if err := rows.Scan(&s, &v); err != nil {
			return nil, err
		}
		out[s] = v
	}
	return out, rows.Err()
}

// EventAt returns the event at one version of a stream; false when the
// stream has no such version.
func EventAt(ctx context.Context, q Querier, streamID string, version int) (Event, bool, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE stream_id = $1 AND stream_version = $2`, streamID, version)
	if err != nil {
		return Event{}, false, fmt.Errorf("reading version %d of stream %s: %w", version, streamID, err)
	}
	evs, err := scanEvents(rows, 1)
	if err != nil {
		return Event{}, false, fmt.Errorf("reading version %d of stream %s: %w", version, streamID, err)
	}
	if len(evs) == 0 {
		return Event{}, false, nil
	}
	return evs[0], true, nil
}

// HasEventAfter reports whether the stream has an event of one of the types
// after version `after`.
func HasEventAfter(ctx context.Context, q Querier, streamID string, after int, types ...string) (bool, error) {
	var found bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events WHERE stream_id = $1 AND stream_version > $2
		AND event_type = ANY($3::text[]))`, streamID, after, types).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("reading stream %s after version %d: %w", streamID, after, err)
	}
	return found, nil
}

// EventsOfType returns the events of one type in a stream, in order.
func EventsOfType(ctx context.Context, q Querier, streamID, eventType string) ([]Event, error) {
	rows, err := q.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE stream_id = $1 AND event_type = $2 ORDER BY stream_version`,
		streamID, eventType)
	if err != nil {
		return nil, fmt.Errorf("reading the %s events of stream %s: %w", eventType, streamID, err)
	}
	evs, err := scanEvents(rows, 1)
	if err != nil {
		return nil, fmt.Errorf("reading the %s events of stream %s: %w", eventType, streamID, err)
	}
	return evs, nil
}

// LatestOfType returns, for each of the streams that has one, its latest
// event of one type, by stream.
func LatestOfType(ctx context.Context, q Querier, streamIDs []string, eventType string) (map[string]Event, error) {
	out := make(map[string]Event, len(streamIDs))
	if len(streamIDs) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, `SELECT DISTINCT ON (stream_id) `+eventColumns+` FROM events
		WHERE stream_id = ANY($1::text[]) AND event_type = $2 ORDER BY stream_id, stream_version DESC`, streamIDs, eventType)
	if err != nil {
		return nil, fmt.Errorf("reading the latest %s events: %w", eventType, err)
	}
	evs, err := scanEvents(rows, len(streamIDs))
	if err != nil {
		return nil, fmt.Errorf("reading the latest %s events: %w", eventType, err)
	}
	for _, e := range evs {
		out[e.StreamID] = e
	}
	return out, nil
}

// HasEvents reports whether the events table exists (created: the event
// store's migration ran) and whether it holds any event.
func HasEvents(ctx context.Context, q Querier) (created, some bool, err error) {
	if err := q.QueryRow(ctx, `SELECT to_regclass('events') IS NOT NULL`).Scan(&created); err != nil {
		return false, false, fmt.Errorf("reading whether the events table exists: %w", err)
	}
	if !created {
		return false, false, nil
	}
	err = q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM events)`).Scan(&some)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return true, false, fmt.Errorf("reading whether any event exists: %w", err)
	}
	return true, some, nil
}
