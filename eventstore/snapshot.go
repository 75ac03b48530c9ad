package eventstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
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
