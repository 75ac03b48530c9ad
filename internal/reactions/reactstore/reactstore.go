// Package reactstore owns the reactions' own tables: their durable timers
// (reaction_timers, fired by the jobs leader) and the per-cluster build
// queue (build_queue, written in the reactions' subscription transaction
// with its checkpoint, so a batch handled again after a crash decides the
// same order). Package reactions calls these functions; no other package
// writes SQL against these tables.
package reactstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Timer is a durable timer: due at Due, of a kind, with its payload (JSON).
type Timer struct {
	Key, Kind string
	// OrgID is "" for a timer of no organisation.
	OrgID   string
	Due     time.Time
	Payload []byte
}

// TimerOp sets a timer (Due non-zero) or clears it (Due zero); Keep leaves
// an existing timer as it is.
type TimerOp struct {
	Timer
	Keep bool
}

// WriteTimers applies the timer changes in one round trip (in the
// subscription's transaction, through q).
func WriteTimers(ctx context.Context, q eventstore.Querier, ops []TimerOp) error {
	if len(ops) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, op := range ops {
		if op.Due.IsZero() {
			b.Queue(`DELETE FROM reaction_timers WHERE key = $1`, op.Key)
			continue
		}
		var org any
		if op.OrgID != "" {
			org = op.OrgID
		}
		conflict := `DO UPDATE SET due_at = EXCLUDED.due_at, payload = EXCLUDED.payload, org_id = EXCLUDED.org_id`
		if op.Keep {
			conflict = `DO NOTHING`
		}
		b.Queue(`INSERT INTO reaction_timers (key, org_id, kind, due_at, payload) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (key) `+conflict,
			op.Key, org, op.Kind, op.Due, op.Payload)
	}
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("writing timers: %w", err)
	}
	return nil
}

// DueTimers returns up to limit timers due by now, the earliest first.
func DueTimers(ctx context.Context, q eventstore.Querier, now time.Time, limit int) ([]Timer, error) {
	rows, err := q.Query(ctx, `SELECT key, coalesce(org_id::text, ''), kind, due_at, payload FROM reaction_timers
		WHERE due_at <= $1 ORDER BY due_at, key LIMIT `+strconv.Itoa(limit), now)
	if err != nil {
		return nil, fmt.Errorf("reading due timers: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Timer, error) {
		var t Timer
		return t, row.Scan(&t.Key, &t.OrgID, &t.Kind, &t.Due, &t.Payload)
	})
}

// DeleteFired deletes a fired timer, unless it was set again meanwhile to
// another due time.
func DeleteFired(ctx context.Context, q eventstore.Querier, key string, due time.Time) error {
	_, err := q.Exec(ctx, `DELETE FROM reaction_timers WHERE key = $1 AND due_at = $2`, key, due)
	return err
}

// QueuedBuild is a build in its cluster's queue.
type QueuedBuild struct {
	BuildID, OrgID, ClusterID, ServiceID, Branch string
	// Seq orders the queue (the position of the build's queued event).
	Seq            int64
	TimeoutSeconds int
}

// Enqueue puts a build in its cluster's queue, waiting (again, when it was
// there).
func Enqueue(ctx context.Context, q eventstore.Querier, b QueuedBuild) error {
	_, err := q.Exec(ctx, `INSERT INTO build_queue (build_id, org_id, cluster_id, service_id, branch, seq, running, timeout_seconds)
		VALUES ($1, $2, $3, $4, $5, $6, false, $7)
		ON CONFLICT (build_id) DO UPDATE SET seq = EXCLUDED.seq, running = false, timeout_seconds = EXCLUDED.timeout_seconds`,
		b.BuildID, b.OrgID, b.ClusterID, b.ServiceID, b.Branch, b.Seq, b.TimeoutSeconds)
	if err != nil {
		return fmt.Errorf("queueing build %s: %w", b.BuildID, err)
	}
	return nil
}

// OlderOnBranch returns the builds queued before b of the same service,
// cluster and branch, the oldest first.
func OlderOnBranch(ctx context.Context, q eventstore.Querier, b QueuedBuild) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT build_id::text FROM build_queue WHERE service_id = $1 AND cluster_id = $2 AND branch = $3
		AND build_id <> $4 AND seq < $5 ORDER BY seq`, b.ServiceID, b.ClusterID, b.Branch, b.BuildID, b.Seq)
	if err != nil {
		return nil, fmt.Errorf("finding the builds build %s supersedes: %w", b.BuildID, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Remove takes a build out of its queue.
func Remove(ctx context.Context, q eventstore.Querier, buildID string) error {
	_, err := q.Exec(ctx, `DELETE FROM build_queue WHERE build_id = $1`, buildID)
	return err
}

// Finish takes a build that is over out of its queue and returns its
// cluster; false when it was not queued.
func Finish(ctx context.Context, q eventstore.Querier, buildID string) (clusterID string, found bool, err error) {
	err = q.QueryRow(ctx, `DELETE FROM build_queue WHERE build_id = $1 RETURNING cluster_id::text`, buildID).Scan(&clusterID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("taking build %s out of its queue: %w", buildID, err)
	}
	return clusterID, true, nil
}

// Running counts the builds running on a cluster.
func Running(ctx context.Context, q eventstore.Querier, clusterID string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM build_queue WHERE cluster_id = $1 AND running`, clusterID).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting the running builds of cluster %s: %w", clusterID, err)
	}
	return n, nil
}

// Waiting is a queued build that does not run yet.
type Waiting struct{ BuildID, OrgID string }

// NextWaiting returns up to n of a cluster's waiting builds, the oldest
// first.
func NextWaiting(ctx context.Context, q eventstore.Querier, clusterID string, n int) ([]Waiting, error) {
	rows, err := q.Query(ctx, `SELECT build_id::text, org_id::text FROM build_queue WHERE cluster_id = $1 AND NOT running
		ORDER BY seq LIMIT `+strconv.Itoa(n), clusterID)
	if err != nil {
		return nil, fmt.Errorf("reading the queue of cluster %s: %w", clusterID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Waiting, error) {
		var w Waiting
		return w, row.Scan(&w.BuildID, &w.OrgID)
	})
}

// MarkRunning records that a queued build started.
func MarkRunning(ctx context.Context, q eventstore.Querier, buildID string) error {
	_, err := q.Exec(ctx, `UPDATE build_queue SET running = true WHERE build_id = $1`, buildID)
	return err
}

// Timeout returns a queued build's timeout in seconds; false when it is not
// queued.
func Timeout(ctx context.Context, q eventstore.Querier, buildID string) (int, bool, error) {
	var secs int
	err := q.QueryRow(ctx, `SELECT timeout_seconds FROM build_queue WHERE build_id = $1`, buildID).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading the timeout of build %s: %w", buildID, err)
	}
	return secs, true, nil
}
