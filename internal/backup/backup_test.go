package backup_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/projections"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clock is an injected clock the test moves by hand.
var dbCounter atomic.Int64

// emptyDB creates a new database with nothing in it on the test cluster.
func emptyDB(t *testing.T) string {
	t.Helper()
	base := pgtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	require.NoError(t, err)
	defer conn.Close(ctx)
	name := fmt.Sprintf("nebula_empty_%d_%d", os.Getpid(), dbCounter.Add(1))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), base)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func open(t *testing.T, u string) *pgxpool.Pool {
	t.Helper()
	pool, err := database.Open(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// seeded is a database with an organisation, a project and a sealed secret,
// every event projected.
type seeded struct {
	url       string
	pool      *pgxpool.Pool
	secretKey string
	secret    string
}

func seed(t *testing.T, u string, pool *pgxpool.Pool) seeded {
	t.Helper()
	ctx := context.Background()
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	store := eventstore.New(pool, nil)
	sealer := seal.New(pool, mk, nil)
	now := func() time.Time { return time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC) }
	cmd, err := dispatch.New(dispatch.Config{Store: store, Now: now})
	require.NoError(t, err)
	proj, err := projections.New(projections.Config{Store: store, Keys: sealer, Now: now})
	require.NoError(t, err)
	alice, org, project, env, svc, cluster := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	as := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice@example.com"}, Person: alice, RequestID: "req-1"}
	must := func(_ any, err error) { t.Helper(); require.NoError(t, err) }
	must(cmd.User(ctx, as, alice, domain.RegisterUser{UserID: alice, Email: "alice@example.com", PasswordHash: "$2a$x", InstanceAdmin: true}))
	must(cmd.Organisation(ctx, as, org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: alice}))
	must(cmd.Cluster(ctx, as, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: uuid.NewString(), TokenHash: "hash", ExpiresAt: now().Add(24 * time.Hour)}}))
	must(cmd.Project(ctx, as, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"}))
	must(cmd.Project(ctx, as, org, project, domain.CreateEnvironment{EnvironmentID: env, Name: "staging", ClusterID: cluster}))
	must(cmd.Project(ctx, as, org, project, domain.CreateService{ServiceID: svc, Name: "web", Source: domain.Source{Image: "web:1"},
		Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}}))
	secret := "s3cret-" + uuid.NewString()
	sealed, err := sealer.Seal(ctx, org, []byte(secret))
	require.NoError(t, err)
	must(cmd.Project(ctx, as, org, project, domain.SetVariables{EnvironmentID: env, ServiceID: svc,
		Variables: []domain.Variable{{Name: "DB_PASSWORD", Secret: &sealed}, {Name: "LOG_LEVEL", Value: "info"}}}))
	require.Eventually(t, func() bool {
		_, err := proj.CatchUp(ctx)
		require.NoError(t, err)
		var total, handled int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&total))
		_, handled, err = eventstore.Checkpoint(ctx, pool, projections.SubscriptionName)
		require.NoError(t, err)
		return total == handled
	}, 20*time.Second, 5*time.Millisecond)
	return seeded{url: u, pool: pool, secretKey: key, secret: secret}
}

// install runs version v of the control plane's start-up on a new database:
// the check, then the migrations.
func install(t *testing.T, v string, c *testclock.Clock, dir string) seeded {
	t.Helper()
	u := emptyDB(t)
	pool := open(t, u)
	d, err := backup.BeforeMigrate(context.Background(), pool, backup.Config{DatabaseURL: u, Dir: dir, Version: v, Now: c.Now}, 0)
	require.NoError(t, err)
	require.Equal(t, backup.SkippedNewDatabase, d)
	require.NoError(t, database.Migrate(context.Background(), pool, nil))
	return seed(t, u, pool)
}

func dumps(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.dump"))
	require.NoError(t, err)
	return m
}

// sqlOf renders a custom-format dump as the SQL script it holds (the custom
// format compresses table data, so a search of the raw file proves little).
func sqlOf(t *testing.T, dump string) []byte {
	t.Helper()
	bin, err := backup.FindBinDir()
	require.NoError(t, err)
	out, err := exec.Command(filepath.Join(bin, "pg_restore"), "--file=-", dump).Output()
	require.NoError(t, err)
	return out
}

func TestBackupAtStartOfNewVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	dir := filepath.Join(t.TempDir(), "backups")
	s := install(t, "1.4.0", c, dir)
	require.Empty(t, dumps(t, dir), "a new database is not backed up")
	v, err := backup.StoredVersion(ctx, s.pool)
	require.NoError(t, err)
	require.Equal(t, "1.4.0", v)

	// Restarting the same version and a development build change nothing.
	cfg := backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.4.0", Now: c.Now}
	d, err := backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, backup.SkippedUnchanged, d)
	for _, dev := range []string{"dev", "1.4.0-3-gabc1234"} {
		cfg.Version = dev
		d, err = backup.BeforeMigrate(ctx, s.pool, cfg, 0)
		require.NoError(t, err)
		require.Equal(t, backup.SkippedDevelopment, d)
	}
	require.Empty(t, dumps(t, dir))
	last, err := backup.LastPreUpgrade(ctx, s.pool)
	require.NoError(t, err)
	require.Nil(t, last)

	// 1.5.0 starts: it backs up before migrating.
	c.Advance(time.Hour)
	cfg.Version = "1.5.0"
	d, err = backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, backup.BackedUp, d)
	files := dumps(t, dir)
	require.Len(t, files, 1)
	list, err := backup.List(dir)
	require.NoError(t, err)
	require.Len(t, list, 1)
	m := list[0]
	require.Equal(t, "1.5.0", m.Version)
	require.Equal(t, backup.TriggerBeforeUpgrade, m.Trigger)
	require.Equal(t, c.Now(), m.Time)
	require.Positive(t, m.DatabaseSize)
	require.Equal(t, filepath.Base(files[0]), m.Dump)
	raw, err := os.ReadFile(files[0])
	require.NoError(t, err)
	sum := sha256.Sum256(raw)
	require.Equal(t, hex.EncodeToString(sum[:]), m.SHA256)
	require.EqualValues(t, len(raw), m.DumpSize)
	require.NoError(t, backup.Verify(dir, m))
	for _, f := range append(files, filepath.Join(dir, filepath.Base(files[0][:len(files[0])-len(".dump")])+".json")) {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	// The dump holds the data, sealed; never the master key.
	script := sqlOf(t, files[0])
	require.Contains(t, string(script), "acme", "the dump holds the organisation")
	keyBytes, err := base64.StdEncoding.DecodeString(s.secretKey)
	if err != nil {
		keyBytes, err = base64.RawURLEncoding.DecodeString(s.secretKey)
	}
	require.NoError(t, err)
	manifest, err := os.ReadFile(filepath.Join(dir, m.Dump[:len(m.Dump)-len(".dump")]+".json"))
	require.NoError(t, err)
	for name, b := range map[string][]byte{"dump": raw, "script": script, "manifest": manifest} {
		require.False(t, bytes.Contains(b, []byte(s.secretKey)), "the %s holds NEBULACTRL_SECRET_KEY", name)
		require.False(t, bytes.Contains(b, keyBytes), "the %s holds the master key's bytes", name)
		require.False(t, bytes.Contains(b, []byte(s.secret)), "the %s holds a secret in the clear", name)
	}

	last, err = backup.LastPreUpgrade(ctx, s.pool)
	require.NoError(t, err)
	require.NotNil(t, last)
	require.True(t, last.Succeeded)
	require.Equal(t, backup.SourceStartup, last.Source)
	require.Equal(t, "1.4.0", last.FromVersion)
	require.Equal(t, "1.5.0", last.TargetVersion)
	require.Equal(t, m.Dump, last.Dump)
	require.Equal(t, m.SHA256, last.SHA256)
	v, err = backup.StoredVersion(ctx, s.pool)
	require.NoError(t, err)
	require.Equal(t, "1.5.0", v)

	// The next start of 1.5.0 does not back up again.
	d, err = backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, backup.SkippedUnchanged, d)
	require.Len(t, dumps(t, dir), 1)
}

