// Package pgcluster runs a private PostgreSQL cluster from the machine's
// PostgreSQL binaries: initdb on first start, pg_ctl to start and stop it,
// listening on 127.0.0.1 only. It is the embedded default of `nebula serve`
// and the database of the tests.
//
// PostgreSQL refuses to run as root. When this process is root, the cluster's
// commands run as an unprivileged user (by default "postgres", which Debian's
// package creates) and the data directory is owned by that user.
//
// Ownership: the process that starts the postmaster owns it and holds an
// exclusive lock on <dir>/nebula.lock while it does. Another process that
// finds the postmaster running while the lock is held shares it (Stop leaves
// it alone). A postmaster found running with the lock free was left behind by
// a process that died without stopping it (kill -9): it is adopted, and
// stopped with its new owner. Supervise restarts a postmaster that dies.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config says where and how the cluster runs.
type Config struct {
	// Dir is the data directory. It is created and initialised when empty.
	Dir string
	// Port to listen on; 0 picks a free port (a restarted cluster keeps the
	// port it was last given in postgresql.auto.conf unless Port is set).
	Port int
	// BinDir holds initdb, pg_ctl and postgres; found on PATH or under
	// /usr/lib/postgresql/<major>/bin when empty.
	BinDir string
	// User is the superuser name inside the cluster.
	User string
	// Password, when set, turns on scram-sha-256 authentication for TCP
	// connections; without it, loopback connections are trusted (tests only).
	Password string
	// RunAs is the OS user that runs PostgreSQL when this process is root.
	RunAs string
	// Settings are extra postgresql.conf settings (for example fsync=off in tests).
	Settings map[string]string
	// StartTimeout bounds how long start-up may take.
	StartTimeout time.Duration
	// Restart says how Supervise restarts a postmaster that died.
	Restart Restart
	// WatchInterval is how often a postmaster that is not this process's
	// child (adopted or shared) is looked at. Default 1 s.
	WatchInterval time.Duration
	Logger        *slog.Logger
}

// Restart bounds Supervise's restarts of a postmaster that died.
type Restart struct {
	// Max restart attempts within Window before Supervise gives up.
	// Default 5 within 10 minutes.
	Max    int
	Window time.Duration
	// Backoff is the wait before the first attempt; it doubles after each
	// failed attempt, up to 30 s. Default 1 s.
	Backoff time.Duration
}

func (c *Config) setDefaults() {
	if c.User == "" {
		c.User = "nebula"
	}
	if c.RunAs == "" {
		c.RunAs = "postgres"
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 60 * time.Second
	}
	if c.Restart.Max <= 0 {
		c.Restart.Max = 5
	}
	if c.Restart.Window <= 0 {
		c.Restart.Window = 10 * time.Minute
	}
	if c.Restart.Backoff <= 0 {
		c.Restart.Backoff = time.Second
	}
	if c.WatchInterval <= 0 {
		c.WatchInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate joins every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("pgcluster: data directory is empty"))
	} else if !filepath.IsAbs(c.Dir) {
		errs = append(errs, fmt.Errorf("pgcluster: data directory %q is not absolute", c.Dir))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("pgcluster: port %d is out of range", c.Port))
	}
	return errors.Join(errs...)
}

// Cluster is a running PostgreSQL cluster.
type Cluster struct {
	cfg    Config
	port   int
	cred   *syscall.Credential
	uid    int
	gid    int
	logger *slog.Logger

	// stopped is closed by Stop: nothing restarts the postmaster after it.
	stopped  chan struct{}
	stopOnce sync.Once

	mu sync.Mutex
	// owned is false when another live process owns the postmaster (it
	// started or adopted it): Stop then leaves it alone.
	owned bool
	// lock is the held owner lock (nil unless owned).
	lock *os.File
	// pm is the postmaster watched now.
	pm *postmaster
}

// postmaster is one postmaster process and how its end is learnt: by
// waiting for it when this process started it, by looking otherwise.
type postmaster struct {
	pid    int
	child  bool
	exited chan struct{} // closed when it has exited
	status string        // how it ended, once exited is closed (children only)
}

// ErrNoBinaries means no PostgreSQL server binaries were found on this machine.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install them (Debian/Ubuntu: apt-get install postgresql) or put them on PATH")

