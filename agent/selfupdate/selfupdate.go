// Package selfupdate is the agent's upgrade of itself and its probation.
//
// An agent_upgrade from the control plane runs the six steps of the
// product's description in order:
//
//  1. download the binary from the control plane URL the agent was started
//     with (/agent/v1/download/<arch>, with its credential) into a
//     temporary file beside its own binary, hashing while it reads;
//  2. compare the hash with the command's; a mismatch deletes the file and
//     fails the upgrade, nothing changed;
//  3. run <new> --version and require the command's version;
//  4. keep the running binary as <binary>.prev (a hard link, or a copy) and
//     write upgrade.json in the state directory;
//  5. replace the binary with one atomic rename: the path holds a whole
//     binary at every moment;
//  6. report success, wait until the agent's running work is done (at most
//     45 minutes) and exit, so that systemd (Restart=always) or the
//     container's restart policy starts the new binary.
//
// The new binary starts on probation: it is kept once it has stayed
// connected for 20 s; it is rolled back (<binary>.prev renamed over it, and
// the agent exits to restart) when it started 3 times without staying
// connected, or has not stayed connected within 5 minutes of its start. The
// rolled-back version is not installed again for 24 hours unless forced.
// upgrade.json survives every step: a process killed at any moment leaves a
// whole binary at the path and a record the next start completes.
package selfupdate

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nebulactrl/nebulactrl/transport"
)

// Timings and limits of the product's description.
const (
	// KeepAfter is how long a new binary stays connected before it is kept.
	KeepAfter = 20 * time.Second
	// ConnectWithin is how soon after its start a new binary must have
	// stayed connected, or it is rolled back.
	ConnectWithin = 5 * time.Minute
	// MaxStarts is how many starts without staying connected roll back.
	MaxStarts = 3
	// RefuseFor is how long a rolled-back version is not installed again
	// without force.
	RefuseFor = 24 * time.Hour
	// DrainLimit bounds the wait for the agent's running work before it
	// exits to restart.
	DrainLimit = 45 * time.Minute
	// StateFile is the upgrade's record in the state directory.
	StateFile = "upgrade.json"
	// MaxBinary bounds a download.
	MaxBinary = 512 << 20
)

// FailpointEnv names a point of the upgrade at which the process stops and
// waits to be killed: the tests that SIGKILL the agent at every step set it
// (download: 1 MiB into the download; checksum, version, keep, replace:
// after that step; report: after the result was sent). Unset, nothing
// stops.
const FailpointEnv = "NEBULACTRL_TEST_UPGRADE_STOP_AT"

// ErrRestart is returned by Start when the process must exit at once for
// its supervisor to start the binary at the path (a rollback was made).
var ErrRestart = errors.New("the agent binary was rolled back: exit so that it restarts")

// Clock is time for the probation and the records (tests inject one).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config configures the updater.
type Config struct {
	// Binary is the path of the running binary (default: os.Executable
	// with symbolic links resolved).
	Binary string
	// StateDir holds upgrade.json (created 0700 when missing).
	StateDir string
	// URL is the control plane's URL the agent was started with;
	// Credential its bearer credential; HTTP the client to download with
	// (default: one with the system roots that follows no redirect).
	URL        string
	Credential string
	HTTP       *http.Client
	// Version and Arch are the running binary's.
	Version, Arch string
	// Busy reports whether the agent has work running (an apply, a
	// rollout under way): step 6 waits until it has none.
	Busy func() bool
	// Exit ends the process so that its supervisor starts the binary at
	// the path again (the agent stops its link and returns ErrRestart).
	Exit   func(reason string)
	Clock  Clock
	Logger *slog.Logger
	// Timings (tests shorten them; zero: the constants above).
	KeepAfter, ConnectWithin, DrainLimit, PollBusy time.Duration
}

