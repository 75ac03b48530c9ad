// Package backup owns control-plane backups: a pg_dump of the control plane's
// database in custom format with a manifest (version, time, trigger, database
// size, SHA-256 of the dump) in one destination directory, the start-up check
// that backs the database up before a new version migrates it, the record of
// the last pre-upgrade backup, and the restore into an empty database.
//
// A backup never holds NEBULACTRL_SECRET_KEY: the master key lives in the .env
// file, not in the database, and sealed values stay sealed in the dump.
package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/joho/godotenv"

	"github.com/nebulactrl/nebulactrl/internal/config"
)

// Triggers of a backup, as the manifest and the settings page name them.
const (
	TriggerBeforeUpgrade = "Before upgrade"
	TriggerManual        = "Manual"
)

// DirName is the destination's name inside NEBULACTRL_DATA_DIR by default.
const DirName = "backups"

// ErrNoTools means pg_dump or pg_restore was not found.
var ErrNoTools = errors.New("pg_dump and pg_restore not found: install the PostgreSQL client tools (Debian/Ubuntu: apt-get install postgresql-client) or put them on PATH")

// ErrNotEmpty means a restore was pointed at a database that holds tables.
var ErrNotEmpty = errors.New("the target database is not empty: restore only into a new, empty database")

// Manifest describes one backup; it is written beside the dump as JSON.
type Manifest struct {
	// Version is the control plane's version that took the backup.
	Version string    `json:"version"`
	Time    time.Time `json:"time"`
	// Trigger is "Before upgrade" or "Manual".
	Trigger string `json:"trigger"`
	// TargetVersion is the version about to be installed (before upgrade).
	TargetVersion string `json:"targetVersion,omitempty"`
	// DatabaseSize is pg_database_size when the dump began, in bytes.
	DatabaseSize int64  `json:"databaseSizeBytes"`
	Dump         string `json:"dump"`
	DumpSize     int64  `json:"dumpSizeBytes"`
	// SHA256 is the hex SHA-256 of the dump file.
	SHA256 string `json:"sha256"`
	Format string `json:"format"`
}

// Config says where backups go and how they are taken.
type Config struct {
	// DatabaseURL is the control plane's database (pg_dump connects to it;
	// the password travels in the environment, never on the command line).
	DatabaseURL string
	// Dir is the destination (default: NEBULACTRL_DATA_DIR/backups).
	Dir string
	// Version is the running binary's version.
	Version string
	// BinDir holds pg_dump and pg_restore; found on PATH or under
	// /usr/lib/postgresql/<major>/bin when empty.
	BinDir string
	// Now is the clock (tests inject one).
	Now    func() time.Time
	Logger *slog.Logger
}

// Validate joins every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("backup: no database URL"))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("backup: no destination directory"))
	}
	if c.Version == "" {
		errs = append(errs, errors.New("backup: no version"))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// FindBinDir finds the directory of pg_dump and pg_restore: the newest
// /usr/lib/postgresql/<major>/bin first (a pg_dump dumps servers of its own
// major version and older ones; Debian's /usr/bin/pg_dump is a wrapper that
// picks a version by the local clusters, not by the server dumped), then
// PATH.
func FindBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if fileExists(filepath.Join(d, "pg_dump")) && fileExists(filepath.Join(d, "pg_restore")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("pg_dump"); err == nil {
		if fileExists(filepath.Join(filepath.Dir(p), "pg_restore")) {
			return filepath.Dir(p), nil
		}
	}
	return "", ErrNoTools
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// pgCommand prepares a PostgreSQL client tool with the connection taken from
// url: the password goes into PGPASSWORD so that it never shows in the
// process list, and the rest into --dbname.
func pgCommand(ctx context.Context, binDir, tool, rawURL string, args ...string) (*exec.Cmd, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, errors.New("the database URL is not a postgres:// URL")
	}
	env := os.Environ()
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			env = append(env, "PGPASSWORD="+pw)
			u.User = url.User(u.User.Username())
		}
	}
	// A password=... parameter (libpq's other place for it) too.
	if q := u.Query(); q.Has("password") {
		env = append(env, "PGPASSWORD="+q.Get("password"))
		q.Del("password")
		u.RawQuery = q.Encode()
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, tool), append([]string{"--dbname=" + u.String()}, args...)...)
	cmd.Env = env
	// No /dev/null needed (a bare chroot has none): an empty input.
	cmd.Stdin = strings.NewReader("")
	cmd.WaitDelay = 5 * time.Second
	return cmd, nil
}

