package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// Bounds on outcomes that are polled for, generous for a loaded 2-core
// machine: nothing here sleeps for a fixed time and hopes.
const patience = 2 * time.Minute

// managedServer is `nebula serve` on the managed PostgreSQL of its data
// directory, run in this process.
type managedServer struct {
	url     string
	dataDir string
	cancel  context.CancelFunc
	done    chan error // what Run returned, once
	once    sync.Once
	err     error
}

// result waits for Run to return (up to patience) and returns its error.
func (s *managedServer) result(t *testing.T) error {
	t.Helper()
	s.once.Do(func() {
		select {
		case s.err = <-s.done:
		case <-time.After(patience):
			s.err = fmt.Errorf("the server did not stop within %s", patience)
		}
	})
	return s.err
}

// managedDataDir is a data directory the unprivileged PostgreSQL user can
// reach when the tests run as root (t.TempDir's parent is closed to it).
func managedDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nebula-managed-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func managedConfig(dataDir, key string) config.Config {
	return config.Config{DataDir: dataDir, SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "http://127.0.0.1", LogLevel: "warn"}
}

func startManaged(t *testing.T, dataDir, key string, restart pgcluster.Restart) *managedServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	s := &managedServer{dataDir: dataDir, cancel: cancel, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		s.done <- server.Run(ctx, managedConfig(dataDir, key), server.Options{Version: "test", Logger: logger,
			Ready: func(a string) { ready <- a }, ManagedRestart: restart})
	}()
	select {
	case addr := <-ready:
		s.url = "http://" + addr
	case err := <-s.done:
		cancel()
		t.Fatalf("the server did not start: %v", err)
	case <-time.After(patience):
		cancel()
		t.Fatal("the server did not start")
	}
	t.Cleanup(func() {
		cancel()
		_ = s.result(t)
		if pid := postmasterPID(dataDir); pid > 0 && postgresAlive(pid) {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	})
	return s
}

// stop stops the server as SIGTERM does and returns what Run returned.
func (s *managedServer) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	return s.result(t)
}

func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postgres", "pgdata", "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// postgresAlive: a live postgres process (not a zombie: the tests' init may
// not reap orphans).
func postgresAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	end := strings.LastIndexByte(s, ')')
	return strings.Contains(s[:end+1], "(postgres)") && len(s) > end+2 && s[end+2] != 'Z'
}