// A migrated database without a single event holds nothing to back up: it
// counts as new, and no destination is needed.
func TestMigratedDatabaseWithoutEventsIsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	pool := open(t, u)
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	d, err := backup.BeforeMigrate(ctx, pool, backup.Config{DatabaseURL: u, Version: "1.5.0", Now: c.Now}, 0)
	require.NoError(t, err)
	require.Equal(t, backup.SkippedNewDatabase, d)
	v, err := backup.StoredVersion(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "1.5.0", v)
	seed(t, u, pool)
	// With events and no destination, a new version cannot back up and
	// does not migrate.
	_, err = backup.BeforeMigrate(ctx, pool, backup.Config{DatabaseURL: u, Version: "1.6.0", Now: c.Now}, 0)
	require.ErrorIs(t, err, backup.ErrBackupFailed)
	require.ErrorContains(t, err, "no destination")
}

func TestInstallerBackupReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	dir := filepath.Join(t.TempDir(), "backups")
	s := install(t, "1.4.0", c, dir)

	// The installer runs pre-upgrade-backup inside the running 1.4.0 before
	// it installs 1.5.0.
	old := backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.4.0", Now: c.Now}
	o, err := backup.PreUpgrade(ctx, s.pool, old, "1.5.0", false)
	require.NoError(t, err)
	require.True(t, o.Succeeded)
	require.Equal(t, backup.SourceInstaller, o.Source)
	require.Len(t, dumps(t, dir), 1)

	c.Advance(23 * time.Hour)
	next := backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.5.0", Now: c.Now}
	d, err := backup.BeforeMigrate(ctx, s.pool, next, 0)
	require.NoError(t, err)
	require.Equal(t, backup.ReusedInstaller, d)
	require.Len(t, dumps(t, dir), 1, "no second dump")
	last, err := backup.LastPreUpgrade(ctx, s.pool)
	require.NoError(t, err)
	require.True(t, last.Reused)
	require.Equal(t, o.Dump, last.Dump)

	// An installer backup for another version, or older than 24 h, is not
	// reused.
	_, err = backup.PreUpgrade(ctx, s.pool, next, "1.6.1", false)
	require.NoError(t, err)
	c.Advance(time.Second) // the next dump gets its own name
	d, err = backup.BeforeMigrate(ctx, s.pool, backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.6.0", Now: c.Now}, 0)
	require.NoError(t, err)
	require.Equal(t, backup.BackedUp, d)
	require.Len(t, dumps(t, dir), 3)

	c.Advance(time.Second)
	_, err = backup.PreUpgrade(ctx, s.pool, backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.6.0", Now: c.Now}, "1.7.0", false)
	require.NoError(t, err)
	c.Advance(24*time.Hour + time.Second)
	d, err = backup.BeforeMigrate(ctx, s.pool, backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.7.0", Now: c.Now}, 0)
	require.NoError(t, err)
	require.Equal(t, backup.BackedUp, d)
	require.Len(t, dumps(t, dir), 5)
}

func TestMigrationRefusedWhenBackupFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	tmp := t.TempDir()
	s := install(t, "1.4.0", c, filepath.Join(tmp, "backups"))
	// A destination below a regular file cannot be created, not even by root.
	blocker := filepath.Join(tmp, "not-a-directory")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	bad := filepath.Join(blocker, "backups")

	cfg := backup.Config{DatabaseURL: s.url, Dir: bad, Version: "1.5.0", Now: c.Now}
	_, err := backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.ErrorIs(t, err, backup.ErrBackupFailed)
	require.Contains(t, err.Error(), "not migrated from version 1.4.0 to 1.5.0")
	last, err := backup.LastPreUpgrade(ctx, s.pool)
	require.NoError(t, err)
	require.False(t, last.Succeeded)
	require.Contains(t, last.Error, bad)
	v, err := backup.StoredVersion(ctx, s.pool)
	require.NoError(t, err)
	require.Equal(t, "1.4.0", v, "a failed check leaves the stored version, so the next start tries again")

	// A pg_dump that cannot finish within the limit fails the same way.
	_, err = backup.BeforeMigrate(ctx, s.pool, backup.Config{DatabaseURL: s.url, Dir: filepath.Join(tmp, "ok"), Version: "1.5.0", Now: c.Now}, time.Nanosecond)
	require.ErrorIs(t, err, backup.ErrBackupFailed)

	// The installer's run fails too (exit 3 in the command); --force records
	// the failure and goes on.
	_, err = backup.PreUpgrade(ctx, s.pool, cfg, "1.5.0", false)
	require.ErrorIs(t, err, backup.ErrBackupFailed)
	o, err := backup.PreUpgrade(ctx, s.pool, cfg, "1.5.0", true)
	require.NoError(t, err)
	require.False(t, o.Succeeded)
	require.True(t, o.Forced)

	// A forced failure is no backup: the start-up still refuses.
	_, err = backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.ErrorIs(t, err, backup.ErrBackupFailed)
	// With a working destination it backs up and goes on.
	cfg.Dir = filepath.Join(tmp, "backups")
	d, err := backup.BeforeMigrate(ctx, s.pool, cfg, 0)
	require.NoError(t, err)
	require.Equal(t, backup.BackedUp, d)
}

func TestRestoreIntoFreshDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC))
	dir := filepath.Join(t.TempDir(), "backups")
	s := install(t, "1.5.0", c, dir)
	m, err := backup.Create(ctx, backup.Config{DatabaseURL: s.url, Dir: dir, Version: "1.5.0", Now: c.Now}, backup.TriggerManual, "")
	require.NoError(t, err)
	require.Equal(t, backup.TriggerManual, m.Trigger)
	dump := filepath.Join(dir, m.Dump)

	// A database that is not empty is refused and left as it was.
	busy := pgtest.URL(t)
	_, err = backup.Restore(ctx, "", dump, busy)
	require.ErrorIs(t, err, backup.ErrNotEmpty)
	var events int
	require.NoError(t, open(t, busy).QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	require.Zero(t, events)

	target := emptyDB(t)
	_, err = backup.Restore(ctx, "", dump, target)
	require.NoError(t, err)
	restored := open(t, target)
	var want, got int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&want))
	require.NoError(t, restored.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&got))
	require.Positive(t, want)
	require.Equal(t, want, got)
	pending, err := database.Pending(ctx, restored)
	require.NoError(t, err)
	require.False(t, pending, "the restored database is at this version's schema")
	rep, err := projections.Replay(ctx, restored)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "every projection equal after the restore: %+v", rep)
	require.Positive(t, rep.Events)
	v, err := backup.StoredVersion(ctx, restored)
	require.NoError(t, err)
	require.Equal(t, "1.5.0", v)

	// A damaged dump is refused before anything is written.
	raw, err := os.ReadFile(dump)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0xff
	require.NoError(t, os.WriteFile(dump, raw, 0o600))
	_, err = backup.Restore(ctx, "", dump, emptyDB(t))
	require.ErrorContains(t, err, "does not match its manifest")
}

// One manual backup at a time on the whole installation: while another holds
// the lock, a second gets ErrBusy and writes nothing.
func TestCreateExclusive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	pool := open(t, u)
	dir := filepath.Join(t.TempDir(), "backups")
	cfg := backup.Config{DatabaseURL: u, Dir: dir, Version: "1.5.0"}
	other, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer other.Close(ctx)
	_, err = other.Exec(ctx, `SELECT pg_advisory_lock(7244015874)`)
	require.NoError(t, err)
	_, err = backup.CreateExclusive(ctx, pool, cfg, backup.TriggerManual)
	require.ErrorIs(t, err, backup.ErrBusy)
	require.Empty(t, dumps(t, dir))
	_, err = other.Exec(ctx, `SELECT pg_advisory_unlock(7244015874)`)
	require.NoError(t, err)
	m, err := backup.CreateExclusive(ctx, pool, cfg, backup.TriggerManual)
	require.NoError(t, err)
	require.Equal(t, backup.TriggerManual, m.Trigger)
	require.Len(t, dumps(t, dir), 1)
}
