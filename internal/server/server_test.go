package server_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type running struct {
	url  string
	stop func() error
}

func start(t *testing.T, cfg config.Config) (*running, error) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.PublicURL, cfg.LogLevel = "http://127.0.0.1", "warn"
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Options{Version: "test", Ready: func(a string) { ready <- a }})
	}()
	select {
	case addr := <-ready:
		var once sync.Once
		var stopErr error
		r := &running{url: "http://" + addr, stop: func() error {
			once.Do(func() { cancel(); stopErr = <-done })
			return stopErr
		}}
		t.Cleanup(func() { _ = r.stop() })
		return r, nil
	case err := <-done:
		cancel()
		return nil, err
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the server did not start")
		return nil, nil
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestFirstStartGeneratesTheMasterKey(t *testing.T) {
	t.Parallel()
	env := filepath.Join(t.TempDir(), ".env")
	require.NoError(t, os.WriteFile(env, []byte("NEBULACTRL_LOG_LEVEL=warn"), 0o644))
	r, err := start(t, config.Config{DatabaseURL: pgtest.URL(t), EnvFile: env})
	require.NoError(t, err)
	require.NoError(t, r.stop())
	st, err := os.Stat(env)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the .env file holds the master key: owner only")
	b, err := os.ReadFile(env)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2, "the key goes on a line of its own")
	key, ok := strings.CutPrefix(lines[1], "NEBULACTRL_SECRET_KEY=")
	require.True(t, ok)
	_, err = seal.ParseMasterKey(key)
	require.NoError(t, err)
}

func TestNeverANewKeyForADatabaseWithSealedValues(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	req, _ := http.NewRequest("POST", s.URL+"/api/v1/orgs/acme/clusters", strings.NewReader(`{"name":"eu-1"}`))
	req.Header.Set("Authorization", "Bearer "+root)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	for _, path := range []string{"/projects", "/projects/shop/environments", "/projects/shop/services"} {
		body := map[string]string{"/projects": `{"name":"shop"}`, "/projects/shop/environments": `{"name":"staging","cluster":"eu-1"}`, "/projects/shop/services": `{"name":"api","image":"nginx:1"}`}[path]
		req, _ := http.NewRequest("POST", s.URL+"/api/v1/orgs/acme"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+root)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 201, resp.StatusCode, path)
	}
	req, _ = http.NewRequest("PUT", s.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/services/api/variables",
		strings.NewReader(`{"variables":[{"name":"PW","value":"hunter2hunter2","secret":true}]}`))
	req.Header.Set("Authorization", "Bearer "+root)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	s.Stop()

	key, _ := seal.ParseMasterKey(s.SecretKey)
	env := filepath.Join(t.TempDir(), ".env")
	_, err = start(t, config.Config{DatabaseURL: s.DatabaseURL, EnvFile: env})
	require.Error(t, err)
	require.Contains(t, err.Error(), key.ID(), "the error names the key the database expects")
	_, statErr := os.Stat(env)
	require.True(t, os.IsNotExist(statErr), "no new key was written")
}

func TestWeakOrMalformedKeysAreRefused(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for _, key := range []string{
		base64.StdEncoding.EncodeToString(make([]byte, 32)),
		base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		"short",
		"not base64 at all!!",
	} {
		_, err := start(t, config.Config{DatabaseURL: url, SecretKey: key})
		require.Error(t, err, key)
		require.Contains(t, err.Error(), "NEBULACTRL_SECRET_KEY")
		require.NotContains(t, err.Error(), key, "the key never appears in an error")
	}
}

