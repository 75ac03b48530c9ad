// Package telemetry keeps what agents report about their clusters (nodes,
// workloads, warning events) and the container logs they stream. None of it
// is an event: a report replaces the last one, and logs are kept for 7 days
// in daily partitions that are dropped whole when they age out.
package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Retention is how long container logs are kept.
const Retention = 7 * 24 * time.Hour

// Store writes and reads the telemetry tables.
type Store struct {
	pool *pgxpool.Pool
	now  func() time.Time

	mu      sync.Mutex
	ensured map[string]bool // days whose partition exists
}

// New returns a store; now is the clock (time.Now when nil).
func New(pool *pgxpool.Pool, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{pool: pool, now: now, ensured: map[string]bool{}}
}

// Source says which cluster a report came from.
type Source struct {
	OrgID, ClusterID string
}

// SaveStatus replaces a cluster's node, workload and event reports.
func (s *Store) SaveStatus(ctx context.Context, src Source, st transport.Status) error {
	now := s.now().UTC()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM node_status WHERE cluster_id = $1`, src.ClusterID)
	for _, n := range st.Nodes {
		versions, _ := json.Marshal(map[string]string{"kubelet": n.KubeletVersion, "os": n.OSImage, "runtime": n.ContainerRuntime})
		b.Queue(`INSERT INTO node_status (cluster_id, name, org_id, ready, cpu, memory, versions, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT DO NOTHING`, src.ClusterID, cut(n.Name, 253), src.OrgID, n.Ready, cut(n.CPU, 32), cut(n.Memory, 32), versions, now)
	}
	// Workloads of environments on this cluster only: a report cannot speak
	// for another organisation's environments.
	b.Queue(`DELETE FROM workload_status WHERE cluster_id = $1`, src.ClusterID)
	for _, w := range st.Workloads {
		if uuid.Validate(w.EnvironmentID) != nil {
			continue
		}
		b.Queue(`INSERT INTO workload_status (environment_id, service, release, process, org_id, cluster_id, desired, ready, updated_at)
			SELECT $1::uuid, $2, $3, $4, $5, $6, $7, $8, $9 WHERE EXISTS (SELECT 1 FROM environments WHERE id = $1::uuid AND cluster_id = $6)
			ON CONFLICT DO NOTHING`, w.EnvironmentID, cut(w.Service, 63), w.Release, cut(w.Process, 63), src.OrgID, src.ClusterID, w.Desired, w.Ready, now)
	}
	b.Queue(`DELETE FROM cluster_events WHERE cluster_id = $1`, src.ClusterID)
	for i, e := range st.Events {
		if i == 200 {
			break
		}
		b.Queue(`INSERT INTO cluster_events (cluster_id, namespace, object, reason, org_id, environment_id, message, count, last_seen)
			VALUES ($1, $2, $3, $4, $5, (SELECT id FROM environments WHERE id::text = $6 AND cluster_id = $1), $7, $8, $9) ON CONFLICT DO NOTHING`,
			src.ClusterID, cut(e.Namespace, 63), cut(e.Object, 300), cut(e.Reason, 128), src.OrgID, e.EnvironmentID, cut(e.Message, 1024), e.Count, e.LastSeen)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("saving a status report: %w", err)
	}
	return tx.Commit(ctx)
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func day(t time.Time) string { return t.UTC().Format("20060102") }

// logTables are the tables of lines kept for Retention, partitioned by day:
// containers' output and builds' output.
var logTables = []string{"log_lines", "build_log_lines"}

// EnsurePartitions creates the log partitions of today and the next two days.
func (s *Store) EnsurePartitions(ctx context.Context) error {
	now := s.now().UTC()
	for i := 0; i < 3; i++ {
		d := now.Add(time.Duration(i) * 24 * time.Hour)
		for _, t := range logTables {
			if err := s.ensure(ctx, t, d); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Store) ensure(ctx context.Context, table string, t time.Time) error {
	key := table + "_" + day(t)
	s.mu.Lock()
	done := s.ensured[key]
	s.mu.Unlock()
	if done {
		return nil
	}
	from := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		key, table, from.Format(time.RFC3339), from.Add(24*time.Hour).Format(time.RFC3339)))
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("creating the partition %s: %w", key, err)
	}
	s.mu.Lock()
	s.ensured[key] = true
	s.mu.Unlock()
	return nil
}

// DropExpired drops the log partitions older than the retention.
func (s *Store) DropExpired(ctx context.Context) (int, error) {
	dropped := 0
	for _, t := range logTables {
		n, err := s.dropExpired(ctx, t)
		dropped += n
		if err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

func (s *Store) dropExpired(ctx context.Context, table string) (int, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname ~ ('^' || $1 || '_[0-9]{8}$')`, table)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	cutoff := day(s.now().UTC().Add(-Retention))
	dropped := 0
	for _, n := range names {
		// A partition holds one day; it goes once the whole day is older
		// than the retention.
		if strings.TrimPrefix(n, table+"_") < cutoff {
			if _, err := s.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{n}.Sanitize()); err != nil {
				return dropped, fmt.Errorf("dropping %s: %w", n, err)
			}
			dropped++
			s.mu.Lock()
			delete(s.ensured, n)
			s.mu.Unlock()
		}
	}
	return dropped, nil
}

