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
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
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

// Record is upgrade.json: the last upgrade, and the versions refused.
type Record struct {
	ID   string `json:"id,omitempty"`
	From string `json:"from"`
	To   string `json:"to"`
	// State is one of transport.Upgrade*.
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Starts counts the new binary's starts while on probation.
	Starts int `json:"starts,omitempty"`
	// Refused maps a rolled-back version to when it may be installed again
	// without force.
	Refused map[string]time.Time `json:"refused,omitempty"`
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

// Start runs at the agent's start, before it connects: it removes what an
// interrupted upgrade left, completes a rollback that was decided, counts a
// start of a new binary on probation, and rolls back (ErrRestart: exit now)
// after MaxStarts starts without staying connected.
func (u *Updater) Start() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.cfg.Clock.Now().UTC()
	u.started = now
	if u.cfg.Binary != "" {
		if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(u.cfg.Binary), u.tmpPattern())); len(stale) > 0 {
			for _, f := range stale {
				_ = os.Remove(f)
			}
		}
		_ = os.Remove(u.prevTmp())
	}
	rec, err := u.read()
	if err != nil {
		// A record that cannot be read must not stop the agent: it starts
		// afresh, and says so.
		u.cfg.Logger.Warn("reading the upgrade record; starting without it", "file", u.recordPath(), "err", err)
		rec = nil
	}
	u.rec = rec
	if rec == nil {
		return nil
	}
	switch {
	case rec.State == transport.UpgradeProbation && u.cfg.Version != rec.To:
		// Killed after step 4 and before the rename: the old binary runs,
		// nothing was replaced.
		rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeFailed, "interrupted before the binary was replaced", now, 0
		return u.write(rec)
	case rec.State == transport.UpgradeRolledBack && u.cfg.Version == rec.To:
		// The rollback was decided and recorded, the rename not made yet.
		if err := u.restorePrev(); err != nil {
			u.cfg.Logger.Error("completing a rollback: the previous binary cannot be put back; running this one", "err", err)
			rec.Reason += "; the previous binary could not be put back: " + err.Error()
			return u.write(rec)
		}
		return ErrRestart
	case rec.State == transport.UpgradeProbation:
		if rec.Starts >= MaxStarts {
			return u.rollbackLocked(fmt.Sprintf("the new binary started %d times without staying connected to the control plane", rec.Starts))
		}
		rec.Starts++
		u.probation = true
		return u.write(rec)
	}
	return nil
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

// OnProbation reports whether this process is a new binary not yet kept.
func (u *Updater) OnProbation() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.probation
}

// Connected and Disconnected follow the link (its welcome and its end).
func (u *Updater) Connected()    { u.setConnected(true) }
func (u *Updater) Disconnected() { u.setConnected(false) }

