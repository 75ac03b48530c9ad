package projections

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// A rebuild projects every event into fresh tables, each projector on a
// connection and in a transaction of its own, at once: the projectors write
// disjoint tables, and the one that read another's (the audit log's names)
// reads them from memory in a rebuild (rebuild_names.go). The events are read
// and decoded once, on another connection, and every batch goes to every
// projector; each keeps the batches in commit order, so each table is what
// the sequential rebuild made of it.
//
// Why no staging tables swapped in and no commit: nothing ever takes a
// rebuild's tables (Replay compares them with the live ones and the
// benchmark measures the speed), so every transaction rolls back and
// all-or-nothing holds trivially. What must hold is that all of them compare
// with one state of the live tables, the one the caller's transaction sees
// with the subscription locked: that transaction exports its snapshot
// (pg_export_snapshot) and every projector's transaction imports it
// (REPEATABLE READ, SET TRANSACTION SNAPSHOT) before reading anything.

// rebuildBuffer is how many batches a projector may fall behind the reading.
const rebuildBuffer = 2

// rebuildWorker is one projector's connection and transaction.
type rebuildWorker struct {
	p      projector
	schema string
	in     chan []Decoded
	report ProjectionReport
}

// replaySchemaOf is the schema a projector's rebuilt tables are in.
func replaySchemaOf(p projector) string {
	return replaySchema + "_" + strings.ReplaceAll(p.Name(), "-", "_")
}

