package selfupdate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/transport"
)

// script is a stand-in agent binary for these unit tests: a shell script
// that answers --version (the agent tests run real Go binaries).
func script(version string) []byte {
	return []byte("#!/bin/sh\nif [ \"$1\" = --version ]; then echo " + version + "; exit 0; fi\nexit 0\n")
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// controlPlane serves a download: body (or a truncated one), for the
// credential "good".
type controlPlane struct {
	mu       sync.Mutex
	body     []byte
	truncate int // serve only this many bytes, with the full length announced
	redirect string
	hits     atomic.Int32
}

func (cp *controlPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cp.hits.Add(1)
	if r.Header.Get("Authorization") != "Bearer good" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"the credential is not valid"}}`))
		return
	}
	if r.URL.Path != transport.DownloadPath+"amd64" {
		http.NotFound(w, r)
		return
	}
	cp.mu.Lock()
	body, trunc, redirect := cp.body, cp.truncate, cp.redirect
	cp.mu.Unlock()
	if redirect != "" {
		http.Redirect(w, r, redirect, http.StatusFound)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if trunc > 0 {
		_, _ = w.Write(body[:trunc])
		// Hijack and close: the body ends early.
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
			}
		}
		return
	}
	_, _ = w.Write(body)
}

type fixture struct {
	t      *testing.T
	dir    string
	bin    string
	state  string
	clock  *testclock.Clock
	cp     *controlPlane
	srv    *httptest.Server
	exits  chan string
	busy   atomic.Bool
	cred   string
	arch   string
	keepMs time.Duration
}

// setup is the bundle each test starts from: a script standing in for the
// agent binary of the running version, a state directory, a control plane
// serving downloads, and the injected clock.
func setup(t *testing.T, running string) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir(), clock: testclock.New(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)), cp: &controlPlane{}, exits: make(chan string, 4), cred: "good", arch: "amd64"}
	f.bin = filepath.Join(f.dir, "bin", "nebulactrl-agent")
	f.state = filepath.Join(f.dir, "state")
	require.NoError(t, os.MkdirAll(filepath.Dir(f.bin), 0o755))
	require.NoError(t, os.WriteFile(f.bin, script(running), 0o755))
	f.srv = httptest.NewServer(f.cp)
	t.Cleanup(f.srv.Close)
	return f
}

// updater is the updater of a process running version.
func (f *fixture) updater(version string) *Updater {
	f.t.Helper()
	u, err := New(Config{Binary: f.bin, StateDir: f.state, URL: f.srv.URL, Credential: f.cred, Version: version, Arch: f.arch,
		Clock: f.clock, Exit: func(r string) { f.exits <- r }, Busy: f.busy.Load, PollBusy: 5 * time.Millisecond})
	require.NoError(f.t, err)
	return u
}

func (f *fixture) binary() string {
	b, err := os.ReadFile(f.bin)
	require.NoError(f.t, err)
	return string(b)
}

func (f *fixture) record() Record {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.state, StateFile))
	require.NoError(f.t, err)
	var r Record
	require.NoError(f.t, json.Unmarshal(b, &r))
	return r
}

// leftovers lists what is in the binary's directory besides the binary.
func (f *fixture) leftovers() []string {
	entries, err := os.ReadDir(filepath.Dir(f.bin))
	require.NoError(f.t, err)
	var out []string
	for _, e := range entries {
		if e.Name() != filepath.Base(f.bin) {
			out = append(out, e.Name())
		}
	}
	return out
}

func (f *fixture) upgrade(u *Updater, cmd transport.AgentUpgrade) transport.AgentUpgradeResult {
	f.t.Helper()
	got := make(chan transport.AgentUpgradeResult, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.Upgrade(context.Background(), cmd, func(r transport.AgentUpgradeResult) { got <- r })
	}()
	select {
	case r := <-got:
		if !r.OK {
			<-done
		}
		return r
	case <-time.After(30 * time.Second):
		f.t.Fatal("no upgrade result")
	}
	return transport.AgentUpgradeResult{}
}

// Steps 1 to 6 in order: the download is checked, --version asked, the
// running binary kept as .prev, upgrade.json written, the binary replaced,
// success reported, and the agent exits only when its running work is done.
func TestUpgradeReplacesTheBinaryAndExitsWhenIdle(t *testing.T) {
	f := setup(t, "1.0.0")
	v2 := script("2.0.0")
	f.cp.body = v2
	u := f.updater("1.0.0")
	require.NoError(t, u.Start())
	ok, why := u.Can()
	require.True(t, ok, why)
	f.busy.Store(true)
	res := f.upgrade(u, transport.AgentUpgrade{ID: "up-1", Version: "2.0.0", SHA256: sum(v2)})
	require.Equal(t, transport.AgentUpgradeResult{ID: "up-1", Version: "2.0.0", OK: true, Step: transport.UpgradeStepReplace}, res)
	require.Equal(t, string(v2), f.binary())
	prev, err := os.ReadFile(f.bin + ".prev")
	require.NoError(t, err)
	require.Equal(t, string(script("1.0.0")), string(prev))
	require.ElementsMatch(t, []string{"nebulactrl-agent.prev"}, f.leftovers(), "no download is left behind")
	rec := f.record()
	require.Equal(t, "1.0.0", rec.From)
	require.Equal(t, "2.0.0", rec.To)
	require.Equal(t, transport.UpgradeProbation, rec.State)
	st, err := os.Stat(filepath.Join(f.state, StateFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// Step 6: busy holds the exit back; idle lets it go.
	select {
	case r := <-f.exits:
		t.Fatalf("exited (%s) while the agent was busy", r)
	case <-time.After(100 * time.Millisecond):
	}
	f.busy.Store(false)
	select {
	case r := <-f.exits:
		require.Equal(t, "upgraded", r)
	case <-time.After(5 * time.Second):
		t.Fatal("no exit once idle")
	}
}

// Step 6 waits at most DrainLimit for running work (injected clock).
func TestUpgradeExitsAfterTheDrainLimit(t *testing.T) {
	f := setup(t, "1.0.0")
	v2 := script("2.0.0")
	f.cp.body = v2
	u := f.updater("1.0.0")
	require.NoError(t, u.Start())
	f.busy.Store(true)
	require.True(t, f.upgrade(u, transport.AgentUpgrade{ID: "up", Version: "2.0.0", SHA256: sum(v2)}).OK)
	require.Eventually(t, func() bool { return f.clock.Waiting() == 1 }, 5*time.Second, time.Millisecond)
	f.clock.Advance(DrainLimit - time.Second)
	select {
	case <-f.exits:
		t.Fatal("exited before the limit")
	case <-time.After(50 * time.Millisecond):
	}
	f.clock.Advance(time.Second)
	select {
	case r := <-f.exits:
		require.Equal(t, "upgraded", r)
	case <-time.After(5 * time.Second):
		t.Fatal("no exit at the drain limit")
	}
}

// Each failure before the rename leaves the running binary in place, no
// .prev made, no download left behind, the failing step reported and
// recorded, and no exit.
func TestFailedUpgradesChangeNothing(t *testing.T) {
	v2 := script("2.0.0")
	cases := []struct {
		name  string
		setup func(f *fixture) transport.AgentUpgrade
		step  int
		msg   string
	}{
		{"hash mismatch", func(f *fixture) transport.AgentUpgrade {
			f.cp.body = v2
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum([]byte("something else"))}
		}, transport.UpgradeStepChecksum, "SHA-256"},
		{"truncated download", func(f *fixture) transport.AgentUpgrade {
			f.cp.body, f.cp.truncate = v2, len(v2)/2
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum(v2)}
		}, transport.UpgradeStepDownload, "downloading"},
		{"wrong --version", func(f *fixture) transport.AgentUpgrade {
			v9 := script("9.9.9")
			f.cp.body = v9
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum(v9)}
		}, transport.UpgradeStepVersion, `says it is version "9.9.9"`},
		{"not a binary", func(f *fixture) transport.AgentUpgrade {
			junk := []byte("\x7fELF not really")
			f.cp.body = junk
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum(junk)}
		}, transport.UpgradeStepVersion, "--version"},
		{"credential refused", func(f *fixture) transport.AgentUpgrade {
			f.cp.body, f.cred = v2, "bad"
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum(v2)}
		}, transport.UpgradeStepDownload, "unauthorized"},
		{"redirect", func(f *fixture) transport.AgentUpgrade {
			f.cp.body, f.cp.redirect = v2, "http://elsewhere.invalid/agent"
			return transport.AgentUpgrade{ID: "x", Version: "2.0.0", SHA256: sum(v2)}
		}, transport.UpgradeStepDownload, "redirects"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := setup(t, "1.0.0")
			cmd := c.setup(f)
			u := f.updater("1.0.0")
			require.NoError(t, u.Start())
			res := f.upgrade(u, cmd)
			require.False(t, res.OK)
			require.Equal(t, c.step, res.Step, res.Error)
			require.Contains(t, res.Error, c.msg)
			require.Equal(t, string(script("1.0.0")), f.binary(), "the running binary stays")
			require.Empty(t, f.leftovers(), "no .prev, no download left")
			rec := f.record()
			require.Equal(t, transport.UpgradeFailed, rec.State)
			require.Equal(t, "2.0.0", rec.To)
			require.NotEmpty(t, rec.Reason)
			require.Equal(t, &transport.UpgradeFacts{From: "1.0.0", To: "2.0.0", State: "failed", Reason: rec.Reason, At: f.clock.Now()}, u.Facts())
			select {
			case r := <-f.exits:
				t.Fatalf("exited (%s) after a failed upgrade", r)
			default:
			}
		})
	}
}

// Commands that cannot start are refused before anything is downloaded.
func TestUpgradeRefusals(t *testing.T) {
	f := setup(t, "1.0.0")
	v2 := script("2.0.0")
	f.cp.body = v2
	u := f.updater("1.0.0")
	require.NoError(t, u.Start())
	for _, c := range []struct {
		cmd transport.AgentUpgrade
		msg string
	}{
		{transport.AgentUpgrade{ID: "a", Version: "1.0.0", SHA256: sum(v2)}, "already runs"},
		{transport.AgentUpgrade{ID: "b", Version: "2.0.0", SHA256: "abc"}, "SHA-256"},
		{transport.AgentUpgrade{ID: "c", Version: "../2", SHA256: sum(v2)}, "not a version"},
	} {
		res := f.upgrade(u, c.cmd)
		require.False(t, res.OK)
		require.Equal(t, 0, res.Step)
		require.Contains(t, res.Error, c.msg)
	}
	require.Zero(t, f.cp.hits.Load(), "nothing was downloaded")
	require.Equal(t, string(script("1.0.0")), f.binary())
}

// A new binary is kept once it has stayed connected for 20 s (a shorter
// connection does not count); upgrade.json says succeeded, .prev stays as
// one generation for a manual rollback.
func TestProbationKeepsABinaryThatStaysConnected(t *testing.T) {
	f := setup(t, "1.0.0")
	v2 := script("2.0.0")
	f.cp.body = v2
	old := f.updater("1.0.0")
	require.NoError(t, old.Start())
	require.True(t, f.upgrade(old, transport.AgentUpgrade{ID: "up", Version: "2.0.0", SHA256: sum(v2)}).OK)
	<-f.exits

	u := f.updater("2.0.0")
	require.NoError(t, u.Start())
	require.True(t, u.OnProbation())
	require.Equal(t, 1, f.record().Starts)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	base := f.clock.Waiting() // the old binary's drain limit
	go func() { defer close(done); u.Run(ctx) }()
	require.Eventually(t, func() bool { return f.clock.Waiting() == base+1 }, 5*time.Second, time.Millisecond) // the 5-minute deadline
	u.Connected()
	require.Eventually(t, func() bool { return f.clock.Waiting() == base+2 }, 5*time.Second, time.Millisecond)
	f.clock.Advance(10 * time.Second)
	u.Disconnected() // 10 s is not enough
	time.Sleep(20 * time.Millisecond)
	f.clock.Advance(15 * time.Second)
	require.True(t, u.OnProbation())
	u.Connected()
	require.Eventually(t, func() bool { return f.clock.Waiting() >= base+2 }, 5*time.Second, time.Millisecond)
	f.clock.Advance(KeepAfter)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("not kept after 20 s connected")
	}
	require.False(t, u.OnProbation())
	rec := f.record()
	require.Equal(t, transport.UpgradeSucceeded, rec.State)
	require.Zero(t, rec.Starts)
	require.Equal(t, string(v2), f.binary())
	_, err := os.Stat(f.bin + ".prev")
	require.NoError(t, err, ".prev stays for a manual rollback")
	select {
	case r := <-f.exits:
		t.Fatalf("exited (%s) although kept", r)
	default:
	}
	// A later start of the kept binary is no probation.
	again := f.updater("2.0.0")
	require.NoError(t, again.Start())
	require.False(t, again.OnProbation())
}

// upgraded runs an upgrade 1.0.0 -> 2.0.0 and returns the bytes of 2.0.0.
func (f *fixture) upgraded(force bool) []byte {
	f.t.Helper()
	v2 := script("2.0.0")
	f.cp.body = v2
	old := f.updater("1.0.0")
	require.NoError(f.t, old.Start())
	res := f.upgrade(old, transport.AgentUpgrade{ID: "up", Version: "2.0.0", SHA256: sum(v2), Force: force})
	require.True(f.t, res.OK, res.Error)
	<-f.exits
	return v2
}

// A new binary that has not stayed connected within 5 minutes of its start
// is rolled back: .prev renamed over it, the reason recorded, the agent
// exits; the version is refused for 24 hours unless forced (injected clock).
func TestProbationRollsBackABinaryThatNeverConnects(t *testing.T) {
	f := setup(t, "1.0.0")
	f.upgraded(false)
	u := f.updater("2.0.0")
	require.NoError(t, u.Start())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := f.clock.Waiting() // the old binary's drain limit
	go u.Run(ctx)
	require.Eventually(t, func() bool { return f.clock.Waiting() == base+1 }, 5*time.Second, time.Millisecond)
	f.clock.Advance(ConnectWithin - time.Second)
	select {
	case <-f.exits:
		t.Fatal("rolled back early")
	case <-time.After(50 * time.Millisecond):
	}
	f.clock.Advance(time.Second)
	select {
	case r := <-f.exits:
		require.Equal(t, "rolled back", r)
	case <-time.After(5 * time.Second):
		t.Fatal("not rolled back after 5 minutes")
	}
	require.Equal(t, string(script("1.0.0")), f.binary(), "the previous binary is back")
	require.Empty(t, f.leftovers())
	rec := f.record()
	require.Equal(t, transport.UpgradeRolledBack, rec.State)
	require.Contains(t, rec.Reason, "did not stay connected")
	require.Equal(t, f.clock.Now().Add(RefuseFor), rec.Refused["2.0.0"])

	// The old binary starts again: the record travels in the facts, and
	// 2.0.0 is refused for 24 hours unless forced.
	back := f.updater("1.0.0")
	require.NoError(t, back.Start())
	require.False(t, back.OnProbation())
	facts := back.Facts()
	require.Equal(t, "rolled_back", facts.State)
	require.Contains(t, facts.Reason, "did not stay connected")
	v2 := script("2.0.0")
	res := f.upgrade(back, transport.AgentUpgrade{ID: "again", Version: "2.0.0", SHA256: sum(v2)})
	require.False(t, res.OK)
	require.Contains(t, res.Error, "rolled back")
	require.Equal(t, string(script("1.0.0")), f.binary())
	f.clock.Advance(RefuseFor - time.Minute)
	require.False(t, f.upgrade(back, transport.AgentUpgrade{ID: "again", Version: "2.0.0", SHA256: sum(v2)}).OK, "still within 24 h")
	f.clock.Advance(time.Minute)
	res = f.upgrade(back, transport.AgentUpgrade{ID: "later", Version: "2.0.0", SHA256: sum(v2)})
	require.True(t, res.OK, "after 24 h it may be installed again: %s", res.Error)
}

// A forced upgrade installs a rolled-back version within the 24 hours.
func TestForceInstallsARolledBackVersion(t *testing.T) {
	f := setup(t, "1.0.0")
	f.upgraded(false)
	u := f.updater("2.0.0")
	require.NoError(t, u.Start())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base := f.clock.Waiting() // the old binary's drain limit
	go u.Run(ctx)
	require.Eventually(t, func() bool { return f.clock.Waiting() == base+1 }, 5*time.Second, time.Millisecond)
	f.clock.Advance(ConnectWithin)
	<-f.exits
	back := f.updater("1.0.0")
	require.NoError(t, back.Start())
	v2 := script("2.0.0")
	require.False(t, f.upgrade(back, transport.AgentUpgrade{ID: "a", Version: "2.0.0", SHA256: sum(v2)}).OK)
	res := f.upgrade(back, transport.AgentUpgrade{ID: "b", Version: "2.0.0", SHA256: sum(v2), Force: true})
	require.True(t, res.OK, res.Error)
	require.Equal(t, string(v2), f.binary())
	require.Equal(t, transport.UpgradeProbation, f.record().State)
}

// A new binary that starts 3 times without staying connected (a crash
// loop) is rolled back at its next start.
func TestProbationRollsBackACrashLoop(t *testing.T) {
	f := setup(t, "1.0.0")
	f.upgraded(false)
	for i := 1; i <= MaxStarts; i++ {
		u := f.updater("2.0.0")
		require.NoError(t, u.Start(), "start %d", i)
		require.Equal(t, i, f.record().Starts)
		// ... and it crashes: nothing else runs.
	}
	u := f.updater("2.0.0")
	require.ErrorIs(t, u.Start(), ErrRestart)
	require.Equal(t, string(script("1.0.0")), f.binary())
	rec := f.record()
	require.Equal(t, transport.UpgradeRolledBack, rec.State)
	require.Contains(t, rec.Reason, "started 3 times without staying connected")
	require.Contains(t, rec.Refused, "2.0.0")
}

// A process killed between two steps leaves a record the next start
// completes: after step 4 (nothing replaced) the old binary records the
// upgrade as failed; after the rollback was recorded and before its
// rename, the new binary completes the rollback; a download left behind is
// removed.
func TestStartCompletesWhatAKillInterrupted(t *testing.T) {
	t.Run("after step 4", func(t *testing.T) {
		f := setup(t, "1.0.0")
		u := f.updater("1.0.0")
		require.NoError(t, u.Start())
		require.NoError(t, u.keepPrev())
		require.NoError(t, u.write(&Record{From: "1.0.0", To: "2.0.0", State: transport.UpgradeProbation, At: f.clock.Now()}))
		require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(f.bin), ".nebulactrl-agent.download-123"), []byte("half"), 0o600))
		again := f.updater("1.0.0")
		require.NoError(t, again.Start())
		require.False(t, again.OnProbation())
		rec := f.record()
		require.Equal(t, transport.UpgradeFailed, rec.State)
		require.Contains(t, rec.Reason, "interrupted")
		require.Equal(t, []string{"nebulactrl-agent.prev"}, f.leftovers(), "the download left behind is removed")
		require.Equal(t, string(script("1.0.0")), f.binary())
	})
	t.Run("rollback recorded, not renamed", func(t *testing.T) {
		f := setup(t, "1.0.0")
		v2 := f.upgraded(false)
		require.Equal(t, string(v2), f.binary())
		u := f.updater("2.0.0")
		rec := f.record()
		rec.State, rec.Reason = transport.UpgradeRolledBack, "the new binary did not stay connected"
		require.NoError(t, u.write(&rec))
		require.ErrorIs(t, u.Start(), ErrRestart)
		require.Equal(t, string(script("1.0.0")), f.binary())
	})
}

// The hello's reasons: a binary whose directory is not writable, an
// architecture the control plane serves no binary for.
func TestCannotUpgradeSaysWhy(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes anywhere: the directory check is made by creating a
		// file, so a read-only mount is what it finds; tested with one
		// that is not a directory instead.
		f := setup(t, "1.0.0")
		f.bin = filepath.Join(f.dir, "missing-dir", "nebulactrl-agent")
		ok, why := f.updater("1.0.0").Can()
		require.False(t, ok)
		require.Equal(t, transport.CannotUpgradeNotWritable, why)
	} else {
		f := setup(t, "1.0.0")
		require.NoError(t, os.Chmod(filepath.Dir(f.bin), 0o555))
		t.Cleanup(func() { _ = os.Chmod(filepath.Dir(f.bin), 0o755) })
		ok, why := f.updater("1.0.0").Can()
		require.False(t, ok)
		require.Equal(t, transport.CannotUpgradeNotWritable, why)
	}
	f := setup(t, "1.0.0")
	f.arch = "riscv64"
	ok, why := f.updater("1.0.0").Can()
	require.False(t, ok)
	require.Equal(t, transport.CannotUpgradeArch, why)
	f.arch = "arm64"
	ok, why = f.updater("1.0.0").Can()
	require.True(t, ok, why)
}

// A new binary that connects just before the 5-minute mark was connected
// within 5 minutes: it is not rolled back at the mark, and it is kept once
// it has stayed connected for 20 s (injected clock). One that drops before
// those 20 s, after the mark, is rolled back.
func TestProbationKeepsABinaryThatConnectsJustBeforeTheDeadline(t *testing.T) {
	for _, drops := range []bool{false, true} {
		t.Run(fmt.Sprintf("drops=%v", drops), func(t *testing.T) {
			f := setup(t, "1.0.0")
			v2 := f.upgraded(false)
			u := f.updater("2.0.0")
			require.NoError(t, u.Start())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			base := f.clock.Waiting()
			go func() { defer close(done); u.Run(ctx) }()
			require.Eventually(t, func() bool { return f.clock.Waiting() == base+1 }, 5*time.Second, time.Millisecond)
			f.clock.Advance(ConnectWithin - 10*time.Second)
			u.Connected()
			require.Eventually(t, func() bool { return f.clock.Waiting() == base+2 }, 5*time.Second, time.Millisecond)
			f.clock.Advance(10 * time.Second) // the 5-minute mark, connected for 10 s
			select {
			case r := <-f.exits:
				t.Fatalf("exited (%s) although connected within 5 minutes", r)
			case <-time.After(50 * time.Millisecond):
			}
			require.Equal(t, string(v2), f.binary())
			if drops {
				u.Disconnected()
				select {
				case r := <-f.exits:
					require.Equal(t, "rolled back", r)
				case <-time.After(5 * time.Second):
					t.Fatal("not rolled back after dropping past the 5-minute mark")
				}
				require.Equal(t, string(script("1.0.0")), f.binary())
				require.Equal(t, transport.UpgradeRolledBack, f.record().State)
				return
			}
			f.clock.Advance(KeepAfter - 10*time.Second)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("not kept after 20 s connected")
			}
			require.False(t, u.OnProbation())
			require.Equal(t, transport.UpgradeSucceeded, f.record().State)
			require.Equal(t, string(v2), f.binary())
			select {
			case r := <-f.exits:
				t.Fatalf("exited (%s) although kept", r)
			default:
			}
		})
	}
}