func (u *Updater) setConnected(c bool) {
	u.mu.Lock()
	u.connected = c
	u.gen++
	u.mu.Unlock()
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// Run keeps the probation of a new binary until ctx ends: kept after
// KeepAfter connected; rolled back (and Exit) when it is not connected
// ConnectWithin after its start, or when, connected then, it drops before
// KeepAfter. Nothing to do otherwise.
func (u *Updater) Run(ctx context.Context) {
	u.mu.Lock()
	probation, started := u.probation, u.started
	u.mu.Unlock()
	if !probation {
		return
	}
	deadline := u.cfg.Clock.After(u.cfg.ConnectWithin - u.cfg.Clock.Now().Sub(started))
	armed := -1
	var keep <-chan time.Time
	// overdue: the deadline passed while connected (connected within
	// ConnectWithin): the binary is kept after KeepAfter connected, and
	// rolled back if it drops before.
	overdue := false
	rollback := func() {
		u.mu.Lock()
		err := u.rollbackLocked(fmt.Sprintf("the new binary did not stay connected to the control plane for %s within %s of its start",
			u.cfg.KeepAfter, u.cfg.ConnectWithin))
		u.mu.Unlock()
		if err != nil && !errors.Is(err, ErrRestart) {
			u.cfg.Logger.Error("rolling back", "err", err)
			return
		}
		u.cfg.Exit("rolled back")
	}
	for {
		u.mu.Lock()
		connected, gen := u.connected, u.gen
		u.mu.Unlock()
		switch {
		case connected && armed != gen:
			if overdue && armed != -1 {
				// Dropped and reconnected since the deadline.
				rollback()
				return
			}
			keep, armed = u.cfg.Clock.After(u.cfg.KeepAfter), gen
		case !connected:
			keep, armed = nil, -1
			if overdue {
				rollback()
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-u.changed:
		case <-keep:
			u.mu.Lock()
			still := u.connected && u.gen == armed
			u.mu.Unlock()
			if !still {
				continue
			}
			u.keep()
			return
		case <-deadline:
			u.mu.Lock()
			still := u.connected
			u.mu.Unlock()
			if still {
				// Connected within ConnectWithin: not rolled back now.
				deadline, overdue = nil, true
				continue
			}
			rollback()
			return
		}
	}
}

// keep ends the probation: the new binary stays.
func (u *Updater) keep() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.probation = false
	if u.rec == nil {
		return
	}
	u.rec.State, u.rec.Reason, u.rec.At, u.rec.Starts = transport.UpgradeSucceeded, "", u.cfg.Clock.Now().UTC(), 0
	if err := u.write(u.rec); err != nil {
		u.cfg.Logger.Error("recording the upgrade as kept", "err", err)
	}
	u.cfg.Logger.Info("upgrade kept: the new binary stayed connected", "from", u.rec.From, "to", u.rec.To)
}

// rollbackLocked records the rollback and its reason first (a process
// killed right after completes it at its next start), then renames
// <binary>.prev over the binary. It returns ErrRestart when the previous
// binary is in place.
func (u *Updater) rollbackLocked(reason string) error {
	now := u.cfg.Clock.Now().UTC()
	rec := u.rec
	if rec.Refused == nil {
		rec.Refused = map[string]time.Time{}
	}
	for v, until := range rec.Refused {
		if !until.After(now) {
			delete(rec.Refused, v)
		}
	}
	rec.Refused[rec.To] = now.Add(RefuseFor)
	rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeRolledBack, reason, now, 0
	u.probation = false
	if err := u.write(rec); err != nil {
		return fmt.Errorf("recording the rollback: %w", err)
	}
	u.cfg.Logger.Error("rolling the upgrade back", "from", rec.From, "to", rec.To, "reason", reason)
	if err := u.restorePrev(); err != nil {
		rec.Reason += "; the previous binary could not be put back: " + err.Error()
		_ = u.write(rec)
		return err
	}
	return ErrRestart
}

// restorePrev renames <binary>.prev over the binary: one atomic step.
func (u *Updater) restorePrev() error {
	if err := os.Rename(u.prev(), u.cfg.Binary); err != nil {
		return err
	}
	return syncDir(filepath.Dir(u.cfg.Binary))
}

func (u *Updater) read() (*Record, error) {
	b, err := os.ReadFile(u.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// write replaces upgrade.json atomically (a temporary file, synced, renamed).
func (u *Updater) write(r *Record) error {
	u.rec = r
	if err := os.MkdirAll(u.cfg.StateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := u.recordPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, u.recordPath()); err != nil {
		return err
	}
	return syncDir(u.cfg.StateDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// stop waits forever at the failpoint name, when the environment names it.
func (u *Updater) stop(name string) {
	if u.failpoint != name {
		return
	}
	fmt.Fprintf(os.Stderr, "selfupdate: stopped at failpoint %s\n", name)
	select {}
}

// stepError is a failed step.
type stepError struct {
	step int
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }

func fail(step int, format string, args ...any) error {
	return &stepError{step: step, err: fmt.Errorf(format, args...)}
}

// Upgrade runs the six steps for cmd and reports with report: after step 5
// (ok), or at the step that failed (nothing changed). After a success it
// waits for the agent's running work and calls Exit. One upgrade at a time.
func (u *Updater) Upgrade(ctx context.Context, cmd transport.AgentUpgrade, report func(transport.AgentUpgradeResult)) {
	res := transport.AgentUpgradeResult{ID: cmd.ID, Version: cmd.Version}
	if err := u.begin(cmd); err != nil {
		res.Error = err.Error()
		u.cfg.Logger.Warn("agent upgrade refused", "version", cmd.Version, "err", err)
		report(res)
		return
	}
	defer func() {
		u.mu.Lock()
		u.running = false
		u.mu.Unlock()
	}()
	u.cfg.Logger.Info("upgrading the agent", "from", u.cfg.Version, "to", cmd.Version)
	err := u.replace(ctx, cmd)
	if err != nil {
		var se *stepError
		if errors.As(err, &se) {
			res.Step = se.step
		}
		res.Error = err.Error()
		u.mu.Lock()
		rec := u.recordOrNew()
		rec.ID, rec.From, rec.To = cmd.ID, u.cfg.Version, cmd.Version
		rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeFailed, truncate(err.Error(), 500), u.cfg.Clock.Now().UTC(), 0
		if werr := u.write(rec); werr != nil {
			u.cfg.Logger.Warn("recording a failed upgrade", "err", werr)
		}
		u.mu.Unlock()
		u.cfg.Logger.Error("agent upgrade failed; nothing changed", "to", cmd.Version, "step", res.Step, "err", err)
		report(res)
		return
	}
	res.OK, res.Step = true, transport.UpgradeStepReplace
	report(res)
	u.stop("report")
	// Step 6: the running work finishes first.
	u.cfg.Logger.Info("agent binary replaced; restarting when the running work is done", "to", cmd.Version)
	limit := u.cfg.Clock.After(u.cfg.DrainLimit)
	for u.busy() {
		select {
		case <-limit:
			u.cfg.Logger.Warn("running work not done within the limit; restarting all the same", "limit", u.cfg.DrainLimit)
			u.cfg.Exit("upgraded")
			return
		case <-ctx.Done():
			// The agent stops anyway: its supervisor starts the new binary.
			return
		case <-time.After(u.cfg.PollBusy):
		}
	}
	u.cfg.Exit("upgraded")
}

func (u *Updater) recordOrNew() *Record {
	if u.rec == nil {
		u.rec = &Record{}
	}
	return u.rec
}

// begin checks that the upgrade may start, and marks it running.
func (u *Updater) begin(cmd transport.AgentUpgrade) error {
	if ok, why := u.Can(); !ok {
		return fmt.Errorf("this agent cannot upgrade itself: %s", why)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.running:
		return errors.New("an upgrade is already under way")
	case u.probation:
		return fmt.Errorf("version %s is still on probation: it upgrades once it has been kept", u.cfg.Version)
	case cmd.Version == u.cfg.Version:
		return fmt.Errorf("this agent already runs version %s", cmd.Version)
	case len(cmd.SHA256) != 64 || strings.Trim(strings.ToLower(cmd.SHA256), "0123456789abcdef") != "":
		return errors.New("the command's SHA-256 is not 64 hexadecimal digits")
	case cmd.Version == "" || len(cmd.Version) > 64 || strings.ContainsAny(cmd.Version, " \t\r\n/\\"):
		return errors.New("the command's version is not a version")
	}
	if u.rec != nil && !cmd.Force {
		if until, ok := u.rec.Refused[cmd.Version]; ok && u.cfg.Clock.Now().Before(until) {
			return fmt.Errorf("version %s was rolled back (%s); it is not installed again before %s unless forced",
				cmd.Version, u.rec.Reason, until.UTC().Format(time.RFC3339))
		}
	}
	u.running = true
	return nil
}

// replace runs steps 1 to 5.
func (u *Updater) replace(ctx context.Context, cmd transport.AgentUpgrade) error {
	dir := filepath.Dir(u.cfg.Binary)
	// Step 1: download beside the binary, hashing while reading.
	tmp, err := os.CreateTemp(dir, u.tmpPattern())
	if err != nil {
		return fail(transport.UpgradeStepDownload, "creating the download beside %s: %v", u.cfg.Binary, err)
	}
	name := tmp.Name()
	done := false
	defer func() {
		if !done {
			_ = os.Remove(name)
		}
	}()
	sum, err := u.download(ctx, tmp)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fail(transport.UpgradeStepDownload, "writing the download: %v", cerr)
	}
	if err != nil {
		return err
	}
	// Step 2: the hash.
	want, _ := hex.DecodeString(strings.ToLower(cmd.SHA256))
	if subtle.ConstantTimeCompare(sum, want) != 1 {
		return fail(transport.UpgradeStepChecksum, "the download's SHA-256 is %x, the command says %s: deleted, nothing changed", sum, strings.ToLower(cmd.SHA256))
	}
	u.stop("checksum")
	// Step 3: the new binary says its version.
	if err := os.Chmod(name, 0o755); err != nil {
		return fail(transport.UpgradeStepVersion, "making the download executable: %v", err)
	}
	got, err := runVersion(ctx, name)
	if err != nil {
		return fail(transport.UpgradeStepVersion, "running the new binary with --version: %v (a wrong architecture or a corrupt file)", err)
	}
	if got != cmd.Version {
		return fail(transport.UpgradeStepVersion, "the new binary says it is version %q, the command says %q", truncate(got, 80), cmd.Version)
	}
	u.stop("version")
	// Step 4: keep the running binary, record the upgrade.
	if err := u.keepPrev(); err != nil {
		return fail(transport.UpgradeStepKeep, "keeping %s: %v", u.prev(), err)
	}
	u.mu.Lock()
	rec := u.recordOrNew()
	rec.ID, rec.From, rec.To = cmd.ID, u.cfg.Version, cmd.Version
	rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeProbation, "", u.cfg.Clock.Now().UTC(), 0
	err = u.write(rec)
	u.mu.Unlock()
	if err != nil {
		return fail(transport.UpgradeStepKeep, "writing %s: %v", u.recordPath(), err)
	}
	u.stop("keep")
	// Step 5: one atomic rename.
	if err := os.Rename(name, u.cfg.Binary); err != nil {
		u.mu.Lock()
		rec.State, rec.Reason = transport.UpgradeFailed, "replacing the binary: "+err.Error()
		_ = u.write(rec)
		u.mu.Unlock()
		return fail(transport.UpgradeStepReplace, "replacing %s: %v", u.cfg.Binary, err)
	}
	done = true
	if err := syncDir(dir); err != nil {
		u.cfg.Logger.Warn("syncing the binary's directory", "err", err)
	}
	u.stop("replace")
	return nil
}

// download writes the control plane's agent binary for this architecture
// to f and returns its SHA-256.
func (u *Updater) download(ctx context.Context, f *os.File) ([]byte, error) {
	url := strings.TrimRight(u.cfg.URL, "/") + transport.DownloadPath + u.cfg.Arch
	dctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "download URL: %v", err)
	}
	u.mu.Lock()
	cred := u.cfg.Credential
	u.mu.Unlock()
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := u.cfg.HTTP.Do(req)
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error struct{ Code, Message string }
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &e) == nil && e.Error.Code != "" {
			return nil, fail(transport.UpgradeStepDownload, "downloading %s: %s: %s", url, e.Error.Code, e.Error.Message)
		}
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %s", url, resp.Status)
	}
	h := sha256.New()
	w := io.MultiWriter(f, h)
	body := io.LimitReader(resp.Body, MaxBinary+1)
	var n0 int64
	if u.failpoint == "download" {
		var err error
		if n0, err = io.CopyN(w, body, 1<<20); err == nil && f.Sync() == nil {
			u.stop("download")
		}
	}
	n, err := io.Copy(w, body)
	n += n0
	if err != nil {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %v after %d bytes", url, err, n)
	}
	if n > MaxBinary {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: larger than %d bytes", url, MaxBinary)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return nil, fail(transport.UpgradeStepDownload, "downloading %s: %d of %d bytes (truncated)", url, n, resp.ContentLength)
	}
	if err := f.Sync(); err != nil {
		return nil, fail(transport.UpgradeStepDownload, "writing the download: %v", err)
	}
	return h.Sum(nil), nil
}

