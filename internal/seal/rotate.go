package seal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultRotateBatch is how many data keys RotateBatches re-wraps in one
// transaction unless told otherwise: short transactions (the commit-order
// readers wait for the oldest open one) and few round trips.
const DefaultRotateBatch = 500

// RotateOptions tune RotateBatches.
type RotateOptions struct {
	// BatchSize is how many data keys one transaction re-wraps
	// (DefaultRotateBatch when 0).
	BatchSize int
	// Pause waits this long between batches, to spare a busy database.
	Pause time.Duration
	// Progress is told after each committed batch how many data keys this
	// run has re-wrapped so far.
	Progress func(rewrapped int)
}

// ErrRetiredKey marks a master key that a finished rotation retired.
var ErrRetiredKey = errors.New("master key was retired by a rotation")

// Rotate re-wraps every data key wrapped by from with to (RotateBatches
// with the default options) and returns how many it re-wrapped.
func Rotate(ctx context.Context, pool *pgxpool.Pool, from, to MasterKey) (int, error) {
	return RotateBatches(ctx, pool, from, to, RotateOptions{})
}

// RotateBatches re-wraps every data key wrapped by from with to, a batch
// per transaction, and returns how many it re-wrapped (the caller reports
// it). It touches only data_keys: the data keys themselves, and so every
// sealed value in every event, stay as they are. Each row's master key id
// and wrapped key change together in one UPDATE, so a reader holding both
// keys (New with from as a previous key) opens every value throughout.
//
// It is idempotent and resumable: a batch commits whole or not at all, a
// run killed in the middle leaves some keys under from and the rest under
// to, and running it again re-wraps what is left. An UPDATE only touches a
// row still recorded as wrapped by from, so no key is wrapped twice, and
// concurrent runs lock each other's batches (FOR UPDATE) rather than
// re-wrapping the same rows.
//
// When no data key is left under from, from is recorded as retired
// (retired_master_keys): a control plane refuses to start with it as its
// key, and no rotation takes it as a new key again.
//
// A key recorded as wrapped by from that from cannot unwrap fails its batch
// (nothing of that batch is written) with an error wrapping ErrUnreadable
// and naming it. So does a from that wraps nothing while the database holds
// keys of master keys other than to, which is what a mistyped old key looks
// like. A database with nothing left under from rotates nothing and is not
// an error: the rotation is done.
func RotateBatches(ctx context.Context, pool *pgxpool.Pool, from, to MasterKey, opts RotateOptions) (int, error) {
	if from.IsZero() || to.IsZero() {
		return 0, errors.New("rotating master key: both the old and the new master key are required")
	}
	if from.Equal(to) || from.ID() == to.ID() {
		return 0, fmt.Errorf("rotating master key: old and new master key are the same (%s)", from.ID())
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultRotateBatch
	}
	fail := func(err error) error { return fmt.Errorf("rotating master key %s to %s: %w", from.ID(), to.ID(), err) }
	retired, err := RetiredMasterKeys(ctx, pool)
	if err != nil {
		return 0, fail(err)
	}
	for _, r := range retired {
		if r.ID == to.ID() {
			return 0, fail(fmt.Errorf("%w: the new master key %s was rotated away on %s; generate a new one (nebula secret-key generate)",
				ErrRetiredKey, to.ID(), r.At.UTC().Format(time.RFC3339)))
		}
	}
	total := 0
	for {
		var n int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			n, err = rotateBatch(ctx, tx, from, to, batch)
			return err
		})
		if err != nil {
			return total, fail(err)
		}
		if n == 0 {
			break
		}
		total += n
		if opts.Progress != nil {
			opts.Progress(total)
		}
		if opts.Pause > 0 {
			select {
			case <-ctx.Done():
				return total, fail(ctx.Err())
			case <-time.After(opts.Pause):
			}
		}
	}
	if err := finish(ctx, pool, from, to); err != nil {
		return total, fail(err)
	}
	return total, nil
}

type wrappedRow struct {
	id      string
	wrapped []byte
}