// FindBinDir finds the directory of initdb and pg_ctl: PATH first, then the
// newest /usr/lib/postgresql/<major>/bin.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if _, err := exec.LookPath("initdb"); err == nil {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return filepath.Dir(real), nil
			}
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// Start initialises the data directory when it is new and starts the cluster,
// returning when it accepts connections. A postmaster already running in the
// directory is used: adopted when the process that started it is gone,
// shared when it still runs.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	c := &Cluster{cfg: cfg, logger: cfg.Logger, uid: -1, gid: -1, stopped: make(chan struct{})}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(cfg.RunAs)
		if err != nil {
			return nil, fmt.Errorf("pgcluster: running as root, PostgreSQL must run as an unprivileged user, but user %q does not exist (create it, or run as another user): %w", cfg.RunAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.uid, c.gid = uid, gid
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := c.ensureDir(); err != nil {
		return nil, err
	}
	fresh, err := c.initIfNeeded(ctx)
	if err != nil {
		return nil, err
	}
	lock, holder, err := c.tryLock()
	if err != nil {
		return nil, err
	}
	if pid, port, ok := c.livePostmaster(); ok && !fresh {
		c.port = port
		if lock != nil {
			// Running, and no live process owns it: its owner died
			// without stopping it. Adopt it, to stop it with this process.
			c.owned, c.lock = true, lock
			c.logger.Warn("adopting the PostgreSQL left running by a process that ended without stopping it; it stops with this process",
				"dir", cfg.Dir, "pid", pid, "port", port)
		} else {
			c.logger.Info("using the PostgreSQL that another process runs", "dir", cfg.Dir, "pid", pid, "owner_pid", holder, "port", port)
		}
		c.pm = c.watch(pid)
		if err := c.waitReady(ctx, c.pm); err != nil {
			c.release()
			return nil, err
		}
		return c, nil
	}
	if lock == nil {
		// Another live process owns the directory and PostgreSQL is not
		// running: it is starting (or restarting) it. Wait for that.
		pm, err := c.waitForOwner(ctx, holder)
		if err != nil {
			return nil, err
		}
		c.pm = pm
		return c, nil
	}
	c.owned, c.lock = true, lock
	c.port = cfg.Port
	if c.port == 0 {
		if p, ok := c.lastPort(); ok && !fresh && portFree(p) {
			c.port = p
		} else if c.port, err = FreePort(); err != nil {
			c.release()
			return nil, err
		}
	}
	if err := c.startPostmaster(ctx); err != nil {
		c.release()
		return nil, err
	}
	return c, nil
}

// Port is the TCP port the cluster listens on (127.0.0.1).
func (c *Cluster) Port() int { return c.port }

// Dir is the data directory.
func (c *Cluster) Dir() string { return c.cfg.Dir }

// BinDir is where the cluster's binaries are (pg_dump lives there too).
func (c *Cluster) BinDir() string { return c.cfg.BinDir }

// URL returns a connection URL for database db.
func (c *Cluster) URL(db string) string {
	auth := c.cfg.User
	if c.cfg.Password != "" {
		auth += ":" + urlEscape(c.cfg.Password)
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", auth, c.port, db)
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') || r == '-' || r == '_' || r == '.' || r == '~' {
			b.WriteRune(r)
		} else {
			fmt.Fprintf(&b, "%%%02X", r)
		}
	}
	return b.String()
}

// LogFile is the server log written by pg_ctl.
func (c *Cluster) LogFile() string { return filepath.Join(c.cfg.Dir, "server.log") }

func (c *Cluster) pgdata() string { return filepath.Join(c.cfg.Dir, "pgdata") }

func (c *Cluster) ensureDir() error {
	if err := os.MkdirAll(c.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("pgcluster: creating %s: %w", c.cfg.Dir, err)
	}
	if c.cred == nil {
		return nil
	}
	if err := os.Chown(c.cfg.Dir, c.uid, c.gid); err != nil {
		return fmt.Errorf("pgcluster: giving %s to user %s: %w", c.cfg.Dir, c.cfg.RunAs, err)
	}
	// The unprivileged user must be able to reach the directory.
	probe := exec.Command("test", "-w", c.cfg.Dir)
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if err := probe.Run(); err != nil {
		return fmt.Errorf("pgcluster: user %s cannot write %s (a parent directory is probably closed to it; choose a data directory it can reach, such as one under /var/lib or /tmp)", c.cfg.RunAs, c.cfg.Dir)
	}
	return nil
}

func (c *Cluster) initIfNeeded(ctx context.Context) (bool, error) {
	if _, err := os.Stat(filepath.Join(c.pgdata(), "PG_VERSION")); err == nil {
		return false, nil
	}
	args := []string{"-D", c.pgdata(), "-U", c.cfg.User, "--encoding=UTF8", "--locale=C", "--no-sync"}
	if c.cfg.Password != "" {
		pwfile := filepath.Join(c.cfg.Dir, ".initdb-pw")
		if err := os.WriteFile(pwfile, []byte(c.cfg.Password+"\n"), 0o600); err != nil {
			return false, fmt.Errorf("pgcluster: writing password file: %w", err)
		}
		defer os.Remove(pwfile)
		if c.cred != nil {
			if err := os.Chown(pwfile, c.uid, c.gid); err != nil {
				return false, fmt.Errorf("pgcluster: chown password file: %w", err)
			}
		}
		args = append(args, "--pwfile", pwfile, "--auth-host=scram-sha-256", "--auth-local=scram-sha-256")
	} else {
		args = append(args, "--auth=trust")
	}
	if out, err := c.run(ctx, "initdb", args...); err != nil {
		return false, fmt.Errorf("pgcluster: initdb: %w: %s", err, out)
	}
	return true, nil
}

