package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// runAs runs the binary as argv0 with args and returns its error and output.
func runAs(t *testing.T, argv0 string, args ...string) (error, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := run(ctx, append([]string{argv0, "--env-file", filepath.Join(t.TempDir(), "absent.env")}, args...), nil, &out, &errw)
	return err, out.String(), errw.String()
}

func exitCodeOf(err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// The binary answers to nebulactrl-server with the server's commands:
// pre-upgrade-backup exits 0 backed up, 3 failed, 0 with --force, 0 when
// nothing is configured; then backup restore puts the dump into an empty
// database.
func TestPreUpgradeBackupCommand(t *testing.T) {
	dbURL := pgtest.URL(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "backups")
	t.Setenv(config.EnvDatabaseURL, dbURL)
	t.Setenv(config.EnvDataDir, filepath.Join(tmp, "data"))
	t.Setenv(backup.EnvDir, dir)
	server := "/usr/local/bin/nebulactrl-server"

	err, out, _ := runAs(t, server, "pre-upgrade-backup", "--target-version", "1.5.0")
	require.NoError(t, err)
	require.Contains(t, out, "backed up before the upgrade to 1.5.0")
	list, err := backup.List(dir)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, backup.TriggerBeforeUpgrade, list[0].Trigger)
	require.Equal(t, "1.5.0", list[0].TargetVersion)

	// An unusable destination: exit 3, and 0 with a warning under --force.
	blocker := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	t.Setenv(backup.EnvDir, filepath.Join(blocker, "backups"))
	err, _, _ = runAs(t, server, "pre-upgrade-backup")
	require.Equal(t, 3, exitCodeOf(err), "%v", err)
	err, _, stderr := runAs(t, server, "pre-upgrade-backup", "--force")
	require.NoError(t, err)
	require.Contains(t, stderr, "warning: the pre-upgrade backup failed")
	// An unreachable database fails the same way.
	t.Setenv(config.EnvDatabaseURL, "postgres://nobody@127.0.0.1:1/none")
	err, _, _ = runAs(t, server, "pre-upgrade-backup")
	require.Equal(t, 3, exitCodeOf(err), "%v", err)

	// Nothing configured: no database URL and no managed PostgreSQL.
	t.Setenv(config.EnvDatabaseURL, "")
	os.Unsetenv(config.EnvDatabaseURL)
	err, out, _ = runAs(t, server, "pre-upgrade-backup")
	require.NoError(t, err)
	require.Contains(t, out, "nothing to back up")

	// As nebula, the command does not exist.
	err, _, _ = runAs(t, "nebula", "pre-upgrade-backup")
	require.Error(t, err)

	// Restore into an empty database; a non-empty one is refused.
	dump := filepath.Join(dir, list[0].Dump)
	err, _, _ = runAs(t, server, "backup", "restore", dump, "--database-url", dbURL)
	require.ErrorIs(t, err, backup.ErrNotEmpty)
	target := emptyDatabase(t, dbURL)
	err, out, _ = runAs(t, server, "backup", "restore", dump, "--database-url", target)
	require.NoError(t, err)
	require.Contains(t, out, "nebula audit replay")
	conn, err := pgx.Connect(context.Background(), target)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM goose_db_version`).Scan(&n))
	require.Positive(t, n, "the restored database holds the migrated schema")
	// And the operator's check after a restore passes on it.
	t.Setenv(config.EnvDatabaseURL, target)
	err, out, _ = runAs(t, "nebula", "audit", "replay")
	require.NoError(t, err, out)
	require.Contains(t, out, "equal")
	require.NotContains(t, out, "DIFFERS")
}

func emptyDatabase(t *testing.T, base string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("nebula_restore_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), base); err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// The container's health check asks /readyz of the control plane on
// NEBULACTRL_LISTEN: ready while it serves, not once it stopped.
func TestHealthcheckCommand(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	t.Setenv(config.EnvListen, "0.0.0.0:"+srv.URL[strings.LastIndex(srv.URL, ":")+1:])
	err, out, _ := runAs(t, "/usr/local/bin/nebulactrl-server", "healthcheck")
	require.NoError(t, err)
	require.Equal(t, "ready\n", out)
	srv.Stop()
	err, _, _ = runAs(t, "/usr/local/bin/nebulactrl-server", "healthcheck", "--timeout", "2s")
	require.ErrorContains(t, err, "not ready")
}

// With no database URL, pre-upgrade-backup backs up the managed PostgreSQL
// of the data directory (started for the command, stopped after).
func TestPreUpgradeBackupOfTheManagedDatabase(t *testing.T) {
	// Not t.TempDir: PostgreSQL runs as another user when the tests run as
	// root and must reach the directory.
	data, err := os.MkdirTemp("", "nebula-managed-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(data) })
	ctx := context.Background()
	_, cluster, err := database.Managed(ctx, data, nil)
	require.NoError(t, err)
	require.NoError(t, cluster.Stop(ctx))
	t.Setenv(config.EnvDatabaseURL, "")
	os.Unsetenv(config.EnvDatabaseURL)
	t.Setenv(config.EnvDataDir, data)
	t.Setenv(backup.EnvDir, "")
	os.Unsetenv(backup.EnvDir)
	err, out, _ := runAs(t, "nebulactrl-server", "pre-upgrade-backup", "--target-version", "1.5.0")
	require.NoError(t, err)
	require.Contains(t, out, "backed up before the upgrade to 1.5.0")
	list, err := backup.List(filepath.Join(data, "backups"))
	require.NoError(t, err)
	require.Len(t, list, 1)
}

// A control plane listening on one address of its own (not all of them) is
// asked there, not on 127.0.0.1 where nothing answers.
func TestHealthcheckAsksTheListenAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err, "127.0.0.2 is a loopback address on Linux")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv(config.EnvListen, ln.Addr().String())
	err, out, _ := runAs(t, "/usr/local/bin/nebulactrl-server", "healthcheck", "--timeout", "5s")
	require.NoError(t, err)
	require.Equal(t, "ready\n", out)
}