func TestHealthReadinessMetrics(t *testing.T) {
	t.Parallel()
	k, _ := seal.GenerateMasterKey()
	r, err := start(t, config.Config{DatabaseURL: pgtest.URL(t), SecretKey: k})
	require.NoError(t, err)
	st, body := get(t, r.url+"/healthz")
	require.Equal(t, 200, st)
	require.Equal(t, "ok\n", body)
	st, body = get(t, r.url+"/readyz")
	require.Equal(t, 200, st, body)
	// The metrics on the public listener need an instance administrator's
	// token (TestMetricsAreCompleteAndPromlintClean reads them with one).
	st, body = get(t, r.url+"/metrics")
	require.Equal(t, 401, st)
	require.NotContains(t, body, "go_goroutines")
}

// With the database gone, the API answers 503 and /readyz says so.
func TestDatabaseDownIs503(t *testing.T) {
	t.Parallel()
	cluster := pgtest.Cluster(t, nil)
	pgtest.MigratedDB(t, cluster, "down")
	k, _ := seal.GenerateMasterKey()
	r, err := start(t, config.Config{DatabaseURL: cluster.URL("down"), SecretKey: k})
	require.NoError(t, err)
	st, _ := get(t, r.url+"/readyz")
	require.Equal(t, 200, st)
	require.NoError(t, cluster.Stop(context.Background()))
	st, body := get(t, r.url+"/readyz")
	require.Equal(t, 503, st, body)
	req, _ := http.NewRequest("POST", r.url+"/api/v1/sessions", strings.NewReader(`{"email":"a@example.com","password":"xxxxxxxxxxxxxxx"}`))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode, string(b))
	require.Contains(t, string(b), "database_unavailable")
}

// slowBody sends a request body in two halves, a pause between them.
type slowBody struct {
	parts [][]byte
	pause time.Duration
	sent  chan struct{}
}

func (s *slowBody) Read(p []byte) (int, error) {
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	if len(s.parts) == 1 {
		close(s.sent)
		time.Sleep(s.pause)
	}
	n := copy(p, s.parts[0])
	s.parts = s.parts[1:]
	return n, nil
}

// A request in flight when the server is told to stop still completes.
func TestGracefulShutdownFinishesRequestsInFlight(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	body := &slowBody{parts: [][]byte{[]byte(`{"name":`), []byte(`"shop"}`)}, pause: time.Second, sent: make(chan struct{})}
	req, _ := http.NewRequest("POST", s.URL+"/api/v1/orgs/acme/projects", body)
	req.ContentLength = 15
	req.Header.Set("Authorization", "Bearer "+root)
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("request failed:", err)
			done <- nil
			return
		}
		done <- resp
	}()
	<-body.sent
	time.Sleep(100 * time.Millisecond)
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	resp := <-done
	require.NotNil(t, resp, "the request in flight was cut off")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode, string(b))
	<-stopped
	_, err := http.Get(s.URL + "/healthz")
	require.Error(t, err, "the server is gone after shutdown")
}

// An open event stream never holds a shutdown up: it ends, and its client
// resumes elsewhere with Last-Event-ID.
func TestShutdownEndsEventStreams(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	for _, p := range []struct{ path, body string }{
		{"/projects", `{"name":"shop"}`},
		{"/clusters", `{"name":"eu-1"}`},
		{"/projects/shop/environments", `{"name":"staging","cluster":"eu-1"}`},
	} {
		req, _ := http.NewRequest("POST", s.URL+"/api/v1/orgs/acme"+p.path, strings.NewReader(p.body))
		req.Header.Set("Authorization", "Bearer "+root)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 201, resp.StatusCode, p.path)
	}
	req, _ := http.NewRequest("GET", s.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/events", nil)
	req.Header.Set("Authorization", "Bearer "+root)
	stream, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, 200, stream.StatusCode)
	require.Equal(t, "text/event-stream", strings.Split(stream.Header.Get("Content-Type"), ";")[0])

	start := time.Now()
	s.Stop()
	require.Less(t, time.Since(start), 10*time.Second, "the stream ended with the shutdown")
	_, err = io.Copy(io.Discard, stream.Body)
	require.NoError(t, err, "the stream ends cleanly")
}
