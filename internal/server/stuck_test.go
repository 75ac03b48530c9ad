package server_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// A projection stuck at an event is visible at once (found from outside: a
// stored event no projection could handle made every write answer 500 after
// 10 s, for good, with nothing saying why): a write answers 503
// projections_behind without waiting out its timeout, /readyz names the
// subscription and the event, /metrics exports the lag.
func TestStuckProjectionsAreVisible(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	pool, err := pgxpool.New(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// As a bug or an older binary would leave one: past every check.
	_, err = pool.Exec(context.Background(), `INSERT INTO events (stream_id, stream_version, event_type, schema_version, payload,
		actor_kind, actor_id, actor_name, request_id, occurred_at)
		VALUES ('mystery-1', 1, 'mystery.happened', 1, '{}', 'system', 'test', 'test', 'r', now() - interval '5 minutes')`)
	require.NoError(t, err)

	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+root)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	start := time.Now()
	status, body := do("POST", "/api/v1/orgs/acme/projects", `{"name":"shop"}`)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Contains(t, body, "projections_behind")
	require.Contains(t, body, "mystery.happened")
	require.Less(t, time.Since(start), 8*time.Second, "no waiting out the consistency timeout")

	status, body = do("GET", "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "STUCK projections")
	require.Contains(t, body, "mystery-1")
	require.Contains(t, body, "reactions: current", "the reactions skip what they cannot read")

	resp, err := http.Get(s.MetricsURL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body = string(b)
	require.Regexp(t, `nebulactrl_subscription_lag_events\{subscription="projections"\} [1-9]`, body)
	require.Contains(t, body, `nebulactrl_subscription_lag_seconds{subscription="projections"}`)
}