// Updater upgrades the agent and keeps its probation.
type Updater struct {
	cfg Config

	mu        sync.Mutex
	rec       *Record
	probation bool // this process is the new binary on probation
	started   time.Time
	connected bool
	gen       int // counts connection changes
	changed   chan struct{}
	running   bool // an upgrade is under way
	cannot    string
	failpoint string
}

// New returns an updater; it reads nothing yet (Start does).
func New(cfg Config) (*Updater, error) {
	if cfg.StateDir == "" || cfg.URL == "" || cfg.Version == "" {
		return nil, errors.New("selfupdate: needs a state directory, the control plane URL and the running version")
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Busy == nil {
		cfg.Busy = func() bool { return false }
	}
	if cfg.Exit == nil {
		cfg.Exit = func(string) { os.Exit(0) }
	}
	if cfg.KeepAfter <= 0 {
		cfg.KeepAfter = KeepAfter
	}
	if cfg.ConnectWithin <= 0 {
		cfg.ConnectWithin = ConnectWithin
	}
	if cfg.DrainLimit <= 0 {
		cfg.DrainLimit = DrainLimit
	}
	if cfg.PollBusy <= 0 {
		cfg.PollBusy = time.Second
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	}
	// The credential goes with the request: never to where a redirect points.
	hc := *cfg.HTTP
	hc.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the control plane redirects the download to %s: refused", r.URL.Redacted())
	}
	cfg.HTTP = &hc
	u := &Updater{cfg: cfg, changed: make(chan struct{}, 1), failpoint: os.Getenv(FailpointEnv)}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err == nil {
			exe, err = filepath.EvalSymlinks(exe)
		}
		if err != nil {
			u.cannot = transport.CannotUpgradeNoBinary
		}
		u.cfg.Binary = exe
	}
	return u, nil
}

// SetCredential gives the updater the agent's credential once it has one
// (after its registration).
func (u *Updater) SetCredential(c string) {
	u.mu.Lock()
	u.cfg.Credential = c
	u.mu.Unlock()
}

// SetBusy tells the updater how to know that the agent has work running.
func (u *Updater) SetBusy(busy func() bool) {
	u.mu.Lock()
	u.cfg.Busy = busy
	u.mu.Unlock()
}

func (u *Updater) busy() bool {
	u.mu.Lock()
	b := u.cfg.Busy
	u.mu.Unlock()
	return b()
}

// Binary is the path the updater replaces.
func (u *Updater) Binary() string { return u.cfg.Binary }

func (u *Updater) prev() string       { return u.cfg.Binary + ".prev" }
func (u *Updater) prevTmp() string    { return u.cfg.Binary + ".prev.tmp" }
func (u *Updater) recordPath() string { return filepath.Join(u.cfg.StateDir, StateFile) }
func (u *Updater) tmpPattern() string {
	return "." + filepath.Base(u.cfg.Binary) + ".download-*"
}

// Can says whether the agent can upgrade itself, and why not.
func (u *Updater) Can() (bool, string) {
	if u.cannot != "" {
		return false, u.cannot
	}
	switch u.cfg.Arch {
	case "amd64", "arm64":
	default:
		return false, transport.CannotUpgradeArch
	}
	if u.cfg.Binary == "" {
		return false, transport.CannotUpgradeNoBinary
	}
	if err := writable(filepath.Dir(u.cfg.Binary)); err != nil {
		return false, transport.CannotUpgradeNotWritable
	}
	if err := os.MkdirAll(u.cfg.StateDir, 0o700); err != nil || writable(u.cfg.StateDir) != nil {
		return false, "state directory not writable"
	}
	return true, ""
}

// writable tries to create a file in dir.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".nebulactrl-write-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Facts is the last upgrade for the host facts (nil when there was none).
func (u *Updater) Facts() *transport.UpgradeFacts {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.rec == nil || u.rec.State == "" {
		return nil
	}
	return &transport.UpgradeFacts{From: u.rec.From, To: u.rec.To, State: u.rec.State, Reason: u.rec.Reason, At: u.rec.At}
}
