// Package apistate owns the HTTP API's own tables: the idempotency keys of
// creating requests (idempotency_keys: the key, a hash of the request and,
// once done, the sealed response) and the sign-in throttle's counters
// (login_attempts), with their pruning. The API calls these functions; no
// other package writes SQL against these tables.
package apistate

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ClaimIdempotencyKey records a request under its caller's key; false when
// the key is already there (the request was made before, or is being made).
func ClaimIdempotencyKey(ctx context.Context, q eventstore.Querier, principal, key, method, path, bodyHash string) (bool, error) {
	tag, err := q.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, method, path, body_hash)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, principal, key, method, path, bodyHash)
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}

// Kept is what an idempotency key holds: the hash of its request and, once
// the request is done, its status and sealed response (Status nil: still in
// progress; ResponseKey nil: kept without a body).
type Kept struct {
	BodyHash    string
	Status      *int
	Response    []byte
	ResponseKey *string
}

// IdempotencyKey returns what a key holds; false when there is no such key
// (it was released meanwhile).
func IdempotencyKey(ctx context.Context, q eventstore.Querier, principal, key string) (Kept, bool, error) {
	var k Kept
	err := q.QueryRow(ctx, `SELECT body_hash, status, response, response_key::text FROM idempotency_keys WHERE principal = $1 AND key = $2`,
		principal, key).Scan(&k.BodyHash, &k.Status, &k.Response, &k.ResponseKey)
	if errors.Is(err, pgx.ErrNoRows) {
		return Kept{}, false, nil
	}
	if err != nil {
		return Kept{}, false, err
	}
	return k, true, nil
}

// ReleaseIdempotencyKey forgets a key whose request failed: it may be
// retried with the same key.
func ReleaseIdempotencyKey(ctx context.Context, q eventstore.Querier, principal, key string) error {
	_, err := q.Exec(ctx, `DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2`, principal, key)
	return err
}

// KeepStatus keeps a done request's status without a body (its response
// could not be sealed: a replay answers 410).
func KeepStatus(ctx context.Context, q eventstore.Querier, principal, key string, status int) error {
	_, err := q.Exec(ctx, `UPDATE idempotency_keys SET status = $3 WHERE principal = $1 AND key = $2`, principal, key, status)
	return err
}

// KeepResponse keeps a done request's status and its response, sealed with
// data key dataKeyID.
func KeepResponse(ctx context.Context, q eventstore.Querier, principal, key string, status int, sealed []byte, dataKeyID string) error {
	_, err := q.Exec(ctx, `UPDATE idempotency_keys SET status = $3, response = $4, response_key = $5::uuid WHERE principal = $1 AND key = $2`,
		principal, key, status, sealed, dataKeyID)
	return err
}

// PruneIdempotencyKeys deletes the keys older than 24 hours and returns the
// data keys of their responses, which the caller deletes with them (in the
// same transaction: seal.DeleteDataKeys).
func PruneIdempotencyKeys(ctx context.Context, q eventstore.Querier) ([]string, error) {
	rows, err := q.Query(ctx, `DELETE FROM idempotency_keys WHERE created_at < now() - interval '24 hours' RETURNING response_key::text`)
	if err != nil {
		return nil, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range keys {
		if k != nil {
			out = append(out, *k)
		}
	}
	return out, nil
}

// CountLoginAttempts counts one sign-in attempt on each of the counters
// (of the window starting at window) and returns each counter's count.
func CountLoginAttempts(ctx context.Context, q eventstore.Querier, window time.Time, pair, address string) (map[string]int, error) {
	rows, err := q.Query(ctx, `INSERT INTO login_attempts (key, window_start, attempts) VALUES ($1, $3, 1), ($2, $3, 1)
		ON CONFLICT (key, window_start) DO UPDATE SET attempts = login_attempts.attempts + 1 RETURNING key, attempts`,
		pair, address, window)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var key string
		var n int
		if err := rows.Scan(&key, &n); err != nil {
			return nil, err
		}
		out[key] = n
	}
	return out, rows.Err()
}

// LoginSucceeded takes a successful attempt back: the pair's counter starts
// again, and the address's counts one attempt less.
func LoginSucceeded(ctx context.Context, q eventstore.Querier, window time.Time, pair, address string) error {
	_, err := q.Exec(ctx, `WITH p AS (DELETE FROM login_attempts WHERE key = $1 AND window_start = $3)
			UPDATE login_attempts SET attempts = attempts - 1 WHERE key = $2 AND window_start = $3 AND attempts > 0`, pair, address, window)
	return err
}

// UncountLoginAttempt takes back an attempt that was never checked: both
// counters count one attempt less.
func UncountLoginAttempt(ctx context.Context, q eventstore.Querier, window time.Time, pair, address string) error {
	_, err := q.Exec(ctx, `UPDATE login_attempts SET attempts = attempts - 1 WHERE key IN ($1, $2) AND window_start = $3 AND attempts > 0`,
		pair, address, window)
	return err
}

// PruneLoginAttempts deletes the counters of windows that started more
// than a day ago.
func PruneLoginAttempts(ctx context.Context, q eventstore.Querier) error {
	_, err := q.Exec(ctx, `DELETE FROM login_attempts WHERE window_start < now() - interval '1 day'`)
	return err
}
