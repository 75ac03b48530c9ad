package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// replaySchema names the schemas that hold the rebuilt tables while a replay
// runs, one per projector (replaySchemaOf); none outlives its transaction.
const replaySchema = "nebula_replay"

// TableReport compares one live table with its rebuild.
type TableReport struct {
	Table      string `json:"table"`
	Equal      bool   `json:"equal"`
	LiveRows   int64  `json:"liveRows"`
	ReplayRows int64  `json:"replayRows"`
	// FirstDifference names the first row (by primary key) that differs.
	FirstDifference string `json:"firstDifference,omitempty"`
}

// ProjectionReport compares one projection.
type ProjectionReport struct {
	Projection string        `json:"projection"`
	Equal      bool          `json:"equal"`
	Tables     []TableReport `json:"tables"`
}

// ReplayReport is what the replay tool found.
type ReplayReport struct {
	Events int64 `json:"events"`
	// Lag is what the live projections had not handled when the replay
	// began: a replay compares what was projected, so a projection stuck
	// behind the event store fails the replay even when the rows agree.
	Lag         Lag                `json:"lag"`
	Duration    time.Duration      `json:"duration"`
	Projections []ProjectionReport `json:"projections"`
	Chain       ChainReport        `json:"chain"`
}

// Equal reports whether every projection equals its rebuild and the audit chain holds.
func (r ReplayReport) Equal() bool {
	if !r.Lag.Complete() {
		return false
	}
	for _, p := range r.Projections {
		if !p.Equal {
			return false
		}
	}
	return r.Chain.OK
}

