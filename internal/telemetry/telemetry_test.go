package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/transport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestLogsAreKeptSevenDaysInDailyPartitions(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	clk := testclock.New(time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC))
	s := telemetry.New(pool, clk.Now)
	org, cluster, envID := uuid.NewString(), uuid.NewString(), uuid.NewString()
	_, err := pool.Exec(ctx, `INSERT INTO environments VALUES ($1, $2, $2, 'staging', $3, false, now(), NULL)`, envID, org, cluster)
	require.NoError(t, err)
	src := telemetry.Source{OrgID: org, ClusterID: cluster}
	require.NoError(t, s.EnsurePartitions(ctx))
	batch := transport.Logs{EnvironmentID: envID, Service: "api", Release: 1, Pod: "api-1", Container: "web",
		Lines: []transport.LogLine{{Time: clk.Now(), Text: "hello"}, {Time: clk.Now().Add(time.Second), Text: "world"}, {Time: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC), Text: "skewed clock"}}}
	require.NoError(t, s.SaveLogs(ctx, src, batch))
	// Another cluster cannot write into this environment.
	require.NoError(t, s.SaveLogs(ctx, telemetry.Source{OrgID: org, ClusterID: uuid.NewString()}, batch))
	lines, err := s.Logs(ctx, envID, "api", 0, 100)
	require.NoError(t, err)
	require.Len(t, lines, 3)
	require.Equal(t, "hello", lines[0].Text)
	more, err := s.Logs(ctx, envID, "api", lines[1].ID, 100)
	require.NoError(t, err)
	require.Len(t, more, 1, "the cursor returns only newer lines")

	var def int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM log_lines_default`).Scan(&def))
	require.Zero(t, def, "every line is in a daily partition")

	clk.Set(clk.Now().Add(7 * 24 * time.Hour))
	n, err := s.DropExpired(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "seven days are kept")
	clk.Set(clk.Now().Add(24 * time.Hour))
	n, err = s.DropExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the day older than seven days is dropped, of container and of build logs")
	lines, err = s.Logs(ctx, envID, "api", 0, 100)
	require.NoError(t, err)
	require.Empty(t, lines)
}

func TestStatusReportReplacesTheLast(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	s := telemetry.New(pool, nil)
	org, cluster, envID := uuid.NewString(), uuid.NewString(), uuid.NewString()
	_, err := pool.Exec(ctx, `INSERT INTO environments VALUES ($1, $2, $2, 'staging', $3, false, now(), NULL)`, envID, org, cluster)
	require.NoError(t, err)
	src := telemetry.Source{OrgID: org, ClusterID: cluster}
	st := transport.Status{
		Nodes:     []transport.NodeStatus{{Name: "n1", Ready: true, CPU: "4", Memory: "8Gi"}, {Name: "n2", CPU: "4", Memory: "8Gi"}},
		Workloads: []transport.WorkloadStatus{{EnvironmentID: envID, Service: "api", Release: 1, Process: "web", Desired: 2, Ready: 1}, {EnvironmentID: uuid.NewString(), Service: "foreign"}},
		Events:    []transport.ClusterEvent{{EnvironmentID: envID, Namespace: "ns", Object: "pod/api-1", Reason: "BackOff", Message: "crash", Count: 3, LastSeen: time.Now()}},
	}
	require.NoError(t, s.SaveStatus(ctx, src, st))
	var nodes, workloads int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM node_status`).Scan(&nodes))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM workload_status`).Scan(&workloads))
	require.Equal(t, 2, nodes)
	require.Equal(t, 1, workloads, "a report cannot speak for environments of other clusters")
	st.Nodes = st.Nodes[:1]
	require.NoError(t, s.SaveStatus(ctx, src, st))
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM node_status`).Scan(&nodes))
	require.Equal(t, 1, nodes)
}