func readyz(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url + "/readyz")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The finding: when the managed PostgreSQL died, nebula serve stayed
// up and not ready forever. It is restarted (same port, so the pool
// reconnects) and the server is ready and writable again.
func TestManagedPostgresIsRestartedWhenItDies(t *testing.T) {
	t.Parallel()
	key, _ := seal.GenerateMasterKey()
	dataDir := managedDataDir(t)
	s := startManaged(t, dataDir, key, pgcluster.Restart{Backoff: 200 * time.Millisecond})
	require.Equal(t, 200, readyz(s.url))
	// The first user: the projections run (read-your-writes waited for them).
	resp, err := http.Post(s.url+"/api/v1/setup", "application/json",
		strings.NewReader(`{"email":"root@example.com","password":"correct horse battery staple","organisation":"acme"}`))
	require.NoError(t, err)
	var setup struct {
		Token string `json:"token"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&setup))
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	old := postmasterPID(dataDir)
	require.Positive(t, old)
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
	wait.Within(t, patience, "a new postmaster runs and the server is ready", func() bool {
		pid := postmasterPID(dataDir)
		return pid != old && postgresAlive(pid) && readyz(s.url) == 200
	})
	// Writable again, and projected: a project. The first write after the
	// restart may be recorded while the projections are still reconnecting
	// (503 projections_behind: "the change was recorded"); a retry then
	// finds the name taken (409). Either way the project must be readable.
	wait.Within(t, patience, "a write is recorded", func() bool {
		req, _ := http.NewRequest("POST", s.url+"/api/v1/orgs/acme/projects", strings.NewReader(`{"name":"shop"}`))
		req.Header.Set("Authorization", "Bearer "+setup.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusConflict
	})
	wait.Within(t, patience, "the project is read back", func() bool {
		req, _ := http.NewRequest("GET", s.url+"/api/v1/orgs/acme/projects/shop", nil)
		req.Header.Set("Authorization", "Bearer "+setup.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	pid := postmasterPID(dataDir)
	require.NoError(t, s.stop(t))
	require.False(t, postgresAlive(pid), "stopping the server stops its PostgreSQL")
}

// When the managed PostgreSQL cannot be brought back, nebula serve does not
// linger unready: Run returns an error (exit status 1) saying so.
func TestServerExitsWhenManagedPostgresCannotBeRestarted(t *testing.T) {
	t.Parallel()
	key, _ := seal.GenerateMasterKey()
	dataDir := managedDataDir(t)
	s := startManaged(t, dataDir, key, pgcluster.Restart{Max: 2, Backoff: 100 * time.Millisecond})
	// An unknown setting makes every later start fail.
	auto := filepath.Join(dataDir, "postgres", "pgdata", "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("nebula_no_such_setting = 1\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	require.NoError(t, syscall.Kill(postmasterPID(dataDir), syscall.SIGKILL))
	// Not cancelled: Run returns by itself.
	err = s.result(t)
	require.Error(t, err)
	require.Contains(t, err.Error(), "the managed PostgreSQL stopped and could not be restarted")
}

// helperEnv makes the test binary run `nebula serve` on the managed
// PostgreSQL of a data directory until it is killed.
const helperEnv = "NEBULACTRL_TEST_SERVE_DATA_DIR"

func TestHelperServeManaged(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		// Not a test of its own: the body of the child process that
		// TestOrphanedManagedPostgresIsAdopted starts; nothing to do in a normal run.
		return
	}
	err := server.Run(context.Background(), managedConfig(dir, os.Getenv("HELPER_SECRET_KEY")), server.Options{Version: "test",
		Ready: func(a string) { fmt.Printf("READY %s\n", a) }})
	fmt.Println("ERROR", err)
	os.Exit(1)
}

// The finding: after a kill -9 of nebula serve its PostgreSQL kept
// running, was reused by the next start, and then never stopped. Now the
// next start adopts it and stops it when it stops.
func TestOrphanedManagedPostgresIsAdopted(t *testing.T) {
	t.Parallel()
	key, _ := seal.GenerateMasterKey()
	dataDir := managedDataDir(t)
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperServeManaged$", "-test.count=1")
	// The key goes by a name of the test's own: the server's environment
	// is not handed on to PostgreSQL's processes.
	helper.Env = append(os.Environ(), helperEnv+"="+dataDir, "HELPER_SECRET_KEY="+key)
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	lines := bufio.NewScanner(out)
	ready := false
	for !ready && lines.Scan() {
		require.NotContains(t, lines.Text(), "ERROR")
		_, ready = strings.CutPrefix(lines.Text(), "READY ")
	}
	require.True(t, ready, "the helper server did not start")
	orphan := postmasterPID(dataDir)
	require.True(t, postgresAlive(orphan))
	t.Cleanup(func() {
		if postgresAlive(orphan) {
			_ = syscall.Kill(orphan, syscall.SIGQUIT)
		}
	})

	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	require.True(t, postgresAlive(orphan), "kill -9 of the server leaves its PostgreSQL running")

	s := startManaged(t, dataDir, key, pgcluster.Restart{})
	require.Equal(t, orphan, postmasterPID(dataDir), "the running PostgreSQL is used")
	require.Equal(t, 200, readyz(s.url))
	require.NoError(t, s.stop(t))
	require.False(t, postgresAlive(orphan), "the adopted PostgreSQL stops with the server")
}
