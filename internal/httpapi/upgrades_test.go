package httpapi_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/transport"
)

// These tests drive agent upgrades through the API of a real control plane
// (real PostgreSQL, the real websocket hub, the reactions and their timers)
// with protocol-level agents: each fake agent below is the transport client
// the real agent uses, with its upgrade reduced to what the control plane
// sees of it (a result frame, a restart with another version, facts after a
// rollback). Real agent binaries replacing themselves are tested with the
// agent (package agent, cmd/nebulactrl-agent).

// fakeBinaries writes agent "binaries" for both architectures the control
// plane serves (their bytes only matter for their SHA-256 here).
func fakeBinaries(t *testing.T) agentbin.Source {
	t.Helper()
	dir := t.TempDir()
	for _, arch := range agentbin.Arches {
		require.NoError(t, os.WriteFile(filepath.Join(dir, agentbin.FileName(arch)), []byte("agent 1.5.0 for "+arch), 0o600))
	}
	return agentbin.Dir(dir)
}

// Behaviours of a fake agent asked to upgrade.
const (
	upgradeSucceeds = "succeeds" // reports success, restarts with the new version
	upgradeFails    = "fails"    // reports a checksum mismatch; nothing changes
	upgradeHangs    = "hangs"    // says nothing and never comes back upgraded
	upgradeRollback = "rollback" // restarts, then comes back with the old version and a rollback in its facts
)

type fakeUpgradeAgent struct {
	t          *testing.T
	url, cred  string
	name       string
	behaviour  string
	mu         sync.Mutex
	version    string
	arch       string
	upgradable *bool
	facts      *transport.UpgradeFacts
	got        []transport.AgentUpgrade
	client     *transport.Client
	cancel     context.CancelFunc
	done       chan struct{}
	welcomed   chan struct{}
}

func yes() *bool { b := true; return &b }

// joinAgent registers a server named name in cluster eu-1 of org and
// connects its fake agent.
func joinAgent(t *testing.T, s *servertest.Server, joinToken, name, version string, upgradable *bool, behaviour string) *fakeUpgradeAgent {
	t.Helper()
	reg, err := transport.Register(context.Background(), s.URL, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
	require.NoError(t, err)
	a := &fakeUpgradeAgent{t: t, url: s.URL, cred: reg.Credential, name: name, behaviour: behaviour, version: version, arch: "amd64", upgradable: upgradable}
	a.start()
	t.Cleanup(a.stop)
	return a
}

func (a *fakeUpgradeAgent) start() {
	a.t.Helper()
	a.mu.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done, a.welcomed = cancel, make(chan struct{}), make(chan struct{})
	welcomed := a.welcomed
	var once sync.Once
	c, err := transport.NewClient(transport.ClientConfig{
		URL: a.url, Credential: a.cred, AllowPlain: true, Heartbeat: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			a.mu.Lock()
			defer a.mu.Unlock()
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: a.version, Arch: a.arch, Applied: map[string]int{},
				Upgradable: a.upgradable, Facts: transport.Facts{Hostname: a.name, AgentUpgrade: a.facts}}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash}
		},
		OnConnected: func(transport.Welcome) { once.Do(func() { close(welcomed) }) },
		Upgrade:     a.upgrade,
	})
	require.NoError(a.t, err)
	a.client = c
	done := a.done
	a.mu.Unlock()
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	select {
	case <-welcomed:
	case <-time.After(20 * time.Second):
		a.t.Fatalf("agent %s did not connect", a.name)
	}
}

func (a *fakeUpgradeAgent) stop() {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// restartAs stops the agent and starts it again as version, with facts.
func (a *fakeUpgradeAgent) restartAs(version string, facts *transport.UpgradeFacts) {
	a.stop()
	a.mu.Lock()
	a.version, a.facts = version, facts
	a.mu.Unlock()
	a.start()
}

func (a *fakeUpgradeAgent) upgrade(u transport.AgentUpgrade) {
	a.mu.Lock()
	a.got = append(a.got, u)
	from, c, behaviour := a.version, a.client, a.behaviour
	a.mu.Unlock()
	switch behaviour {
	case upgradeSucceeds:
		go func() {
			_ = c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
			a.restartAs(u.Version, &transport.UpgradeFacts{From: from, To: u.Version, State: transport.UpgradeProbation, At: time.Now()})
		}()
	case upgradeFails:
		_ = c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, Step: transport.UpgradeStepChecksum,
			Error: "checksum mismatch: the download is not the binary the control plane announced"})
	case upgradeRollback:
		go func() {
			_ = c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
			a.restartAs(from, &transport.UpgradeFacts{From: from, To: u.Version, State: transport.UpgradeRolledBack,
				Reason: "crash loop: 3 starts without staying connected", At: time.Now()})
		}()
	}
}

