package projections

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// The projections run the same statements batch after batch on pooled
// connections, where pgx prepares them once. From its sixth run on,
// PostgreSQL may give a prepared statement a generic plan and keep it: a
// plan made while a table was small (a rebuild's or a new instance's first
// batches) then scans the table however large it grows, until statistics
// are gathered again, and every batch pays for it. The handler's
// transaction plans each run (planEachRun); these tests make the plans
// while the tables are small, grow them, and count the scans.

// withoutPlanEachRun runs the tests as the handler ran before planEachRun
// (to see them fail: go test -run AsTablesGrow -args -generic).
var withoutPlanEachRun = flag.Bool("generic", false, "run the plan tests without planEachRun")

// world writes envs environments and services and perService deployments
// of each, in one organisation and project, and returns some deployment ids.
func world(t *testing.T, pool *pgxpool.Pool, envs, perService int) []string {
	t.Helper()
	ctx := context.Background()
	var org, project string
	err := pool.QueryRow(ctx, `SELECT id::text FROM organisations WHERE name = 'acme'`).Scan(&org)
	if err == pgx.ErrNoRows {
		org, project = uuid.NewString(), uuid.NewString()
		_, err = pool.Exec(ctx, `INSERT INTO organisations (id, name, created_at) VALUES ($1, 'acme', now())`, org)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO projects (id, org_id, name, created_at) VALUES ($1, $2, 'shop', now())`, project, org)
	} else if err == nil {
		err = pool.QueryRow(ctx, `SELECT id::text FROM projects WHERE org_id = $1`, org).Scan(&project)
	}
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO environments (id, org_id, project_id, name, cluster_id, protected, created_at)
		SELECT gen_random_uuid(), $1, $2, 'env-' || gen_random_uuid(), gen_random_uuid(), false, now() FROM generate_series(1, $3::int)`, org, project, envs)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO services (id, org_id, project_id, name, source, processes, created_at, updated_at)
		SELECT gen_random_uuid(), $1, $2, 'svc-' || gen_random_uuid(), '{}', '[]', now(), now() FROM generate_series(1, $3::int)`, org, project, envs)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `INSERT INTO deployments (id, org_id, project_id, environment_id, service_id, release_id, status, reason, requested_at, updated_at, requested_by)
		SELECT gen_random_uuid(), $1, $2, e.id, s.id, gen_random_uuid(), 'succeeded', 'deploy', now(), now(), 'ada'
		FROM (SELECT id, row_number() OVER () r FROM environments) e
		JOIN (SELECT id, row_number() OVER () r FROM services) s ON s.r = e.r, generate_series(1, $3::int) g
		WHERE NOT EXISTS (SELECT 1 FROM deployments d WHERE d.environment_id = e.id)
		RETURNING id::text`, org, project, perService)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// seqScans runs do in a transaction on conn, set up as the projections'
// handler sets up its own, and returns how many sequential scans do made of
// each table.
func seqScans(t *testing.T, conn *pgxpool.Conn, do func(tx pgx.Tx)) map[string]int64 {
	t.Helper()
	return seqScansPlanned(t, conn, !*withoutPlanEachRun, do)
}

// seqScansPlanned is seqScans with the handler's planning (planEachRun) or,
// for statements outside the handler, without.
func seqScansPlanned(t *testing.T, conn *pgxpool.Conn, eachRun bool, do func(tx pgx.Tx)) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	if eachRun {
		require.NoError(t, planEachRun(ctx, tx))
	}
	// The backend's counts not yet flushed, earlier transactions' included:
	// what do adds is the difference.
	read := func() map[string]int64 {
		rows, err := tx.Query(ctx, `SELECT relname::text, seq_scan FROM pg_stat_xact_user_tables
			WHERE relname IN ('organisations', 'projects', 'environments', 'services', 'deployments')`)
		require.NoError(t, err)
		out := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			require.NoError(t, rows.Scan(&name, &n))
			out[name] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := read()
	do(tx)
	after := read()
	for k := range after {
		after[k] -= before[k]
	}
	return after
}

// small analyses the tables while they are small (a new instance), so that
// the plans made now are the plans of small tables; autovacuum is off for
// them, as if it had not come round yet after they grew.
func small(t *testing.T, pool *pgxpool.Pool) []string {
	ctx := context.Background()
	for _, tbl := range []string{"organisations", "projects", "environments", "services", "deployments"} {
		_, err := pool.Exec(ctx, `ALTER TABLE `+tbl+` SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
	}
	ids := world(t, pool, 2, 2)
	for _, tbl := range []string{"organisations", "projects", "environments", "services", "deployments"} {
		_, err := pool.Exec(ctx, `ANALYZE `+tbl)
		require.NoError(t, err)
	}
	return ids
}

