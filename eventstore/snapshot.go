package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/nebulactrl/nebulactrl/domain"
)

// Snapshot is an aggregate's state folded up to Version of its stream, in
// the aggregate's own encoding (Schema names it: a snapshot of another schema
// is ignored and the stream is read from its start).
type Snapshot struct {
	StreamID string
	OrgID    string
	Version  int
	Schema   int
	State    []byte
}

// LoadSnapshot returns the stream's snapshot; ok is false when there is none.
func (s *Store) LoadSnapshot(ctx context.Context, streamID string) (Snapshot, bool, error) {
	snap := Snapshot{StreamID: streamID}
	var org *string
	err := s.pool.QueryRow(ctx, `SELECT org_id::text, version, schema, state FROM aggregate_snapshots WHERE stream_id = $1`, streamID).
		Scan(&org, &snap.Version, &snap.Schema, &snap.State)
	if errors.Is(err, pgx.ErrNoRows) {
		return Snapshot{}, false, nil
	}
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("reading the snapshot of %s: %w", streamID, err)
	}
	if org != nil {
		snap.OrgID = *org
	}
	return snap, true, nil
}

// SaveSnapshot keeps a snapshot unless a newer one is there already. A
// snapshot is a cache of what the events say: losing one costs only reading
// more events.
func (s *Store) SaveSnapshot(ctx context.Context, snap Snapshot) error {
	var org any
	if snap.OrgID != "" {
		org = snap.OrgID
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO aggregate_snapshots (stream_id, org_id, version, schema, state) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (stream_id) DO UPDATE SET org_id = EXCLUDED.org_id, version = EXCLUDED.version, schema = EXCLUDED.schema, state = EXCLUDED.state
		WHERE aggregate_snapshots.version < EXCLUDED.version OR aggregate_snapshots.schema <> EXCLUDED.schema`,
		snap.StreamID, org, snap.Version, snap.Schema, snap.State)
	if err != nil {
		return fmt.Errorf("saving the snapshot of %s: %w", snap.StreamID, err)
	}
	return nil
}

// LoadStream reads a stream's snapshot and the events after it in one
// statement (one round trip, and one view of the database: two statements
// could see a snapshot saved between them and miss the events before it).
// The events follow the snapshot only when it is of schema; otherwise (or
// with no snapshot) they are the whole stream. A caller that cannot use the
// snapshot after all (its state does not decode) reads the stream again
// from its start.
func (s *Store) LoadStream(ctx context.Context, streamID string, schema int) (Snapshot, bool, []Event, error) {
	rows, err := s.pool.Query(ctx, `WITH snap AS (
			SELECT org_id::text AS org_id, version, schema, state FROM aggregate_snapshots WHERE stream_id = $1)
		SELECT 0 AS part, org_id, version, schema, state,
			NULL::bigint, NULL::bigint, NULL::text, NULL::integer, NULL::text, NULL::text, NULL::smallint, NULL::json,
			NULL::text, NULL::text, NULL::text, NULL::text, NULL::timestamptz, NULL::text
		FROM snap
		UNION ALL
		SELECT 1, NULL, NULL, NULL, NULL, `+eventColumns+`
		FROM events WHERE stream_id = $1 AND stream_version > coalesce((SELECT version FROM snap WHERE schema = $2), 0)
		ORDER BY 1, 9`, streamID, schema)
	if err != nil {
		return Snapshot{}, false, nil, fmt.Errorf("reading stream %s: %w", streamID, err)
	}
	defer rows.Close()
	snap := Snapshot{StreamID: streamID}
	found := false
	events := make([]Event, 0, 16)
	// Value types that may be NULL (the other part's columns), so that a
	// row's scan allocates no more than scanEvents' does.
	var (
		part                                                     int
		org, stream, orgID, typ, kind, actorID, actorName, reqID pgtype.Text
		via                                                      pgtype.Text
		version, sch, streamVersion                              pgtype.Int4
		pos, tx                                                  pgtype.Int8
		sv                                                       pgtype.Int2
		at                                                       pgtype.Timestamptz
	)
	for rows.Next() {
		var state, payload []byte
		if err := rows.Scan(&part, &org, &version, &sch, &state, &pos, &tx, &stream, &streamVersion, &orgID, &typ, &sv, &payload,
			&kind, &actorID, &actorName, &reqID, &at, &via); err != nil {
			return Snapshot{}, false, nil, fmt.Errorf("reading stream %s: %w", streamID, err)
		}
		if part == 0 {
			found = true
			snap.OrgID, snap.Version, snap.Schema, snap.State = org.String, int(version.Int32), int(sch.Int32), state
			continue
		}
		events = append(events, Event{Position: pos.Int64, TxID: uint64(tx.Int64), StreamID: stream.String, StreamVersion: int(streamVersion.Int32),
			OrgID: orgID.String, Type: typ.String, SchemaVersion: int(sv.Int16), Payload: payload,
			Actor:     domain.Actor{Kind: domain.ActorKind(kind.String), ID: actorID.String, Name: actorName.String},
			RequestID: reqID.String, OccurredAt: at.Time, Via: via.String})
	}
	if err := rows.Err(); err != nil {
		return Snapshot{}, false, nil, fmt.Errorf("reading stream %s: %w", streamID, err)
	}
	return snap, found, events, nil
}