// Replay rebuilds every projection from event 0 into fresh tables and compares
// each with the live one, row by row (row hashes, in primary key order). The
// live projections stand still meanwhile (their subscription lock is held), and
// the rebuild reads exactly the events the live ones have handled. Each
// projector is rebuilt and compared on a connection of its own, all seeing
// the live tables as this transaction does (rebuild_parallel.go). Nothing is
// left behind: the rebuilt tables vanish with their transactions.
func Replay(ctx context.Context, pool *pgxpool.Pool) (ReplayReport, error) {
	start := time.Now()
	var rep ReplayReport
	// Everything committed before the replay must have been projected; a
	// little time is given to the live projections to get there.
	lag, err := WaitCaughtUp(ctx, pool, 10*time.Second)
	if err != nil {
		return rep, fmt.Errorf("replay: %w", err)
	}
	rep.Lag = lag
	tx, err := pool.Begin(ctx)
	if err != nil {
		return rep, fmt.Errorf("replay: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := eventstore.LockSubscription(ctx, tx, SubscriptionName); err != nil {
		return rep, err
	}
	upTo, handled, err := eventstore.Checkpoint(ctx, tx, SubscriptionName)
	if err != nil {
		return rep, err
	}
	if rep.Projections, err = rebuild(ctx, pool, tx, upTo, 10_000, true); err != nil {
		return rep, err
	}
	rep.Events = handled
	if rep.Chain, err = VerifyChain(ctx, tx); err != nil {
		return rep, err
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// Rebuild projects every event (up to the live checkpoint) into fresh tables
// and throws them away; it returns how many events it projected. The
// benchmark of projection speed uses it.
func Rebuild(ctx context.Context, pool *pgxpool.Pool, batchSize int) (int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	upTo, n, err := eventstore.Checkpoint(ctx, tx, SubscriptionName)
	if err != nil {
		return 0, err
	}
	if _, err := rebuild(ctx, pool, tx, upTo, batchSize, false); err != nil {
		return 0, err
	}
	return n, nil
}

type fetched struct {
	batch []Decoded
	err   error
}

// prefetch reads every event up to upTo in commit order, decoded, into out.
func prefetch(ctx context.Context, pool *pgxpool.Pool, upTo eventstore.Cursor, batchSize int, out chan<- fetched) {
	defer close(out)
	order, err := loadReplayOrder(ctx, pool)
	if err != nil {
		out <- fetched{err: err}
		return
	}
	var after eventstore.Cursor
	for {
		events, err := eventstore.ReadBatch(ctx, pool, after, batchSize)
		if err != nil {
			out <- fetched{err: err}
			return
		}
		n := len(events)
		for i, e := range events {
			if beyond(e.Cursor(), upTo) {
				events = events[:i]
				break
			}
		}
		if len(events) == 0 {
			return
		}
		batch, err := decodeParallel(order.apply(events))
		select {
		case out <- fetched{batch: batch, err: err}:
		case <-ctx.Done():
			return
		}
		after = events[len(events)-1].Cursor()
		if err != nil || len(events) < n || after == upTo {
			return
		}
	}
}

func beyond(c, limit eventstore.Cursor) bool {
	return limit.Before(c)
}

func primaryKey(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1::regclass AND i.indisprimary
		ORDER BY array_position(i.indkey, a.attnum)`, table)
	if err != nil {
		return nil, fmt.Errorf("primary key of %s: %w", table, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

type rowHash struct{ key, hash string }

func tableHashes(ctx context.Context, tx pgx.Tx, qualified string, pk []string) ([]rowHash, error) {
	keyExpr := make([]string, len(pk))
	for i, c := range pk {
		keyExpr[i] = fmt.Sprintf("'%s=' || t.%s::text", c, c)
	}
	q := fmt.Sprintf(`SELECT concat_ws(' ', %s), md5(t::text) FROM %s t ORDER BY %s`,
		strings.Join(keyExpr, ", "), qualified, strings.Join(pk, ", "))
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("hashing rows of %s: %w", qualified, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (rowHash, error) {
		var h rowHash
		err := r.Scan(&h.key, &h.hash)
		return h, err
	})
}

// compareTable compares the live table (in schema live) with its rebuild
// (in schema rebuilt).
func compareTable(ctx context.Context, tx pgx.Tx, live, rebuilt, table string) (TableReport, error) {
	rep := TableReport{Table: table}
	// The live table's key: some rebuilt tables have no index at all
	// (rebuildUnindexed).
	pk, err := primaryKey(ctx, tx, pgx.Identifier{live, table}.Sanitize())
	if err != nil {
		return rep, err
	}
	a, err := tableHashes(ctx, tx, pgx.Identifier{live, table}.Sanitize(), pk)
	if err != nil {
		return rep, err
	}
	b, err := tableHashes(ctx, tx, pgx.Identifier{rebuilt, table}.Sanitize(), pk)
	if err != nil {
		return rep, err
	}
	rep.LiveRows, rep.ReplayRows = int64(len(a)), int64(len(b))
	rep.Equal = true
	for i := 0; i < len(a) || i < len(b); i++ {
		switch {
		case i >= len(a):
			rep.Equal, rep.FirstDifference = false, "row "+b[i].key+" is missing from the live table"
		case i >= len(b):
			rep.Equal, rep.FirstDifference = false, "row "+a[i].key+" is in the live table but no event makes it"
		case a[i].key != b[i].key:
			k := a[i].key
			if b[i].key < k {
				k = b[i].key
			}
			rep.Equal, rep.FirstDifference = false, "row "+k+" is in one table but not the other"
		case a[i].hash != b[i].hash:
			rep.Equal, rep.FirstDifference = false, "row "+a[i].key+" differs"
		}
		if !rep.Equal {
			break
		}
	}
	return rep, nil
}

// Verify waits (briefly) for the projections to handle every event committed
// so far, then verifies the audit chain: an intact chain that stops short of
// the event store, because a projection is stuck, is not "intact".
func Verify(ctx context.Context, pool *pgxpool.Pool) (ChainReport, error) {
	lag, err := WaitCaughtUp(ctx, pool, 10*time.Second)
	if err != nil {
		return ChainReport{}, err
	}
	rep, err := VerifyChain(ctx, pool)
	if err != nil {
		return rep, err
	}
	if !lag.Complete() {
		rep.Lag = &lag
		if rep.OK {
			rep.OK = false
			rep.Problem = "the projections are stuck: " + lag.String()
			if !lag.Behind() {
				rep.Problem = "the projections parked events they could not handle: " + lag.String()
			}
		}
	}
	return rep, nil
}

// VerifyChain walks the audit log in order, recomputing every hash and link,
// and checks the chain's head against the number of events projected, so a
// deleted tail is found too.
func VerifyChain(ctx context.Context, q eventstore.Querier) (ChainReport, error) {
	var rep ChainReport
	_, handled, err := eventstore.Checkpoint(ctx, q, SubscriptionName)
	if err != nil {
		return rep, err
	}
	rep.Events = handled
	rows, err := q.Query(ctx, `SELECT position, seq, coalesce(org_id::text, ''), actor_kind, actor_id, actor_name, action,
		target_kind, target_id, target, detail, occurred_at, request_id, via, prev_hash, hash FROM audit_log ORDER BY seq`)
	if err != nil {
		return rep, fmt.Errorf("reading the audit log: %w", err)
	}
	defer rows.Close()
	prev := ""
	for rows.Next() {
		var r AuditRow
		if err := rows.Scan(&r.Position, &r.Seq, &r.OrgID, &r.ActorKind, &r.ActorID, &r.ActorName, &r.Action,
			&r.TargetKind, &r.TargetID, &r.Target, &r.Detail, &r.OccurredAt, &r.RequestID, &r.Via, &r.PrevHash, &r.Hash); err != nil {
			return rep, err
		}
		rep.Rows++
		switch {
		case r.Seq != rep.Rows:
			rep.Problem = fmt.Sprintf("row seq %d follows seq %d: rows between them were deleted", r.Seq, rep.Rows-1)
		case r.PrevHash != prev:
			rep.Problem = fmt.Sprintf("row seq %d (position %d) does not link to the row before it", r.Seq, r.Position)
		case r.ComputeHash() != r.Hash:
			rep.Problem = fmt.Sprintf("row seq %d (position %d, %s) was changed after it was written", r.Seq, r.Position, r.Action)
		}
		if rep.Problem != "" {
			return rep, nil
		}
		prev = r.Hash
	}
	if err := rows.Err(); err != nil {
		return rep, err
	}
	if rep.Rows != handled {
		rep.Problem = fmt.Sprintf("the audit log has %d rows but %d events were projected: the last %d rows were deleted", rep.Rows, handled, handled-rep.Rows)
		if rep.Rows > handled {
			rep.Problem = fmt.Sprintf("the audit log has %d rows but only %d events were projected", rep.Rows, handled)
		}
		return rep, nil
	}
	rep.OK = true
	return rep, nil
}

// ErrNoRevision means the environment had no revision at that time.
var ErrNoRevision = errors.New("no revision")

// StateAt returns the revision an environment had at time at: which one,
// from the revision events themselves (the facts); its document rebuilt as
// DocumentAt does, checked against the hash its event recorded.
func StateAt(ctx context.Context, q eventstore.Querier, envID string, at time.Time) (api.Revision, error) {
	n, err := revisionAt(ctx, q, envID, at)
	if err != nil {
		return api.Revision{}, err
	}
	return DocumentAt(ctx, q, envID, n)
}

// RevisionNumber returns revision n of an environment (0 means the latest).
func RevisionNumber(ctx context.Context, q eventstore.Querier, envID string, n int) (api.Revision, error) {
	return DocumentAt(ctx, q, envID, n)
}

// ChainReport is the result of verifying the audit hash chain.
type ChainReport struct {
	OK     bool  `json:"ok"`
	Rows   int64 `json:"rows"`
	Events int64 `json:"events"`
	// Lag is set by Verify: events the projections had not handled.
	Lag *Lag `json:"lag,omitempty"`
	// Problem describes the first break, naming the row.
	Problem string `json:"problem,omitempty"`
}