// runVersion runs bin --version and returns what it printed, trimmed. A
// file just written can be "busy" for a moment (a fork elsewhere in the
// process held its descriptor): that is tried again.
func runVersion(ctx context.Context, bin string) (string, error) {
	var lastErr error
	for range 20 {
		vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		out, err := exec.CommandContext(vctx, bin, "--version").Output()
		cancel()
		if err == nil {
			return strings.TrimSpace(string(out)), nil
		}
		lastErr = err
		if !errors.Is(err, syscall.ETXTBSY) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ee *exec.ExitError
	if errors.As(lastErr, &ee) && len(ee.Stderr) > 0 {
		return "", fmt.Errorf("%v: %s", lastErr, truncate(strings.TrimSpace(string(ee.Stderr)), 200))
	}
	return "", lastErr
}

// keepPrev makes <binary>.prev the running binary: a hard link, or a copy
// (synced, then renamed) where links are not possible.
func (u *Updater) keepPrev() error {
	if err := os.Remove(u.prev()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Link(u.cfg.Binary, u.prev()); err == nil {
		return syncDir(filepath.Dir(u.cfg.Binary))
	}
	in, err := os.Open(u.cfg.Binary)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(u.prevTmp(), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	if err := os.Rename(u.prevTmp(), u.prev()); err != nil {
		return err
	}
	return syncDir(filepath.Dir(u.cfg.Binary))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