// lastPort reads the port a previous start recorded.
func (c *Cluster) lastPort() (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.pgdata(), "nebula.conf"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "port = "); ok {
			p, err := strconv.Atoi(strings.TrimSpace(v))
			return p, err == nil
		}
	}
	return 0, false
}

func (c *Cluster) writeSettings() error {
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"unix_socket_directories": "''",
		"port":                    strconv.Itoa(c.port),
		"max_connections":         "200",
		"logging_collector":       "off",
	}
	for k, v := range c.cfg.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString("# Written by NebulaCtrl at every start; edit the configuration, not this file.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	path := filepath.Join(c.pgdata(), "nebula.conf")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("pgcluster: writing %s: %w", path, err)
	}
	if c.cred != nil {
		if err := os.Chown(path, c.uid, c.gid); err != nil {
			return fmt.Errorf("pgcluster: chown %s: %w", path, err)
		}
	}
	conf := filepath.Join(c.pgdata(), "postgresql.conf")
	existing, err := os.ReadFile(conf)
	if err != nil {
		return fmt.Errorf("pgcluster: reading %s: %w", conf, err)
	}
	if !bytes.Contains(existing, []byte("include_if_exists = 'nebula.conf'")) {
		f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fmt.Errorf("pgcluster: opening %s: %w", conf, err)
		}
		defer f.Close()
		if _, err := f.WriteString("\ninclude_if_exists = 'nebula.conf'\n"); err != nil {
			return fmt.Errorf("pgcluster: appending to %s: %w", conf, err)
		}
	}
	return nil
}

// startPostmaster writes the settings and runs the postmaster as a child of
// this process (so that its end is learnt at once, and it is reaped), in a
// session of its own (so that a Ctrl-C meant for this process does not stop
// the database under it), and waits until it accepts connections.
func (c *Cluster) startPostmaster(ctx context.Context) error {
	if err := c.writeSettings(); err != nil {
		return err
	}
	logf, err := os.OpenFile(c.LogFile(), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pgcluster: opening %s: %w", c.LogFile(), err)
	}
	if c.cred != nil {
		_ = logf.Chown(c.uid, c.gid)
	}
	cmd := exec.Command(filepath.Join(c.cfg.BinDir, "postgres"), "-D", c.pgdata())
	cmd.Dir = c.cfg.Dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: c.cred}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return fmt.Errorf("pgcluster: starting postgres: %w", err)
	}
	pm := &postmaster{pid: cmd.Process.Pid, child: true, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		pm.status = "exited"
		if err != nil {
			pm.status = err.Error()
		}
		close(pm.exited)
	}()
	if err := c.waitReady(ctx, pm); err != nil {
		// Never leave a half-started postmaster behind.
		_ = cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-pm.exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-pm.exited
		}
		return err
	}
	c.pm = pm
	c.logger.Debug("postgresql started", "dir", c.cfg.Dir, "port", c.port, "pid", pm.pid)
	return nil
}

// childEnv is this process's environment for PostgreSQL's processes, less
// NEBULACTRL_* (which can hold the master key) and with the C locale.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NEBULACTRL_") && !strings.HasPrefix(kv, "LC_ALL=") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

// waitReady waits until the cluster accepts connections, failing early when
// pm exits.
func (c *Cluster) waitReady(ctx context.Context, pm *postmaster) error {
	deadline := time.Now().Add(c.cfg.StartTimeout)
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-pm.exited:
			return fmt.Errorf("pgcluster: postgres exited (%s) before accepting connections\nserver log:\n%s", pm.status, c.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: server did not accept connections within %s: %w\nserver log:\n%s", c.cfg.StartTimeout, err, c.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-pm.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) logTail() string {
	tail, _ := os.ReadFile(c.LogFile())
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return string(tail)
}

// Run runs one of the cluster's binaries (pg_dump, psql, ...) as the cluster's
// user and returns its combined output.
func (c *Cluster) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.run(ctx, name, args...)
}

func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.cfg.BinDir, name), args...)
	cmd.Dir = c.cfg.Dir
	cmd.Env = childEnv()
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
