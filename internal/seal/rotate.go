package seal

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Rotate re-wraps every data key wrapped by from with to, in one
// transaction, and returns how many it re-wrapped (the caller logs it). It
// touches only data_keys: the data keys themselves, and so every sealed value
// in every event, stay as they are.
//
// Either all keys of from are re-wrapped or none is: a key recorded as
// wrapped by from that from cannot unwrap aborts the rotation with an error
// wrapping ErrUnreadable. So does a from that wraps nothing while the
// database holds keys of other master keys, which is what a mistyped old key
// looks like. An empty database rotates nothing and is not an error.
//
// Sealers still running with from keep sealing new values under from; run
// Rotate again once they have restarted with to (it re-wraps only what is
// left). A running Sealer keeps the data keys it has already unwrapped.
func Rotate(ctx context.Context, pool *pgxpool.Pool, from, to MasterKey) (int, error) {
	if from.IsZero() || to.IsZero() {
		return 0, errors.New("rotating master key: both the old and the new master key are required")
	}
	if from.Equal(to) || from.ID() == to.ID() {
		return 0, fmt.Errorf("rotating master key: old and new master key are the same (%s)", from.ID())
	}
	var n int
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		n, err = rotate(ctx, tx, from, to)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("rotating master key %s to %s: %w", from.ID(), to.ID(), err)
	}
	return n, nil
}

type wrappedRow struct {
	id      string
	wrapped []byte
}

func rotate(ctx context.Context, tx pgx.Tx, from, to MasterKey) (int, error) {
	// FOR UPDATE keeps a concurrent Rotate from re-wrapping the same rows
	// with yet another key between this read and the updates below.
	rows, err := tx.Query(ctx,
		`SELECT id::text, wrapped_key FROM data_keys WHERE master_key_id = $1 ORDER BY id FOR UPDATE`, from.ID())
	if err != nil {
		return 0, fmt.Errorf("locking data keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wrappedRow, error) {
		var w wrappedRow
		err := r.Scan(&w.id, &w.wrapped)
		return w, err
	})
	if err != nil {
		return 0, fmt.Errorf("locking data keys: %w", err)
	}
	if len(keys) == 0 {
		return 0, checkNothingToRotate(ctx, tx, from)
	}

	// Unwrap and re-wrap everything before writing anything, so a bad key
	// fails fast without a half-sent batch.
	batch := &pgx.Batch{}
	for _, k := range keys {
		rewrapped, err := rewrap(from, to, k)
		if err != nil {
			return 0, err
		}
		batch.Queue(`UPDATE data_keys SET master_key_id = $2, wrapped_key = $3 WHERE id = $1::uuid`,
			k.id, to.ID(), rewrapped)
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return 0, fmt.Errorf("updating %d data keys: %w", len(keys), err)
	}
	return len(keys), nil
}

func rewrap(from, to MasterKey, k wrappedRow) ([]byte, error) {
	dk, err := unwrapRaw(from, k.wrapped, k.id)
	if err != nil {
		return nil, fmt.Errorf("unwrapping data key %s with %s: %w: %w", k.id, from.ID(), ErrUnreadable, err)
	}
	defer clear(dk)
	out, err := wrapKey(to, dk, k.id)
	if err != nil {
		return nil, fmt.Errorf("wrapping data key %s with %s: %w", k.id, to.ID(), err)
	}
	return out, nil
}

// checkNothingToRotate tells an empty database (nothing to do) from an old
// key that wraps nothing while other keys do (almost surely the wrong key).
func checkNothingToRotate(ctx context.Context, tx pgx.Tx, from MasterKey) error {
	present, err := listMasterKeyIDs(ctx, tx)
	if err != nil {
		return err
	}
	if len(present) == 0 {
		return nil
	}
	return fmt.Errorf("%w: no data key is wrapped by the old master key %s; the database holds keys of %v",
		ErrUnreadable, from.ID(), present)
}