// rotateBatch re-wraps up to limit data keys of from, in tx.
func rotateBatch(ctx context.Context, tx pgx.Tx, from, to MasterKey, limit int) (int, error) {
	// FOR UPDATE keeps a concurrent run from re-wrapping the same rows
	// between this read and the updates below; one that waited re-reads the
	// row and drops it, since it no longer names from.
	rows, err := tx.Query(ctx,
		`SELECT id::text, wrapped_key FROM data_keys WHERE master_key_id = $1 ORDER BY id LIMIT $2 FOR UPDATE`, from.ID(), limit)
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
		return 0, nil
	}
	// Unwrap and re-wrap everything before writing anything, so a bad key
	// fails fast without a half-sent batch.
	batch := &pgx.Batch{}
	for _, k := range keys {
		rewrapped, err := rewrap(from, to, k)
		if err != nil {
			return 0, err
		}
		batch.Queue(`UPDATE data_keys SET master_key_id = $2, wrapped_key = $3 WHERE id = $1::uuid AND master_key_id = $4`,
			k.id, to.ID(), rewrapped, from.ID())
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

// finish runs once nothing is left under from: it tells a wrong old key
// (the database holds keys of a third master key and none of from) from a
// finished rotation, and records from as retired.
func finish(ctx context.Context, pool *pgxpool.Pool, from, to MasterKey) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		present, err := listMasterKeyIDs(ctx, tx)
		if err != nil {
			return err
		}
		if slices.Contains(present, from.ID()) {
			// Sealed under from since the last batch (a replica still
			// running with the old key alone): not done.
			return fmt.Errorf("data keys were wrapped by %s while rotating: a control plane still runs with it as %s; give every replica the new key and run the rotation again",
				from.ID(), EnvKey)
		}
		var others []string
		for _, id := range present {
			if id != to.ID() {
				others = append(others, id)
			}
		}
		if len(others) > 0 {
			var known bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM retired_master_keys WHERE master_key_id = $1)`, from.ID()).Scan(&known); err != nil {
				return fmt.Errorf("reading retired master keys: %w", err)
			}
			if !known {
				return fmt.Errorf("%w: no data key is wrapped by the old master key %s; the database holds keys of %v",
					ErrUnreadable, from.ID(), present)
			}
		}
		if len(present) == 0 {
			// An empty database: nothing was ever wrapped by from.
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO retired_master_keys (master_key_id, replaced_by) VALUES ($1, $2) ON CONFLICT (master_key_id) DO NOTHING`,
			from.ID(), to.ID()); err != nil {
			return fmt.Errorf("recording %s as retired: %w", from.ID(), err)
		}
		return nil
	})
}

// RetiredKey is a master key a finished rotation retired.
type RetiredKey struct {
	ID, ReplacedBy string
	At             time.Time
}

// RetiredMasterKeys lists the retired master keys, oldest first.
func RetiredMasterKeys(ctx context.Context, pool *pgxpool.Pool) ([]RetiredKey, error) {
	rows, err := pool.Query(ctx, `SELECT master_key_id, replaced_by, retired_at FROM retired_master_keys ORDER BY retired_at, master_key_id`)
	if err != nil {
		return nil, fmt.Errorf("reading retired master keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RetiredKey, error) {
		var k RetiredKey
		err := r.Scan(&k.ID, &k.ReplacedBy, &k.At)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("reading retired master keys: %w", err)
	}
	return out, nil
}

// KeyCount is how many data keys one master key wraps.
type KeyCount struct {
	MasterKeyID string
	DataKeys    int
}

// CountByMasterKey returns how many data keys each master key wraps, by
// master key id. It needs no master key.
func CountByMasterKey(ctx context.Context, pool *pgxpool.Pool) ([]KeyCount, error) {
	rows, err := pool.Query(ctx, `SELECT master_key_id, count(*) FROM data_keys GROUP BY master_key_id ORDER BY master_key_id COLLATE "C"`)
	if err != nil {
		return nil, fmt.Errorf("counting data keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyCount, error) {
		var k KeyCount
		err := r.Scan(&k.MasterKeyID, &k.DataKeys)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("counting data keys: %w", err)
	}
	return out, nil
}
