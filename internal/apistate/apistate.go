// Package apistate owns the HTTP API's own tables: the idempotency keys of
// creating requests (idempotency_keys: the key, a hash of the request and,
// once done, the sealed response) and the sign-in throttle's counters
// (login_throttle), with their pruning. The API calls these functions; no
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

// Throttle is one key of the sign-in throttle with its limit: at most
// Limit counted attempts in any Window (a sliding window: the key's row
// keeps the times of its attempts younger than the window).
type Throttle struct {
	Key    string
	Limit  int
	Window time.Duration
}

// TakeLoginAttempt counts one attempt on each throttle, at now. It returns
// 0 when every throttle allowed it, else how long until the one that refused
// allows an attempt again: until its oldest counted attempt is Window old
// (nothing is counted then, on any of them).
func TakeLoginAttempt(ctx context.Context, q eventstore.Querier, now time.Time, throttles ...Throttle) (time.Duration, error) {
	for i, th := range throttles {
		since := now.Add(-th.Window)
		var key string
		err := q.QueryRow(ctx, `INSERT INTO login_throttle AS t (key, attempts) VALUES ($1, ARRAY[$2::timestamptz])
			ON CONFLICT (key) DO UPDATE SET attempts = ARRAY(SELECT a FROM unnest(t.attempts) a WHERE a > $3 ORDER BY a) || $2::timestamptz
			WHERE (SELECT count(*) FROM unnest(t.attempts) a WHERE a > $3) < $4 RETURNING key`,
			th.Key, now, since, th.Limit).Scan(&key)
		if err == nil {
			continue
		}
		if err != pgx.ErrNoRows {
			return 0, err
		}
		// Refused: give back what the others counted, and say when.
		if err := refund(ctx, q, throttles[:i]...); err != nil {
			return 0, err
		}
		var oldest time.Time
		if err := q.QueryRow(ctx, `SELECT min(a) FROM login_throttle, unnest(attempts) a WHERE key = $1 AND a > $2`, th.Key, since).Scan(&oldest); err != nil {
			return 0, err
		}
		return max(time.Second, oldest.Add(th.Window).Sub(now)), nil
	}
	return 0, nil
}

// GiveBackLoginAttempt uncounts an attempt that was never checked (the
// password was not compared) from each throttle: its latest attempt.
func GiveBackLoginAttempt(ctx context.Context, q eventstore.Querier, throttles ...Throttle) error {
	return refund(ctx, q, throttles...)
}

// LoginSucceeded forgets the pair's attempts and uncounts the attempt from
// the others.
func LoginSucceeded(ctx context.Context, q eventstore.Querier, pair Throttle, others ...Throttle) error {
	if _, err := q.Exec(ctx, `DELETE FROM login_throttle WHERE key = $1`, pair.Key); err != nil {
		return err
	}
	return refund(ctx, q, others...)
}

func refund(ctx context.Context, q eventstore.Querier, throttles ...Throttle) error {
	for _, th := range throttles {
		if _, err := q.Exec(ctx, `UPDATE login_throttle SET attempts = attempts[1:cardinality(attempts) - 1] WHERE key = $1`, th.Key); err != nil {
			return err
		}
	}
	return nil
}

// PruneLoginAttempts deletes the keys with no attempt in the last day (no
// window is longer).
func PruneLoginAttempts(ctx context.Context, q eventstore.Querier) error {
	_, err := q.Exec(ctx, `DELETE FROM login_throttle WHERE cardinality(attempts) = 0 OR attempts[cardinality(attempts)] < now() - interval '1 day'`)
	return err
}
