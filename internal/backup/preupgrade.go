package backup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/version"
	"github.com/nebulactrl/nebulactrl/migrations"
)

// StartupLimit bounds the pre-upgrade backup that the start-up check takes.
const StartupLimit = 30 * time.Minute

// ReuseWindow is how recent an installer's backup of exactly the starting
// version must be for the start-up check to use it instead of its own.
const ReuseWindow = 24 * time.Hour

// Sources of a pre-upgrade backup.
const (
	SourceStartup   = "startup"
	SourceInstaller = "installer"
)

// lockKey is the advisory lock of the check: replicas starting together
// back up once; the others find the version stored and skip.
const lockKey = 7_244_015_873

// ErrBackupFailed means the pre-upgrade backup failed: the server does not
// migrate.
var ErrBackupFailed = errors.New("the pre-upgrade backup failed")

// versionMigration is the migration that creates the version table and the
// table of pre-upgrade backups. The check runs its Up section itself, before
// the migrations, because it must read the stored version before anything
// migrates (its statements are CREATE TABLE IF NOT EXISTS: goose running it
// later changes nothing); for a database that never ran the check (a
// development build) goose creates them.
const versionMigration = "00014_control_plane_version.sql"

// schema returns the Up section of versionMigration, from the embedded
// migrations: the DDL lives in the migrations only.
func schema() (string, error) {
	raw, err := migrations.FS.ReadFile(versionMigration)
	if err != nil {
		return "", fmt.Errorf("reading migration %s: %w", versionMigration, err)
	}
	_, up, ok := strings.Cut(string(raw), "-- +goose Up")
	if !ok {
		return "", fmt.Errorf("migration %s has no Up section", versionMigration)
	}
	up, _, _ = strings.Cut(up, "-- +goose Down")
	return up, nil
}

// createTables creates the version table and the table of pre-upgrade
// backups when they are not there yet.
func createTables(ctx context.Context, conn *pgxpool.Conn) error {
	ddl, err := schema()
	if err == nil {
		_, err = conn.Exec(ctx, ddl)
	}
	if err != nil {
		return fmt.Errorf("creating the version table: %w", err)
	}
	return nil
}