// Create takes a backup into c.Dir: the dump is written under a temporary
// name, hashed while it is written, and renamed when complete; then the
// manifest is written. Both files are mode 0600 in a directory of mode 0700.
func Create(ctx context.Context, c Config, trigger, targetVersion string) (Manifest, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Manifest{}, err
	}
	if c.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return Manifest{}, err
		}
		c.BinDir = dir
	}
	now := c.Now().UTC()
	m := Manifest{Version: c.Version, Time: now, Trigger: trigger, TargetVersion: targetVersion, Format: "pg_dump custom"}
	size, err := databaseSize(ctx, c.DatabaseURL)
	if err != nil {
		return m, err
	}
	m.DatabaseSize = size
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return m, fmt.Errorf("creating the backup destination %s: %w", c.Dir, err)
	}
	// Two backups in the same second get names of their own: a backup
	// never replaces another.
	var base, final, partial string
	var f *os.File
	for i := 1; ; i++ {
		base = fmt.Sprintf("nebulactrl-%s-%s", now.Format("20060102T150405Z"), sanitize(c.Version))
		if i > 1 {
			base += "-" + strconv.Itoa(i)
		}
		final = filepath.Join(c.Dir, base+".dump")
		partial = final + ".partial"
		if fileExists(final) || fileExists(filepath.Join(c.Dir, base+".json")) {
			continue
		}
		f, err = os.OpenFile(partial, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, os.ErrExist) && i < 100 {
			continue
		}
		if err != nil {
			return m, fmt.Errorf("writing to the backup destination %s: %w", c.Dir, err)
		}
		break
	}
	m.Dump = base + ".dump"
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(partial)
		}
	}()
	cmd, err := pgCommand(ctx, c.BinDir, "pg_dump", c.DatabaseURL, "--format=custom", "--no-password")
	if err != nil {
		return m, err
	}
	h := sha256.New()
	counter := &countWriter{}
	cmd.Stdout = io.MultiWriter(f, h, counter)
	var stderr strings.Builder
	cmd.Stderr = &limitWriter{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return m, fmt.Errorf("pg_dump did not finish in time: %w", ctx.Err())
		}
		return m, fmt.Errorf("pg_dump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := f.Sync(); err != nil {
		return m, fmt.Errorf("writing %s: %w", partial, err)
	}
	if err := f.Close(); err != nil {
		return m, fmt.Errorf("writing %s: %w", partial, err)
	}
	// A hard link, not a rename: it fails rather than replace a dump that
	// appeared under the same name meanwhile.
	if err := os.Link(partial, final); err != nil {
		return m, fmt.Errorf("writing %s: %w", final, err)
	}
	os.Remove(partial)
	ok = true
	m.DumpSize = counter.n
	m.SHA256 = hex.EncodeToString(h.Sum(nil))
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return m, err
	}
	if err := writeFile0600(filepath.Join(c.Dir, base+".json"), append(b, '\n')); err != nil {
		os.Remove(final)
		return m, err
	}
	c.Logger.Info("control-plane backup taken", "dump", final, "trigger", trigger, "bytes", m.DumpSize, "sha256", m.SHA256)
	return m, nil
}

// writeFile0600 writes a new file atomically (temporary name, rename).
func writeFile0600(path string, data []byte) error {
	tmp := path + ".partial"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// List reads the manifests in dir, newest first. A missing directory holds
// no backups.
func List(dir string) ([]Manifest, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the backup destination %s: %w", dir, err)
	}
	var out []Manifest
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), "nebulactrl-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.After(out[j].Time) })
	return out, nil
}

// Verify checks a dump against its manifest's size and checksum.
func Verify(dir string, m Manifest) error {
	if m.Dump == "" || filepath.Base(m.Dump) != m.Dump {
		return fmt.Errorf("manifest names no dump file in %s", dir)
	}
	f, err := os.Open(filepath.Join(dir, m.Dump))
	if err != nil {
		return fmt.Errorf("opening the dump: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return fmt.Errorf("reading the dump: %w", err)
	}
	if n != m.DumpSize || hex.EncodeToString(h.Sum(nil)) != m.SHA256 {
		return fmt.Errorf("%s does not match its manifest (size or SHA-256 differs): the file is damaged", m.Dump)
	}
	return nil
}

func databaseSize(ctx context.Context, rawURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return 0, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	if err := conn.QueryRow(ctx, `SELECT pg_database_size(current_database())`).Scan(&n); err != nil {
		return 0, fmt.Errorf("reading the database size: %w", err)
	}
	return n, nil
}

// sanitize keeps a version usable in a file name.
func sanitize(v string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, v)
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// limitWriter keeps the first n bytes (a tool's error output).
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// EnvDir names the backup destination (default NEBULACTRL_DATA_DIR/backups).
const EnvDir = "NEBULACTRL_BACKUP_DIR"

// Destination is the configured backup directory: NEBULACTRL_BACKUP_DIR from
// the environment, else from the .env file, else DIR/backups under the data
// directory. It is absolute, or "" without a data directory.
func Destination(cfg config.Config) (string, error) {
	dir, ok := os.LookupEnv(EnvDir)
	if !ok && cfg.EnvFile != "" {
		m, err := godotenv.Read(cfg.EnvFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("reading %s: %w", cfg.EnvFile, err)
		}
		dir = m[EnvDir]
	}
	dir = strings.TrimSpace(dir)
	if dir == "" {
		if cfg.DataDir == "" {
			// No data directory (an embedding test): no destination, and
			// a backup that is needed fails.
			return "", nil
		}
		dir = filepath.Join(cfg.DataDir, DirName)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", EnvDir, dir, err)
	}
	return abs, nil
}