func (a *fakeUpgradeAgent) upgrades() []transport.AgentUpgrade {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]transport.AgentUpgrade(nil), a.got...)
}

// upgradeWorld is a control plane of version 1.5.0 that serves agent
// binaries, with organisation acme and its cluster eu-1.
type upgradeWorld struct {
	srv   *servertest.Server
	c     *client
	root  string
	join  string
	clock *testclock.Offset
}

func newUpgradeWorld(t *testing.T, binaries bool) *upgradeWorld {
	t.Helper()
	// The control plane's injected clock: real time plus an offset the test
	// moves forward.
	w := &upgradeWorld{clock: &testclock.Offset{}}
	opts := servertest.Options{Version: "1.5.0", Now: w.clock.Now, JobInterval: 200 * time.Millisecond}
	if binaries {
		opts.AgentBinaries = fakeBinaries(t)
	}
	w.srv = servertest.Start(t, opts)
	w.c = newClient(t, w.srv)
	w.root = w.srv.Setup(t, "root@example.com", "acme")
	r := w.c.do("POST", "/api/v1/orgs/acme/clusters", w.root, map[string]any{"name": "eu-1"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var cl api.ClusterResponse
	r.json(t, &cl)
	w.join = cl.JoinToken.Token
	return w
}

func (w *upgradeWorld) autoUpgrade(t *testing.T, on bool) {
	t.Helper()
	r := w.c.do("PUT", "/api/v1/instance/settings", w.root, map[string]any{"agentAutoUpgrade": on})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
}

func (w *upgradeWorld) upgrade(t *testing.T, a *fakeUpgradeAgent, force bool) response {
	t.Helper()
	id := w.server(t, a.name).ID
	return w.c.do("POST", "/api/v1/servers/"+id+"/upgrade", w.root, map[string]any{"force": force})
}

func (w *upgradeWorld) status(t *testing.T) api.InstanceUpgrade {
	t.Helper()
	r := w.c.do("GET", "/api/v1/instance/upgrade", w.root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var st api.InstanceUpgrade
	r.json(t, &st)
	return st
}

func (w *upgradeWorld) server(t *testing.T, name string) api.ServerUpgrade {
	t.Helper()
	for _, s := range w.status(t).Servers {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("server %s is not listed", name)
	return api.ServerUpgrade{}
}

// audit returns the instance's audit entries of agent upgrades.
func (w *upgradeWorld) audit(t *testing.T) []api.AuditEntry {
	t.Helper()
	r := w.c.do("GET", "/api/v1/audit?limit=1000", w.root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var page struct {
		Items []api.AuditEntry `json:"items"`
	}
	r.json(t, &page)
	var out []api.AuditEntry
	for _, e := range page.Items {
		if strings.HasPrefix(e.Action, "server.agent.upgrade") || e.Action == "instance.agent_auto_upgrade.update" {
			out = append(out, e)
		}
	}
	return out
}

// waitAudit waits for an audit entry of action about target (a suffix of
// the target's name) and returns it.
func (w *upgradeWorld) waitAudit(t *testing.T, action, target string) api.AuditEntry {
	t.Helper()
	var found api.AuditEntry
	require.Eventually(t, func() bool {
		for _, e := range w.audit(t) {
			if e.Action == action && strings.HasSuffix(e.Target.Name, target) {
				found = e
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "audit %s of %s", action, target)
	return found
}

func actions(entries []api.AuditEntry, target string) []string {
	var out []string
	for _, e := range entries {
		if strings.HasSuffix(e.Target.Name, target) {
			out = append(out, e.Action)
		}
	}
	return out
}

func requireCode(t *testing.T, r response, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, string(r.body))
	got, msg := r.errorCode(t)
	require.Equal(t, code, got, msg)
	require.NotEmpty(t, msg)
}

// Every error code of the upgrade endpoints, through the API, against a
// real control plane; a refused upgrade changes nothing.
func TestAgentUpgradeErrorCodes(t *testing.T) {
	w := newUpgradeWorld(t, true)
	w.autoUpgrade(t, false)
	require.Equal(t, "instance.agent_auto_upgrade.update", w.waitAudit(t, "instance.agent_auto_upgrade.update", "instance").Action)

	current := joinAgent(t, w.srv, w.join, "current", "1.5.0", yes(), upgradeSucceeds)
	newer := joinAgent(t, w.srv, w.join, "newer", "1.6.0", yes(), upgradeSucceeds)
	legacy := joinAgent(t, w.srv, w.join, "legacy", "1.4.0", nil, upgradeSucceeds)
	riscv := joinAgent(t, w.srv, w.join, "riscv", "1.4.0", yes(), upgradeSucceeds)
	_ = riscv
	busy := joinAgent(t, w.srv, w.join, "busy", "1.4.0", yes(), upgradeHangs)
	gone := joinAgent(t, w.srv, w.join, "gone", "1.4.0", yes(), upgradeSucceeds)
	gone.stop()
	riscv.stop()
	riscv.mu.Lock()
	riscv.arch = "riscv64"
	riscv.mu.Unlock()
	riscv.start()
	require.Eventually(t, func() bool {
		return !w.server(t, "gone").Connected && w.server(t, "riscv").Arch == "riscv64" && w.server(t, "legacy").CannotUpgrade != ""
	}, 20*time.Second, 100*time.Millisecond)

	requireCode(t, w.upgrade(t, gone, false), http.StatusConflict, "server_offline")
	requireCode(t, w.upgrade(t, current, false), http.StatusConflict, "agent_current")
	requireCode(t, w.upgrade(t, newer, false), http.StatusConflict, "agent_newer")
	requireCode(t, w.upgrade(t, legacy, false), http.StatusUnprocessableEntity, "agent_predates_upgrade")
	requireCode(t, w.upgrade(t, riscv, false), http.StatusUnprocessableEntity, "no_agent_binary")
	r := w.upgrade(t, busy, false)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	var acc api.UpgradeAccepted
	r.json(t, &acc)
	require.Equal(t, "acme/eu-1/busy", acc.Server)
	require.Equal(t, "1.4.0", acc.From)
	require.Equal(t, "1.5.0", acc.To)
	requireCode(t, w.upgrade(t, busy, false), http.StatusConflict, "upgrade_in_progress")
	require.Eventually(t, func() bool { return len(busy.upgrades()) == 1 }, 10*time.Second, 50*time.Millisecond, "the agent gets one agent_upgrade")
	u := busy.upgrades()[0]
	require.Equal(t, acc.UpgradeID, u.ID)
	require.Equal(t, "1.5.0", u.Version)
	bin, err := fakeBinaries(t).Binary("amd64")
	require.NoError(t, err)
	require.Equal(t, bin.SHA256, u.SHA256, "the command carries the SHA-256 of the served binary")

	// A refused upgrade changed nothing: only busy's upgrade is audited.
	for _, name := range []string{"gone", "current", "newer", "legacy", "riscv"} {
		require.Empty(t, actions(w.audit(t), "/"+name), name)
		require.Nil(t, w.server(t, name).LastUpgrade, name)
	}
	require.Equal(t, []string{"server.agent.upgrade"}, actions(w.audit(t), "/busy"))
	require.Equal(t, "in_progress", w.server(t, "busy").LastUpgrade.State)

	// Bad input: an unknown server, a body that is not the request's shape.
	requireCode(t, w.c.do("POST", "/api/v1/servers/00000000-0000-4000-8000-000000000999/upgrade", w.root, map[string]any{}), http.StatusNotFound, "not_found")
	r = w.c.do("POST", "/api/v1/servers/"+w.server(t, "busy").ID+"/upgrade", w.root, `{"force": "yes"}`)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))

	// The rollout: nothing to upgrade in an organisation without servers;
	// one rollout at a time.
	r = w.c.do("POST", "/api/v1/orgs", w.root, map[string]any{"name": "empty"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	requireCode(t, w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{"org": "empty"}), http.StatusConflict, "nothing_to_upgrade")
	r = w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{})
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	joinAgent(t, w.srv, w.join, "slow", "1.4.0", yes(), upgradeHangs)
	r = w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{"org": "acme"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	var ro api.RolloutAccepted
	r.json(t, &ro)
	require.Equal(t, []string{"acme/eu-1/slow"}, ro.Servers, "only the servers that can be upgraded now")
	requireCode(t, w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{"org": "acme"}), http.StatusConflict, "upgrade_in_progress")
}

// A control plane built without agent binaries (a plain go build) refuses
// upgrades with no_agent_binary.
func TestAgentUpgradeWithoutBinaries(t *testing.T) {
	w := newUpgradeWorld(t, false)
	w.autoUpgrade(t, false)
	old := joinAgent(t, w.srv, w.join, "old", "1.4.0", yes(), upgradeSucceeds)
	requireCode(t, w.upgrade(t, old, false), http.StatusUnprocessableEntity, "no_agent_binary")
	requireCode(t, w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{"org": "acme"}), http.StatusUnprocessableEntity, "no_agent_binary")
	st := w.status(t)
	require.Empty(t, st.AgentBinaries)
	require.Equal(t, "Behind 1.5.0", w.server(t, "old").Skew)
	require.Empty(t, old.upgrades())
}

// A staged rollout over three servers upgrades them one at a time in name
// order, halts at the first failure and leaves the third untouched.
func TestAgentRolloutHaltsAtTheFirstFailure(t *testing.T) {
	w := newUpgradeWorld(t, true)
	w.autoUpgrade(t, false)
	// Joined out of name order: the rollout goes by name.
	c := joinAgent(t, w.srv, w.join, "node-c", "1.4.0", yes(), upgradeSucceeds)
	a := joinAgent(t, w.srv, w.join, "node-a", "1.4.0", yes(), upgradeSucceeds)
	b := joinAgent(t, w.srv, w.join, "node-b", "1.4.0", yes(), upgradeFails)
	r := w.c.do("POST", "/api/v1/servers/upgrade", w.root, map[string]any{"org": "acme"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	var ro api.RolloutAccepted
	r.json(t, &ro)
	require.Equal(t, []string{"acme/eu-1/node-a", "acme/eu-1/node-b", "acme/eu-1/node-c"}, ro.Servers)
	require.Equal(t, "1.5.0", ro.Version)

	halted := w.waitAudit(t, "server.agent.upgrade.halted", "/node-b")
	require.Contains(t, halted.Detail, "1 server(s) left untouched")
	require.Contains(t, halted.Detail, "checksum mismatch")
	entries := w.audit(t)
	require.Equal(t, []string{"server.agent.upgrade.rollout"}, actions(entries, "acme"))
	require.Equal(t, []string{"server.agent.upgrade", "server.agent.upgraded"}, actions(entries, "/node-a"))
	require.Equal(t, []string{"server.agent.upgrade", "server.agent.upgrade.failed", "server.agent.upgrade.halted"}, actions(entries, "/node-b"))
	require.Empty(t, actions(entries, "/node-c"), "the third server is left untouched")
	require.Len(t, a.upgrades(), 1)
	require.Len(t, b.upgrades(), 1)
	require.Empty(t, c.upgrades())

	// node-b was asked only after node-a came back with the new version.
	var aBack, bAsked int64
	for _, e := range entries {
		switch {
		case e.Action == "server.agent.upgraded" && strings.HasSuffix(e.Target.Name, "/node-a"):
			aBack = e.Seq
		case e.Action == "server.agent.upgrade" && strings.HasSuffix(e.Target.Name, "/node-b"):
			bAsked = e.Seq
		}
	}
	require.Less(t, aBack, bAsked)

	sa, sb, sc := w.server(t, "node-a"), w.server(t, "node-b"), w.server(t, "node-c")
	require.Equal(t, "1.5.0", sa.Version)
	require.Equal(t, "", sa.Skew)
	require.Equal(t, "succeeded", sa.LastUpgrade.State)
	require.Equal(t, "failed", sb.LastUpgrade.State)
	require.Contains(t, sb.LastUpgrade.Message, "checksum")
	require.Equal(t, "Behind 1.5.0", sb.Skew)
	require.Equal(t, "Behind 1.5.0", sc.Skew)
	require.Nil(t, sc.LastUpgrade)
}

// With automatic upgrade on (the default), a provably behind agent is
// upgraded when it connects; a development build and a newer agent never.
func TestAutomaticUpgradeOfABehindAgentOnly(t *testing.T) {
	w := newUpgradeWorld(t, true)
	require.True(t, w.status(t).AgentAutoUpgrade, "on by default")
	dev := joinAgent(t, w.srv, w.join, "dev", "dev", yes(), upgradeSucceeds)
	between := joinAgent(t, w.srv, w.join, "between", "1.4.0-3-gabc1234", yes(), upgradeSucceeds)
	newer := joinAgent(t, w.srv, w.join, "newer", "1.6.0", yes(), upgradeSucceeds)
	// Joined last: its upgrade follows the others' connects in the event
	// log, which the reactions handle in order.
	old := joinAgent(t, w.srv, w.join, "old", "1.4.0", yes(), upgradeSucceeds)
	w.waitAudit(t, "server.agent.upgrade.auto", "/old")
	w.waitAudit(t, "server.agent.upgraded", "/old")
	require.Len(t, old.upgrades(), 1)
	for _, a := range []*fakeUpgradeAgent{dev, between, newer} {
		require.Empty(t, a.upgrades(), a.name)
		require.Empty(t, actions(w.audit(t), "/"+a.name), a.name)
	}
	require.Equal(t, "Version not comparable", w.server(t, "dev").Skew)
	require.Equal(t, "Version not comparable", w.server(t, "between").Skew)
	require.Equal(t, "Newer than the control plane", w.server(t, "newer").Skew)
	require.Equal(t, "", w.server(t, "old").Skew)
	require.True(t, w.server(t, "old").LastUpgrade.Auto || w.server(t, "old").LastUpgrade.State == "succeeded")

	// Off: a behind agent that connects stays as it is.
	w.autoUpgrade(t, false)
	late := joinAgent(t, w.srv, w.join, "late", "1.4.0", yes(), upgradeSucceeds)
	// A person's upgrade after it is ordered after its connect.
	marker := joinAgent(t, w.srv, w.join, "marker", "1.4.0", yes(), upgradeHangs)
	r := w.upgrade(t, marker, false)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Eventually(t, func() bool { return len(marker.upgrades()) == 1 }, 10*time.Second, 50*time.Millisecond)
	require.Empty(t, late.upgrades())
	require.Empty(t, actions(w.audit(t), "/late"))
}

// An upgrade whose agent does not come back with the new version within
// the timeout fails (injected clock), and a rollback the agent reports in
// its facts afterwards is learned all the same: the server shows it, the
// version is not installed again without force.
func TestAgentUpgradeTimeoutAndRollback(t *testing.T) {
	w := newUpgradeWorld(t, true)
	w.autoUpgrade(t, false)
	a := joinAgent(t, w.srv, w.join, "edge", "1.4.0", yes(), upgradeHangs)
	r := w.upgrade(t, a, false)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Eventually(t, func() bool { return len(a.upgrades()) == 1 }, 10*time.Second, 50*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, "in_progress", w.server(t, "edge").LastUpgrade.State, "not failed before the timeout")
	w.clock.Advance(11 * time.Minute)
	failed := w.waitAudit(t, "server.agent.upgrade.failed", "/edge")
	require.Contains(t, failed.Detail, "did not connect again with 1.5.0 within 10m0s")
	require.Equal(t, "timed_out", w.server(t, "edge").LastUpgrade.State)

	// The agent had replaced itself, crash-looped and put the old binary
	// back: it says so when it connects again.
	a.restartAs("1.4.0", &transport.UpgradeFacts{From: "1.4.0", To: "1.5.0", State: transport.UpgradeRolledBack,
		Reason: "crash loop: 3 starts without staying connected", At: w.clock.Now()})
	require.Eventually(t, func() bool {
		u := w.server(t, "edge").LastUpgrade
		return u != nil && u.State == "rolled_back"
	}, 20*time.Second, 100*time.Millisecond)
	require.Equal(t, "The agent rolled the upgrade back: crash loop: 3 starts without staying connected", w.server(t, "edge").LastUpgrade.Message)

	requireCode(t, w.upgrade(t, a, false), http.StatusConflict, "rolled_back_recently")

	// Not installed again automatically for 24 hours. The session would
	// expire over a day of the injected clock: a token does not.
	r = w.c.do("POST", "/api/v1/tokens", w.root, map[string]any{"name": "upgrades", "scopes": []string{"instance:admin", "servers:write", "audit:read"}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var tok api.CreatedToken
	r.json(t, &tok)
	w.root = tok.Secret
	w.autoUpgrade(t, true)
	a.mu.Lock()
	a.behaviour = upgradeSucceeds
	a.mu.Unlock()
	a.restartAs("1.4.0", a.facts)
	// A server that joins afterwards is upgraded automatically: the
	// reactions handled edge's connect before its.
	probe := joinAgent(t, w.srv, w.join, "probe", "1.4.0", yes(), upgradeSucceeds)
	w.waitAudit(t, "server.agent.upgraded", "/probe")
	require.Len(t, probe.upgrades(), 1)
	require.Len(t, a.upgrades(), 1, "the rolled-back version is not sent again")
	require.NotContains(t, actions(w.audit(t), "/edge"), "server.agent.upgrade.auto")

	w.clock.Advance(25 * time.Hour)
	a.restartAs("1.4.0", a.facts)
	w.waitAudit(t, "server.agent.upgrade.auto", "/edge")
	w.waitAudit(t, "server.agent.upgraded", "/edge")
	require.Len(t, a.upgrades(), 2)
	require.Equal(t, "succeeded", w.server(t, "edge").LastUpgrade.State)
}

// force installs a version the agent rolled back in the last 24 hours.
func TestAgentUpgradeForceAfterARollback(t *testing.T) {
	w := newUpgradeWorld(t, true)
	w.autoUpgrade(t, false)
	a := joinAgent(t, w.srv, w.join, "edge", "1.4.0", yes(), upgradeRollback)
	r := w.upgrade(t, a, false)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	failed := w.waitAudit(t, "server.agent.upgrade.failed", "/edge")
	require.Contains(t, failed.Detail, "The agent rolled the upgrade back: crash loop")
	require.Equal(t, "rolled_back", w.server(t, "edge").LastUpgrade.State)
	requireCode(t, w.upgrade(t, a, false), http.StatusConflict, "rolled_back_recently")
	a.mu.Lock()
	a.behaviour = upgradeSucceeds
	a.mu.Unlock()
	r = w.upgrade(t, a, true)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	w.waitAudit(t, "server.agent.upgraded", "/edge")
	ups := a.upgrades()
	require.Len(t, ups, 2)
	require.False(t, ups[0].Force)
	require.True(t, ups[1].Force, "force travels to the agent, which would refuse the version otherwise")
	require.Equal(t, "succeeded", w.server(t, "edge").LastUpgrade.State)
}

// With two replicas on one database, an upgrade asked for through one
// replica reaches an agent connected to the other: whichever replica reacts
// to the request, the agent's own replica sends what is pending for it.
func TestAgentUpgradeReachesAnAgentOnAnotherReplica(t *testing.T) {
	w := newUpgradeWorld(t, true)
	w.autoUpgrade(t, false)
	other := servertest.Start(t, servertest.Options{DatabaseURL: w.srv.DatabaseURL, SecretKey: w.srv.SecretKey, Version: "1.5.0",
		Now: w.clock.Now, JobInterval: 200 * time.Millisecond, AgentBinaries: fakeBinaries(t)})
	a := joinAgent(t, other, w.join, "far", "1.4.0", yes(), upgradeSucceeds)
	r := w.upgrade(t, a, false)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	w.waitAudit(t, "server.agent.upgraded", "/far")
	require.Len(t, a.upgrades(), 1, "sent once")
	require.Equal(t, "succeeded", w.server(t, "far").LastUpgrade.State)
}