// Outcome is the record of one pre-upgrade backup, as GET
// /api/v1/instance/upgrade returns it (preUpgradeBackup).
type Outcome struct {
	Time time.Time `json:"time"`
	// Source is "startup" (the server's check) or "installer"
	// (nebulactrl-server pre-upgrade-backup).
	Source        string `json:"source"`
	FromVersion   string `json:"fromVersion"`
	TargetVersion string `json:"targetVersion"`
	Succeeded     bool   `json:"succeeded"`
	// Forced: the backup failed and --force went on anyway.
	Forced bool `json:"forced,omitempty"`
	// Reused: the start-up check used the installer's backup.
	Reused       bool   `json:"reused,omitempty"`
	Destination  string `json:"destination"`
	Dump         string `json:"dump,omitempty"`
	DatabaseSize int64  `json:"databaseSizeBytes,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	Error        string `json:"error,omitempty"`
}

// Decision says what the start-up check did.
type Decision string

// Decisions of the start-up check.
const (
	SkippedDevelopment Decision = "skipped: development build"
	SkippedNewDatabase Decision = "skipped: new database"
	SkippedUnchanged   Decision = "skipped: unchanged version"
	ReusedInstaller    Decision = "reused the installer's backup"
	BackedUp           Decision = "backed up"
)

// BeforeMigrate is the start-up check, run before the migrations. It backs
// the database up when c.Version (a release) differs from the version that
// last ran on it, unless the installer backed up for exactly this version
// within ReuseWindow; it skips a development build, a new database and an
// unchanged version (a database is new when it was never migrated or holds
// no event yet). Its outcome is stored before it returns. An error
// wrapping ErrBackupFailed means: do not migrate.
func BeforeMigrate(ctx context.Context, pool *pgxpool.Pool, c Config, limit time.Duration) (Decision, error) {
	c = c.withDefaults()
	if !version.Release(c.Version) {
		c.Logger.Info("pre-upgrade backup check skipped: a development build", "version", c.Version)
		return SkippedDevelopment, nil
	}
	if limit <= 0 {
		limit = StartupLimit
	}
	conn, unlock, err := lock(ctx, pool)
	if err != nil {
		return "", err
	}
	defer unlock()
	fresh, err := isNew(ctx, conn)
	if err != nil {
		return "", err
	}
	if err := createTables(ctx, conn); err != nil {
		return "", err
	}
	if fresh {
		if err := storeVersion(ctx, conn, c.Version, c.Now()); err != nil {
			return "", err
		}
		return SkippedNewDatabase, nil
	}
	stored, err := storedVersion(ctx, conn)
	if err != nil {
		return "", err
	}
	if stored == c.Version {
		return SkippedUnchanged, nil
	}
	from := stored
	if from == "" {
		from = "unknown (before the version was recorded)"
	}
	now := c.Now().UTC()
	if o, ok, err := installerBackup(ctx, conn, c.Version, now); err != nil {
		return "", err
	} else if ok && fileExists(filepath.Join(o.Destination, o.Dump)) {
		c.Logger.Info("pre-upgrade backup: the installer's backup of this version is reused", "dump", filepath.Join(o.Destination, o.Dump), "taken_at", o.Time)
		o.Source, o.Reused, o.Time, o.FromVersion = SourceStartup, true, now, from
		if err := record(ctx, conn, o); err != nil {
			return "", err
		}
		if err := storeVersion(ctx, conn, c.Version, now); err != nil {
			return "", err
		}
		return ReusedInstaller, nil
	}
	c.Logger.Info("pre-upgrade backup: taking a control-plane backup before migrating", "from", from, "to", c.Version, "destination", c.Dir, "limit", limit)
	dumpCtx, cancel := context.WithTimeout(ctx, limit)
	m, berr := Create(dumpCtx, c, TriggerBeforeUpgrade, c.Version)
	cancel()
	o := Outcome{Time: now, Source: SourceStartup, FromVersion: from, TargetVersion: c.Version, Destination: c.Dir,
		Succeeded: berr == nil, Dump: m.Dump, DatabaseSize: m.DatabaseSize, SHA256: m.SHA256}
	if berr != nil {
		o.Dump, o.SHA256 = "", ""
		o.Error = berr.Error()
	}
	if err := record(ctx, conn, o); err != nil {
		return "", errors.Join(err, berr)
	}
	if berr != nil {
		return "", fmt.Errorf("%w, so the database is not migrated from version %s to %s: %v (destination %s; fix the cause and start again, or take the backup first with: nebulactrl-server pre-upgrade-backup --target-version %s)",
			ErrBackupFailed, from, c.Version, berr, c.Dir, c.Version)
	}
	if err := storeVersion(ctx, conn, c.Version, now); err != nil {
		return "", err
	}
	return BackedUp, nil
}

// PreUpgrade is nebulactrl-server pre-upgrade-backup: the installer's backup
// before it installs target (default: this binary's version). Its outcome is
// stored; a failure is returned (wrapping ErrBackupFailed) unless force is
// set, which records it as forced.
func PreUpgrade(ctx context.Context, pool *pgxpool.Pool, c Config, target string, force bool) (Outcome, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Outcome{}, err
	}
	if target == "" {
		target = c.Version
	}
	conn, unlock, err := lock(ctx, pool)
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	if err := createTables(ctx, conn); err != nil {
		return Outcome{}, err
	}
	from, err := storedVersion(ctx, conn)
	if err != nil {
		return Outcome{}, err
	}
	if from == "" {
		from = c.Version
	}
	m, berr := Create(ctx, c, TriggerBeforeUpgrade, target)
	o := Outcome{Time: c.Now().UTC(), Source: SourceInstaller, FromVersion: from, TargetVersion: target, Destination: c.Dir,
		Succeeded: berr == nil, Dump: m.Dump, DatabaseSize: m.DatabaseSize, SHA256: m.SHA256}
	if berr != nil {
		o.Dump, o.SHA256, o.Error, o.Forced = "", "", berr.Error(), force
	}
	if err := record(ctx, conn, o); err != nil {
		return o, errors.Join(err, berr)
	}
	if berr != nil && !force {
		return o, fmt.Errorf("%w: %v", ErrBackupFailed, berr)
	}
	return o, nil
}

// ErrBusy means another backup is being taken.
var ErrBusy = errors.New("a backup is being taken")

// manualLockKey keeps manual backups one at a time across replicas.
const manualLockKey = 7_244_015_874

// CreateExclusive is Create with one manual backup at a time on the whole
// installation (a PostgreSQL advisory lock, so across replicas too): a
// second one meanwhile gets ErrBusy instead of a second pg_dump.
func CreateExclusive(ctx context.Context, pool *pgxpool.Pool, c Config, trigger string) (Manifest, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return Manifest{}, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Release()
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, manualLockKey).Scan(&ok); err != nil {
		return Manifest{}, fmt.Errorf("taking the backup lock: %w", err)
	}
	if !ok {
		return Manifest{}, ErrBusy
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, manualLockKey) }()
	return Create(ctx, c, trigger, "")
}

// LastPreUpgrade returns the last pre-upgrade backup's outcome, or nil when
// none was taken (also on a database that never ran the check).
func LastPreUpgrade(ctx context.Context, pool *pgxpool.Pool) (*Outcome, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('pre_upgrade_backups') IS NOT NULL`).Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading the pre-upgrade backups: %w", err)
	}
	if !exists {
		return nil, nil
	}
	o, err := scanOutcome(pool.QueryRow(ctx, selectOutcome+` ORDER BY id DESC LIMIT 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last pre-upgrade backup: %w", err)
	}
	return &o, nil
}

// StoredVersion returns the version that last ran on the database ("" when
// none was recorded).
func StoredVersion(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('control_plane_version') IS NOT NULL`).Scan(&exists); err != nil {
		return "", fmt.Errorf("reading the stored version: %w", err)
	}
	if !exists {
		return "", nil
	}
	return storedVersion(ctx, pool)
}