// The audit log names a deployment by organisation/project/environment/
// service. Found while measuring deployments: the lookup's generic plan
// hashed every environment and service for the few deployments of a batch.
func TestAuditDeploymentNamesStayLookupsAsTablesGrow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	ids := small(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	a := newAudit()
	resolve := func(tx pgx.Tx, ids []string) {
		require.NoError(t, a.resolve(ctx, tx, map[string][]string{"deployment": ids}))
	}
	for range 10 {
		a.names = map[string]string{}
		seqScans(t, conn, func(tx pgx.Tx) { resolve(tx, ids[:1]) })
	}

	grown := world(t, pool, 5000, 20)
	a.names = map[string]string{}
	scans := seqScans(t, conn, func(tx pgx.Tx) { resolve(tx, grown[:3]) })
	for _, tbl := range []string{"deployments", "environments", "services"} {
		require.Zero(t, scans[tbl], "the lookup scanned %s, %d deployments long, for 3 deployments (scans: %v)", tbl, len(grown), scans)
	}
	require.Len(t, a.names, 3)
	for _, id := range grown[:3] {
		require.Regexp(t, `^acme/shop/env-[0-9a-f-]+/svc-[0-9a-f-]+$`, a.names["deployment:"+id])
	}
}

// The statement that updates deployments (a stage reached, a deployment
// finished) must find its rows by primary key however large the table grew
// after its plan was first made.
func TestDeploymentUpdatesStayLookupsAsTablesGrow(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	ids := small(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	update := func(tx pgx.Tx, ids []string, status string) {
		h := newHistory()
		at := time.Now()
		for _, id := range ids {
			h.deployments.update([]any{id}, map[string]any{"status": status, "updated_at": at, "finished_at": at})
		}
		b := &pgx.Batch{}
		h.deployments.queue(b)
		require.Len(t, b.QueuedQueries, 1)
		require.NoError(t, tx.SendBatch(ctx, b).Close())
	}
	for i := range 10 {
		seqScans(t, conn, func(tx pgx.Tx) { update(tx, ids[:1], fmt.Sprint("s", i)) })
	}

	grown := world(t, pool, 5000, 20)
	var status string
	scans := seqScans(t, conn, func(tx pgx.Tx) {
		update(tx, grown[:3], "failed")
		require.NoError(t, tx.QueryRow(ctx, `SELECT status FROM deployments WHERE id = $1`, grown[2]).Scan(&status))
	})
	require.Zero(t, scans["deployments"], "the update scanned deployments, %d long, for 3 rows (scans: %v)", len(grown), scans)
	require.Equal(t, "failed", status)
}

// An agent's connect looks up its cluster's environments (the revisions it
// needs). Found with 10,000 agents: without an index on the cluster the
// lookup scanned every environment, 1.8 ms each, for each of 10,000 agents
// reconnecting at once. It must stay a lookup, also once the statement's
// plan is the generic one (after five runs on a connection).
func TestAClustersEnvironmentsAreFoundWithoutScanningEveryOne(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	world(t, pool, 5000, 1)
	_, err := pool.Exec(ctx, `ANALYZE environments`)
	require.NoError(t, err)
	var env, cluster string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id::text, cluster_id::text FROM environments LIMIT 1`).Scan(&env, &cluster))
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for run := range 8 {
		var found []EnvironmentCluster
		// As the agent link runs it: on the pool, planned as PostgreSQL
		// chooses (generic from the sixth run).
		scans := seqScansPlanned(t, conn, false, func(tx pgx.Tx) {
			found, err = EnvironmentsOnClusters(ctx, tx, []string{cluster})
			require.NoError(t, err)
		})
		require.Zero(t, scans["environments"], "run %d scanned all 5,000 environments for one cluster's", run)
		require.Equal(t, []EnvironmentCluster{{EnvironmentID: env, ClusterID: cluster}}, found)
	}
}
