package pgcluster

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// The waits below are bounds on outcomes polled for, not sleeps: generous,
// so that a loaded 2-core machine does not fail them.
const patience = 90 * time.Second

var fast = map[string]string{"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}

// tempDir is a data directory the unprivileged PostgreSQL user can reach
// when the tests run as root (t.TempDir's parent is closed to it).
func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nebula-pgcluster-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// killOnCleanup makes sure no postmaster outlives a failed test.
func killOnCleanup(t *testing.T, pid func() int) {
	t.Cleanup(func() {
		if p := pid(); p > 0 && alive(p) {
			_ = syscall.Kill(p, syscall.SIGQUIT)
		}
	})
}

func start(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	if cfg.Settings == nil {
		cfg.Settings = fast
	}
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	c, err := Start(ctx, cfg)
	require.NoError(t, err)
	killOnCleanup(t, c.PID)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func ping(c *Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func stop(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

func TestStartStopRestart(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	c := start(t, Config{Dir: dir})
	require.True(t, c.Owned())
	pid := c.PID()
	require.True(t, alive(pid))
	require.NoError(t, ping(c))
	port := c.Port()

	stop(t, c)
	require.False(t, alive(pid), "the postmaster is gone once Stop returns")
	require.NoError(t, c.Stop(context.Background()), "Stop is idempotent")

	// Started again, the cluster keeps its port.
	c = start(t, Config{Dir: dir})
	require.Equal(t, port, c.Port())
	require.NoError(t, ping(c))
	stop(t, c)
}

// While the process that started it runs, another process (here another
// Cluster of the same directory) shares the postmaster and leaves it running.
func TestSharedClusterIsLeftToItsOwner(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	owner := start(t, Config{Dir: dir})
	other := start(t, Config{Dir: dir})
	require.False(t, other.Owned())
	require.Equal(t, owner.PID(), other.PID())
	require.Equal(t, owner.Port(), other.Port())
	stop(t, other)
	require.True(t, alive(owner.PID()))
	require.NoError(t, ping(owner))
	stop(t, owner)
	require.False(t, alive(owner.PID()))
}

func superviseInBackground(t *testing.T, c *Cluster) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Supervise(context.Background()) }()
	return done
}

// The finding: the managed PostgreSQL died and nothing noticed.
// Killed with SIGKILL, the postmaster is started again on the same port.
func TestSupervisorRestartsAKilledPostmaster(t *testing.T) {
	t.Parallel()
	var logs lockedbuf.Buffer
	c := start(t, Config{Dir: tempDir(t), Restart: Restart{Backoff: 100 * time.Millisecond},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	done := superviseInBackground(t, c)
	for round := 0; round < 2; round++ {
		old := c.PID()
		require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
		wait.Eventually(t, "a new postmaster accepts connections", func() bool {
			return c.PID() != old && alive(c.PID()) && ping(c) == nil
		})
	}
	require.Contains(t, logs.String(), "the managed PostgreSQL stopped unexpectedly")
	require.Contains(t, logs.String(), "the managed PostgreSQL runs again")

	stop(t, c)
	select {
	case err := <-done:
		require.NoError(t, err, "Stop ends supervision without an error")
	case <-time.After(patience):
		t.Fatal("Supervise did not return after Stop")
	}
	require.False(t, alive(c.PID()))
}

// A postmaster that cannot be started again: Supervise gives up after its
// bounded attempts and says so (nebula serve then exits non-zero).
func TestSupervisorGivesUp(t *testing.T) {
	t.Parallel()
	c := start(t, Config{Dir: tempDir(t), Restart: Restart{Max: 2, Backoff: 50 * time.Millisecond}})
	done := superviseInBackground(t, c)
	// An unknown setting stops every later start with a FATAL error.
	auto := filepath.Join(c.pgdata(), "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("nebula_no_such_setting = 1\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, syscall.Kill(c.PID(), syscall.SIGKILL))
	select {
	case err := <-done:
		require.Error(t, err)
		require.Contains(t, err.Error(), "2 restarts")
		require.Contains(t, err.Error(), c.LogFile())
	case <-time.After(patience):
		t.Fatal("Supervise did not give up")
	}
	stop(t, c)
}

// helperEnv makes the test binary a process that starts the cluster of a
// directory and then waits to be killed, like `nebula serve` under kill -9.
const helperEnv = "PGCLUSTER_TEST_HELPER_DIR"

func TestHelperStartAndWait(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		// Not a test of its own: the body of the child process that
		// TestOrphanIsAdoptedAndStopped starts; nothing to do in a normal run.
		return
	}
	c, err := Start(context.Background(), Config{Dir: dir, Settings: fast})
	if err != nil {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	fmt.Printf("READY %d\n", c.PID())
	select {}
}

// The finding: after a kill -9 of the server, its PostgreSQL kept
// running, was reused and never stopped again. Now the next start adopts it
// and stops it with itself.
func TestOrphanIsAdoptedAndStopped(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	helper := exec.Command(os.Args[0], "-test.run=^TestHelperStartAndWait$", "-test.count=1")
	helper.Env = append(os.Environ(), helperEnv+"="+dir)
	helper.Stderr = os.Stderr
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	lines := bufio.NewScanner(out)
	var orphan int
	for lines.Scan() {
		if p, ok := strings.CutPrefix(lines.Text(), "READY "); ok {
			orphan, err = strconv.Atoi(p)
			require.NoError(t, err)
			break
		}
		require.NotContains(t, lines.Text(), "ERROR")
	}
	require.NotZero(t, orphan, "the helper did not start the cluster")
	killOnCleanup(t, func() int { return orphan })

	// kill -9 of the process that started it: the postmaster lives on.
	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	_ = helper.Wait()
	require.True(t, alive(orphan))

	var logs lockedbuf.Buffer
	c := start(t, Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.True(t, c.Owned(), "the orphan is adopted")
	require.Equal(t, orphan, c.PID())
	require.NoError(t, ping(c))
	require.Contains(t, logs.String(), "adopting the PostgreSQL left running")

	stop(t, c)
	require.False(t, alive(orphan), "the adopted postmaster is stopped with its new owner")
}

// An adopted postmaster is supervised like one this process started.
func TestAdoptedPostmasterIsSupervised(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	first := start(t, Config{Dir: dir})
	// Forget the first owner as a kill -9 would: its lock goes, its
	// postmaster stays.
	first.mu.Lock()
	first.release()
	first.owned = false
	first.mu.Unlock()

	c := start(t, Config{Dir: dir, WatchInterval: 100 * time.Millisecond, Restart: Restart{Backoff: 100 * time.Millisecond}})
	require.True(t, c.Owned())
	done := superviseInBackground(t, c)
	old := c.PID()
	require.NoError(t, syscall.Kill(old, syscall.SIGKILL))
	wait.Eventually(t, "the adopted postmaster is started again", func() bool {
		return c.PID() != old && alive(c.PID()) && ping(c) == nil
	})
	stop(t, c)
	require.NoError(t, <-done)
	require.False(t, alive(c.PID()))
}

func TestAlive(t *testing.T) {
	t.Parallel()
	require.False(t, alive(os.Getpid()), "a process that is not postgres is not a postmaster")
	require.False(t, alive(1<<22+12345))
}
