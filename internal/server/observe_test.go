package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// syncBuffer is a log destination that the server's goroutines share.
type syncBuffer struct{ lockedbuf.Buffer }

// lines parses every line of a JSON log; a line that is not a JSON object
// fails the test.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(s.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "not a JSON line: %s", sc.Text())
		out = append(out, m)
	}
	return out
}

func send(t *testing.T, method, url, token, requestID, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if requestID != "" {
		req.Header.Set("X-Request-Id", requestID)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// One JSON access-log line per request, with the method, the route pattern
// (never the path's names or the query), the status, the duration, the
// request id (the caller's, echoed, or a new one) and the principal; no
// token, password or query string reaches the log, after a sign-in and a
// token-authenticated request.
func TestAccessLogIsJSONWithoutSecrets(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	s := servertest.Start(t, servertest.Options{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	root := s.Setup(t, "root@example.com", "acme")
	ctx := context.Background()
	anon, err := client.New(s.URL, "")
	require.NoError(t, err)
	session, err := anon.Login(ctx, "root@example.com", "correct horse battery staple")
	require.NoError(t, err)

	resp := send(t, "GET", s.URL+"/api/v1/orgs/acme/projects?secret=querysecret", session.Token, "trace-me-42", "")
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "trace-me-42", resp.Header.Get("X-Request-Id"), "the caller's request id is echoed")
	resp = send(t, "GET", s.URL+"/healthz", "", "", "")
	generated := resp.Header.Get("X-Request-Id")
	require.Regexp(t, `^req_[0-9a-f]{16}$`, generated, "a request without an id gets one")
	resp = send(t, "GET", s.URL+"/api/v1/me", "nbt_not-a-real-token", "a space is not in an id", "")
	require.Equal(t, 401, resp.StatusCode)
	require.Regexp(t, `^req_[0-9a-f]{16}$`, resp.Header.Get("X-Request-Id"), "an id with spaces or control characters is replaced")

	rc, err := client.New(s.URL, root)
	require.NoError(t, err)
	me, err := rc.Me(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, me.User.ID)

	byID := map[string]map[string]any{}
	require.Eventually(t, func() bool {
		for _, l := range logs.lines(t) {
			if l["msg"] == "request" {
				byID[l["request_id"].(string)] = l
			}
		}
		return byID["trace-me-42"] != nil && byID[generated] != nil
	}, 5*time.Second, 20*time.Millisecond)
	traced := byID["trace-me-42"]
	require.Equal(t, "GET", traced["method"])
	require.Equal(t, "GET /api/v1/orgs/{org}/projects", traced["route"])
	require.EqualValues(t, 200, traced["status"])
	require.Equal(t, me.User.ID, traced["principal"], "the principal is the user the session belongs to")
	require.Contains(t, traced, "duration_ms")
	require.Equal(t, "GET /healthz", byID[generated]["route"])
	require.Equal(t, "", byID[generated]["principal"])

	var logins, unauthorized int
	for _, l := range byID {
		if l["route"] == "POST /api/v1/sessions" && l["status"] == float64(201) {
			logins++
		}
		if l["route"] == "GET /api/v1/me" && l["status"] == float64(401) {
			unauthorized++
		}
	}
	require.Equal(t, 1, logins, "the sign-in has its line")
	require.Equal(t, 1, unauthorized, "a 401 leaves a line")

	all := logs.String()
	for _, secret := range []string{session.Token, root, "nbt_not-a-real-token", "correct horse battery staple", "querysecret"} {
		require.NotContains(t, all, secret, "the log holds no token, password or query string")
	}
}

// /metrics holds what an operator needs (build info, connected agents,
// subscription lag, commands by type and outcome, deployments by status,
// the database pool) and passes promlint; on the public listener only an
// instance administrator's token reads it.
func TestMetricsAreCompleteAndPromlintClean(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{PublicMetrics: true, Version: "1.2.3"})
	root := s.Setup(t, "root@example.com", "acme")
	ctx := context.Background()
	rc, err := client.New(s.URL, root)
	require.NoError(t, err)
	_, err = rc.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = rc.CreateUser(ctx, api.CreateUserRequest{Email: "bob@example.com", Password: "correct horse battery staple"})
	require.NoError(t, err)
	anon, err := client.New(s.URL, "")
	require.NoError(t, err)
	bob, err := anon.Login(ctx, "bob@example.com", "correct horse battery staple")
	require.NoError(t, err)
	// A deployment as the read model holds it, to be counted by status.
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `INSERT INTO deployments (id, org_id, project_id, environment_id, service_id, release_id, status, reason, requested_at, updated_at, requested_by)
		VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'succeeded', '', now(), now(), 'test')`)
	require.NoError(t, err)

	get := func(token string) (int, string) {
		req, _ := http.NewRequest("GET", s.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	send(t, "GET", s.URL+"/api/v1/me", "", "", "")
	status, body := get("")
	require.Equal(t, http.StatusUnauthorized, status, body)
	status, body = get(bob.Token)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "instance administrators")
	status, body = get(root)
	require.Equal(t, http.StatusOK, status, body)

	for _, want := range []string{
		`nebulactrl_build_info{goversion="` + runtime.Version() + `",version="1.2.3"} 1`,
		`nebulactrl_agents_connected 0`,
		`nebulactrl_subscription_lag_events{subscription="projections"}`,
		`nebulactrl_subscription_lag_seconds{subscription="reactions"}`,
		`nebulactrl_deployments{status="succeeded"} 1`,
		`nebulactrl_db_pool_connections{state="acquired"}`,
		`nebulactrl_db_pool_connections{state="idle"}`,
		`nebulactrl_db_pool_max_connections`,
		`nebulactrl_db_pool_acquires_total`,
		`nebulactrl_db_pool_acquire_seconds_total`,
		`nebulactrl_http_requests_total{code="401",route="GET /api/v1/me"} 1`,
	} {
		require.Contains(t, body, want)
	}
	require.Regexp(t, regexp.MustCompile(`nebulactrl_commands_total\{command="CreateProject",outcome="ok"\} 1\n`), body)
	require.Regexp(t, regexp.MustCompile(`nebulactrl_db_pool_acquires_total [1-9]`), body)

	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	require.Empty(t, problems, "promlint")
}

// With NEBULACTRL_METRICS_LISTEN the metrics are served there without a
// token, and no longer on the public listener.
func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	require.NotEmpty(t, s.MetricsURL)
	resp := send(t, "GET", s.URL+"/metrics", root, "", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not on the public listener")
	resp, err := http.Get(s.MetricsURL + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(b), "nebulactrl_build_info")
	resp = send(t, "GET", s.MetricsURL+"/api/v1/me", root, "", "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "the metrics listener serves the metrics only")
}

// startedOnce runs a control plane on url until it is ready, tells what it
// said at start, and stops it.
func startedOnce(t *testing.T, url, key string) server.Started {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan server.Started, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, config.Config{DatabaseURL: url, SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "http://127.0.0.1", LogLevel: "warn"},
			server.Options{Version: "test", Started: func(s server.Started) { got <- s }})
	}()
	var s server.Started
	select {
	case s = <-got:
	case err := <-done:
		t.Fatalf("the server did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the server did not start within 60 s")
	}
	cancel()
	require.NoError(t, <-done)
	return s
}

// The first-user hint is for a control plane without users only: after
// setup, a restart no longer offers it.
func TestFirstUserHintOnlyWithoutUsers(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	require.True(t, startedOnce(t, url, key).NeedsSetup, "no user yet")
	s := servertest.Start(t, servertest.Options{DatabaseURL: url, SecretKey: key})
	s.Setup(t, "root@example.com", "acme")
	s.Stop()
	require.False(t, startedOnce(t, url, key).NeedsSetup, "a user exists")
}