// isNew reports whether the database holds nothing to back up: it was never
// migrated, or no event was ever written to it.
func isNew(ctx context.Context, conn *pgxpool.Conn) (bool, error) {
	var migrated bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&migrated); err != nil {
		return false, fmt.Errorf("reading the database's state: %w", err)
	}
	if !migrated {
		return true, nil
	}
	created, some, err := eventstore.HasEvents(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("reading the database's state: %w", err)
	}
	return created && !some, nil
}

func lock(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, func(), error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to the database: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		conn.Release()
		return nil, nil, fmt.Errorf("taking the pre-upgrade lock: %w", err)
	}
	return conn, func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey)
		conn.Release()
	}, nil
}

type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func storedVersion(ctx context.Context, q rowQuerier) (string, error) {
	var v string
	err := q.QueryRow(ctx, `SELECT version FROM control_plane_version`).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the stored version: %w", err)
	}
	return v, nil
}

func storeVersion(ctx context.Context, conn *pgxpool.Conn, v string, now time.Time) error {
	_, err := conn.Exec(ctx, `INSERT INTO control_plane_version (singleton, version, updated_at) VALUES (true, $1, $2)
		ON CONFLICT (singleton) DO UPDATE SET version = EXCLUDED.version, updated_at = EXCLUDED.updated_at`, v, now)
	if err != nil {
		return fmt.Errorf("storing the version: %w", err)
	}
	return nil
}

const selectOutcome = `SELECT taken_at, source, from_version, target_version, succeeded, forced, reused,
	destination, dump, database_size, sha256, error FROM pre_upgrade_backups`

func scanOutcome(row pgx.Row) (Outcome, error) {
	var o Outcome
	err := row.Scan(&o.Time, &o.Source, &o.FromVersion, &o.TargetVersion, &o.Succeeded, &o.Forced, &o.Reused,
		&o.Destination, &o.Dump, &o.DatabaseSize, &o.SHA256, &o.Error)
	o.Time = o.Time.UTC()
	return o, err
}

func installerBackup(ctx context.Context, conn *pgxpool.Conn, target string, now time.Time) (Outcome, bool, error) {
	o, err := scanOutcome(conn.QueryRow(ctx, selectOutcome+`
		WHERE source = $1 AND succeeded AND target_version = $2 AND taken_at >= $3 AND taken_at <= $4
		ORDER BY id DESC LIMIT 1`, SourceInstaller, target, now.Add(-ReuseWindow), now))
	if errors.Is(err, pgx.ErrNoRows) {
		return Outcome{}, false, nil
	}
	if err != nil {
		return Outcome{}, false, fmt.Errorf("reading the installer's backups: %w", err)
	}
	return o, true, nil
}

func record(ctx context.Context, conn *pgxpool.Conn, o Outcome) error {
	_, err := conn.Exec(ctx, `INSERT INTO pre_upgrade_backups (taken_at, source, from_version, target_version,
		succeeded, forced, reused, destination, dump, database_size, sha256, error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		o.Time, o.Source, o.FromVersion, o.TargetVersion, o.Succeeded, o.Forced, o.Reused,
		o.Destination, o.Dump, o.DatabaseSize, o.SHA256, o.Error)
	if err != nil {
		return fmt.Errorf("storing the pre-upgrade backup's outcome: %w", err)
	}
	return nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