func rebuild(ctx context.Context, pool *pgxpool.Pool, tx pgx.Tx, upTo eventstore.Cursor, batchSize int, compare bool) ([]ProjectionReport, error) {
	var live, snapshot string
	if err := tx.QueryRow(ctx, `SELECT current_schema(), pg_export_snapshot()`).Scan(&live, &snapshot); err != nil {
		return nil, fmt.Errorf("preparing the rebuild: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	procs := newProjectors()
	workers := make([]*rebuildWorker, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		if a, ok := p.(*audit); ok {
			a.mem = newAuditMemory()
		}
		w := &rebuildWorker{p: p, schema: replaySchemaOf(p), in: make(chan []Decoded, rebuildBuffer)}
		workers[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(ctx, pool, live, snapshot, compare); err != nil {
				cancel(fmt.Errorf("projection %s: %w", p.Name(), err))
				// Keep taking batches so the reading never waits for it.
				for range w.in {
				}
			}
		}()
	}
	err := fanOut(ctx, pool, upTo, batchSize, workers)
	for _, w := range workers {
		close(w.in)
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	reports := make([]ProjectionReport, len(workers))
	for i, w := range workers {
		reports[i] = w.report
	}
	return reports, nil
}

// fanOut reads and decodes every event up to upTo (on its own connection,
// the next batch while the projectors handle this one) and hands each batch
// to every worker.
func fanOut(ctx context.Context, pool *pgxpool.Pool, upTo eventstore.Cursor, batchSize int, workers []*rebuildWorker) error {
	if upTo == (eventstore.Cursor{}) {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan fetched, 2)
	go prefetch(ctx, pool, upTo, batchSize, batches)
	for f := range batches {
		if f.err != nil {
			return f.err
		}
		for _, w := range workers {
			select {
			case w.in <- f.batch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return ctx.Err()
}

// run rebuilds one projector's tables in a transaction on a connection of
// its own, seeing the live tables as the snapshot does, and compares them
// with the live ones when asked. Its transaction always rolls back.
func (w *rebuildWorker) run(ctx context.Context, pool *pgxpool.Pool, live, snapshot string, compare bool) error {
	// A connection of its own rather than one of the pool's: the pool may
	// be smaller than the projectors plus the reading.
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	stmts := []string{
		`SET TRANSACTION SNAPSHOT '` + snapshot + `'`,
		// As the live projections plan (planEachRun): the rebuilt tables
		// grow from empty, and a generic plan made while they were small
		// would scan them whole in every later batch.
		`SET LOCAL plan_cache_mode = force_custom_plan`,
		`DROP SCHEMA IF EXISTS ` + w.schema + ` CASCADE`,
		`CREATE SCHEMA ` + w.schema,
	}
	for _, t := range w.p.Tables() {
		like := "INCLUDING ALL"
		if rebuildUnindexed[t] {
			like = "INCLUDING ALL EXCLUDING INDEXES"
		}
		stmts = append(stmts, fmt.Sprintf(`CREATE UNLOGGED TABLE %s.%s (LIKE %s.%s %s)`, w.schema, t, pgx.Identifier{live}.Sanitize(), t, like))
	}
	// Unqualified names now resolve to the rebuilt tables first.
	stmts = append(stmts, fmt.Sprintf(`SET LOCAL search_path TO %s, %s`, w.schema, pgx.Identifier{live}.Sanitize()))
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("preparing the rebuild: %w", err)
		}
	}
	if err := w.dropUnusedIndexes(ctx, tx, live); err != nil {
		return err
	}
	for batch := range w.in {
		if err := w.p.Project(ctx, tx, batch); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.report = ProjectionReport{Projection: w.p.Name(), Equal: true}
	if !compare {
		return nil
	}
	for _, t := range w.p.Tables() {
		tr, err := compareTable(ctx, tx, live, w.schema, t)
		if err != nil {
			return err
		}
		w.report.Equal = w.report.Equal && tr.Equal
		w.report.Tables = append(w.report.Tables, tr)
	}
	return nil
}

// rebuildUnindexed are the tables a rebuild writes with COPY alone and no
// statement of it reads: they are rebuilt without any index, not even their
// primary key and unique ones, whose upkeep was most of what PostgreSQL spent
// on them (the audit log's two, for a million rows). What those constraints
// guard still holds: a replay compares every rebuilt table with the live
// one, whose constraints hold, row for row in primary-key order (the live
// table's key), so a duplicate or a missing row is a difference.
var rebuildUnindexed = map[string]bool{"audit_log": true, "deployment_stages": true, "revisions": true, "releases": true}

// rebuildSkipsIndexes are the live indexes the rebuilt tables go without:
// they serve the API's reads, no statement of the projections uses them, and
// a rebuild's tables are compared, never read (the comparison hashes whole
// rows). Keeping them up cost a rebuild time on its largest tables; on the
// tables that keep indexes (not rebuildUnindexed), unique indexes and primary
// keys stay (the projections' upserts conflict on them), and so do the
// indexes the projections' own statements find rows by.
var rebuildSkipsIndexes = map[string][]string{
	"deployments": {"deployments_open"},
}

// dropUnusedIndexes drops the rebuilt tables' copies of rebuildSkipsIndexes
// (CREATE TABLE ... LIKE names its copies itself: they are found by what
// they index).
func (w *rebuildWorker) dropUnusedIndexes(ctx context.Context, tx pgx.Tx, live string) error {
	for _, t := range w.p.Tables() {
		for _, idx := range rebuildSkipsIndexes[t] {
			var copied string
			err := tx.QueryRow(ctx, `SELECT r.indexrelid::regclass::text FROM pg_index r, pg_index l
				WHERE l.indexrelid = to_regclass($1) AND r.indrelid = $2::regclass AND NOT r.indisunique
				AND r.indkey = l.indkey AND r.indclass = l.indclass
				AND coalesce(pg_get_expr(r.indexprs, r.indrelid), '') = coalesce(pg_get_expr(l.indexprs, l.indrelid), '')
				AND coalesce(pg_get_expr(r.indpred, r.indrelid), '') = coalesce(pg_get_expr(l.indpred, l.indrelid), '')`,
				pgx.Identifier{live, idx}.Sanitize(), pgx.Identifier{w.schema, t}.Sanitize()).Scan(&copied)
			if errors.Is(err, pgx.ErrNoRows) {
				continue // already gone from the live table: nothing to skip
			}
			if err != nil {
				return fmt.Errorf("finding the rebuilt copy of index %s: %w", idx, err)
			}
			if _, err := tx.Exec(ctx, `DROP INDEX `+copied); err != nil {
				return fmt.Errorf("dropping the rebuilt copy of index %s: %w", idx, err)
			}
		}
	}
	return nil
}

// decodeParallel decodes a batch on every core: decoding is most of the
// reading's time, and the reading feeds every projector.
func decodeParallel(events []eventstore.Event) ([]Decoded, error) {
	n := runtime.GOMAXPROCS(0)
	if n < 2 || len(events) < 1000 {
		return decodeBatch(events)
	}
	out := make([]Decoded, len(events))
	errs := make([]error, n)
	var wg sync.WaitGroup
	chunk := (len(events) + n - 1) / n
	for i := 0; i < n; i++ {
		lo, hi := i*chunk, min((i+1)*chunk, len(events))
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = decodeInto(out[lo:hi], events[lo:hi])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
