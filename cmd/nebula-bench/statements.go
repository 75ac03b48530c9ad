package main

import (
	"context"
	"log"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
)

// The database's side of a benchmark (-statements N): pg_stat_statements,
// loaded into the benchmark's own cluster, reset before each benchmark and
// read after it, over every database of the cluster. A CPU profile of this
// process shows only what Go spends; most of a rebuild's or an append's
// time is PostgreSQL's.

func statementsConn(ctx context.Context, c *pgcluster.Cluster) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

func resetStatements(ctx context.Context, c *pgcluster.Cluster) {
	conn, err := statementsConn(ctx, c)
	if err != nil {
		log.Printf("statements: %v", err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SELECT pg_stat_statements_reset()`); err != nil {
		log.Printf("statements: %v", err)
	}
}

// topStatements logs the n statements with the most execution time since
// the last reset: total and mean milliseconds, calls, rows.
func topStatements(ctx context.Context, c *pgcluster.Cluster, n int) {
	conn, err := statementsConn(ctx, c)
	if err != nil {
		log.Printf("statements: %v", err)
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT total_exec_time, mean_exec_time, calls, rows, total_plan_time, query
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		log.Printf("statements: %v", err)
		return
	}
	defer rows.Close()
	log.Printf("statements: the %d with the most execution time (ms total, ms mean, calls, rows, ms planning):", n)
	for rows.Next() {
		var total, mean, plan float64
		var calls, nrows int64
		var q string
		if err := rows.Scan(&total, &mean, &calls, &nrows, &plan, &q); err != nil {
			log.Printf("statements: %v", err)
			return
		}
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 160 {
			q = q[:160] + "…"
		}
		log.Printf("  %10.0f %8.2f %8d %9d %8.0f  %s", total, mean, calls, nrows, plan, q)
	}
}
