package backup_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/migrations"
)

// The whole server (server.Run, as nebula serve runs it) on a database that
// 1.4.0 ran and that has a migration pending: with an unusable backup
// destination it refuses to start and leaves the schema as it was; with a
// usable one it backs up, then migrates and serves.
func TestServerStartBacksUpBeforeMigrating(t *testing.T) {
	ctx := context.Background()
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	tmp := t.TempDir()
	s := install(t, "1.4.0", c, filepath.Join(tmp, "old"))

	// Undo the newest migration: 1.5.0 brings it.
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = provider.Down(ctx)
	require.NoError(t, err)
	pending, err := database.Pending(ctx, s.pool)
	require.NoError(t, err)
	require.True(t, pending)
	schemaVersion := func() int64 {
		v, err := provider.GetDBVersion(ctx)
		require.NoError(t, err)
		return v
	}
	before := schemaVersion()

	start := func(dir string) (func(), error) {
		t.Setenv(backup.EnvDir, dir)
		cfg := config.Config{DatabaseURL: s.url, SecretKey: s.secretKey, Listen: "127.0.0.1:0", PublicURL: "http://127.0.0.1",
			DataDir: filepath.Join(tmp, "data"), LogLevel: "warn", ApprovalTTL: time.Hour, StallTimeout: time.Hour}
		runCtx, cancel := context.WithCancel(ctx)
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- server.Run(runCtx, cfg, server.Options{Version: "1.5.0", Ready: func(string) { close(ready) }})
		}()
		select {
		case <-ready:
			return func() { cancel(); <-done }, nil
		case err := <-done:
			cancel()
			return nil, err
		case <-time.After(60 * time.Second):
			cancel()
			t.Fatal("the server neither started nor failed within 60 s")
			return nil, nil
		}
	}

	blocker := filepath.Join(tmp, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	_, err = start(filepath.Join(blocker, "backups"))
	require.ErrorIs(t, err, backup.ErrBackupFailed)
	require.ErrorContains(t, err, "not migrated from version 1.4.0 to 1.5.0")
	require.Equal(t, before, schemaVersion(), "the schema is untouched")
	v, err := backup.StoredVersion(ctx, s.pool)
	require.NoError(t, err)
	require.Equal(t, "1.4.0", v)

	dir := filepath.Join(tmp, "backups")
	stop, err := start(dir)
	require.NoError(t, err)
	stop()
	list, err := backup.List(dir)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "1.5.0", list[0].Version)
	require.Equal(t, backup.TriggerBeforeUpgrade, list[0].Trigger)
	require.Greater(t, schemaVersion(), before, "migrated after the backup")
	last, err := backup.LastPreUpgrade(ctx, s.pool)
	require.NoError(t, err)
	require.True(t, last.Succeeded)
	require.Equal(t, "1.4.0", last.FromVersion)
}