// SaveLogs stores a batch of log lines of an environment on the source's cluster.
func (s *Store) SaveLogs(ctx context.Context, src Source, l transport.Logs) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM environments WHERE id::text = $1 AND cluster_id = $2)`, l.EnvironmentID, src.ClusterID).Scan(&ok); err != nil {
		return err
	}
	if !ok || len(l.Lines) == 0 {
		return nil
	}
	now := s.now().UTC()
	if err := s.ensure(ctx, "log_lines", now); err != nil {
		return err
	}
	rows := make([][]any, 0, len(l.Lines))
	for i, line := range l.Lines {
		if i == 5000 {
			break
		}
		ts := lineTime(line.Time, now)
		rows = append(rows, []any{src.OrgID, l.EnvironmentID, cut(l.Service, 63), l.Release, cut(l.Pod, 253), cut(l.Container, 63), ts, cut(line.Stream, 8), cut(line.Text, 16<<10)})
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"log_lines"}, []string{"org_id", "environment_id", "service", "release", "pod", "container", "ts", "stream", "line"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("saving log lines: %w", err)
	}
	return nil
}

// Logs reads a service's lines after cursor id (0: the last `limit` lines).
func (s *Store) Logs(ctx context.Context, envID, service string, after int64, limit int) ([]api.LogLine, error) {
	q := `SELECT id, ts, pod, container, release, stream, line FROM log_lines WHERE environment_id = $1 AND service = $2 AND id > $3 ORDER BY id LIMIT $4`
	if after == 0 {
		q = `SELECT * FROM (SELECT id, ts, pod, container, release, stream, line FROM log_lines WHERE environment_id = $1 AND service = $2 AND id > $3
			ORDER BY id DESC LIMIT $4) l ORDER BY id`
	}
	rows, err := s.pool.Query(ctx, q, envID, service, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading logs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (api.LogLine, error) {
		var l api.LogLine
		err := r.Scan(&l.ID, &l.Time, &l.Pod, &l.Container, &l.Release, &l.Stream, &l.Text)
		return l, err
	})
	if out == nil {
		out = []api.LogLine{}
	}
	return out, err
}

// lineTime is a line's time as stored: a timestamp far from now (a clock
// far off) would land outside the daily partitions, so it becomes now.
func lineTime(t, now time.Time) time.Time {
	t = t.UTC()
	if t.IsZero() || t.After(now.Add(time.Hour)) || t.Before(now.Add(-Retention)) {
		return now
	}
	return t
}

// SaveBuildLogs stores a batch of a build's output, from the cluster the
// build runs on (another cluster's batch is dropped).
func (s *Store) SaveBuildLogs(ctx context.Context, src Source, l transport.BuildLogs) error {
	if uuid.Validate(l.BuildID) != nil || len(l.Lines) == 0 {
		return nil
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM builds WHERE id = $1 AND cluster_id = $2)`, l.BuildID, src.ClusterID).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return nil
	}
	now := s.now().UTC()
	if err := s.ensure(ctx, "build_log_lines", now); err != nil {
		return err
	}
	rows := make([][]any, 0, len(l.Lines))
	for i, line := range l.Lines {
		if i == 5000 {
			break
		}
		ts := lineTime(line.Time, now)
		rows = append(rows, []any{src.OrgID, l.BuildID, cut(l.Container, 63), ts, cut(line.Stream, 8), cut(line.Text, 16<<10)})
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"build_log_lines"}, []string{"org_id", "build_id", "container", "ts", "stream", "line"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("saving build log lines: %w", err)
	}
	return nil
}

// BuildLogs reads a build's lines after cursor id (0: from the first).
func (s *Store) BuildLogs(ctx context.Context, buildID string, after int64, limit int) ([]api.BuildLine, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, ts, container, stream, line FROM build_log_lines WHERE build_id = $1 AND id > $2 ORDER BY id LIMIT $3`,
		buildID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("reading build logs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (api.BuildLine, error) {
		var l api.BuildLine
		err := r.Scan(&l.ID, &l.Time, &l.Container, &l.Stream, &l.Text)
		return l, err
	})
	if out == nil {
		out = []api.BuildLine{}
	}
	return out, err
}

// SaveMeshStatus keeps what a cluster's agent reported of its mesh nodes.
func (s *Store) SaveMeshStatus(ctx context.Context, src Source, nodes []transport.MeshNodeReport) error {
	if nodes == nil {
		nodes = []transport.MeshNodeReport{}
	}
	b, err := json.Marshal(nodes)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO mesh_status (cluster_id, org_id, nodes, reported_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (cluster_id) DO UPDATE SET nodes = excluded.nodes, reported_at = excluded.reported_at`,
		src.ClusterID, src.OrgID, b, s.now().UTC())
	return err
}
