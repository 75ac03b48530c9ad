// Package pgtest gives each test its own PostgreSQL database, migrated and
// empty: on a private cluster started for the test binary with initdb/pg_ctl
// (package pgcluster), or on the server named by NEBULACTRL_TEST_DATABASE_URL.
// No test talks to a mock database.
//
// A test package that uses it calls pgtest.Main from TestMain so that the
// cluster is stopped when the tests end.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
)

// EnvURL names an existing server to use instead of a private cluster. Its
// user needs CREATEDB.
const EnvURL = "NEBULACTRL_TEST_DATABASE_URL"

// FastSettings trade durability for speed; tests never need to survive a power cut.
var FastSettings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
}

// The shared server is per test binary, created on first use: a test harness
// is the one place where this package-level state earns its keep.
var shared struct {
	once     sync.Once
	cluster  *pgcluster.Cluster
	dir      string
	adminURL string
	template string
	err      error
	counter  atomic.Int64
}

// Main runs the tests and then stops the shared cluster.
func Main(m *testing.M) {
	code := m.Run()
	if shared.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = shared.cluster.Stop(ctx)
		cancel()
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv(EnvURL); u != "" {
		shared.adminURL = u
	} else {
		dir, err := newClusterDir()
		if err != nil {
			shared.err = err
			return
		}
		shared.dir = dir
		c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Settings: FastSettings})
		if err != nil {
			shared.err = err
			os.RemoveAll(dir)
			return
		}
		shared.cluster = c
		shared.adminURL = c.URL("postgres")
	}
	shared.template = fmt.Sprintf("nebula_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	shared.err = createMigrated(ctx, shared.adminURL, shared.template)
}

func createMigrated(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("pgtest: connecting to %s: %w", redacted(adminURL), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgtest: creating template database: %w", err)
	}
	pool, err := database.Open(ctx, withDB(adminURL, name))
	if err != nil {
		return err
	}
	defer pool.Close()
	return database.Migrate(ctx, pool, nil)
}

// URL returns the URL of a new, migrated, empty database for this test,
// dropped when the test ends.
func URL(t testing.TB) string {
	t.Helper()
	shared.once.Do(setup)
	if shared.err != nil {
		t.Fatalf("pgtest: no PostgreSQL for this test (a real database is required; run `go tool task test`, which installs it): %v", shared.err)
	}
	name := fmt.Sprintf("nebula_t%d_%d", os.Getpid(), shared.counter.Add(1))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, shared.adminURL)
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer conn.Close(ctx)
	// CREATE DATABASE ... TEMPLATE fails while another session is connected to
	// the template; tests in parallel may collide on that, so retry briefly.
	var lastErr error
	for i := 0; i < 50; i++ {
		_, lastErr = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s",
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{shared.template}.Sanitize()))
		if lastErr == nil || !strings.Contains(lastErr.Error(), "being accessed by other users") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if lastErr != nil {
		t.Fatalf("pgtest: creating database %s: %v", name, lastErr)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, shared.adminURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	return withDB(shared.adminURL, name)
}

// Pool returns a pool on a new, migrated, empty database for this test.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	u := URL(t)
	pool, err := database.Open(context.Background(), u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Cluster starts a private PostgreSQL cluster for one test, for tests that
// must not share the commit horizon with others (a transaction held open in
// one database holds back readers in every database of its cluster) or that
// need their own server settings (such as log_statement=all). It is stopped
// when the test ends.
func Cluster(t testing.TB, settings map[string]string) *pgcluster.Cluster {
	t.Helper()
	// Not t.TempDir: its parent is closed to the unprivileged user that
	// runs PostgreSQL when the tests run as root.
	dir, err := newClusterDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	merged := map[string]string{}
	for k, v := range FastSettings {
		merged[k] = v
	}
	for k, v := range settings {
		merged[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Settings: merged})
	if err != nil {
		t.Fatalf("pgtest: starting a private PostgreSQL cluster (a real database is required): %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// MigratedDB creates a migrated database named name on cluster c and returns
// a pool on it, closed when the test ends.
func MigratedDB(t testing.TB, c *pgcluster.Cluster, name string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	if err := createMigrated(ctx, c.URL("postgres"), name); err != nil {
		t.Fatal(err)
	}
	pool, err := database.Open(ctx, c.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func withDB(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + db
	return u.String()
}

func redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
