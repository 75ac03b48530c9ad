package console_test

import (
	"context"
	"html"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// upgradeAgent is an agent over the real protocol whose self-upgrade is
// reduced to what the control plane sees of it: the agent_upgrade frames it
// gets, and what the test has it do about them (onUpgrade: report, restart
// with another version, come back with a roll back in its facts). Real
// agent binaries replacing themselves are tested with the agent.
type upgradeAgent struct {
	t         *testing.T
	url, cred string
	name      string
	serverID  string
	mu        sync.Mutex
	hello     transport.Hello
	got       []transport.AgentUpgrade
	onUpgrade func(a *upgradeAgent, u transport.AgentUpgrade)
	client    *transport.Client
	cancel    context.CancelFunc
	done      chan struct{}
}

func yes() *bool { b := true; return &b }

// joinUpgradeAgent registers a server and connects its agent, which says
// hello with version, arch and upgradable (and cannot, when it cannot
// upgrade itself).
func joinUpgradeAgent(t *testing.T, url, joinToken, name, version, arch string, upgradable *bool, cannot string) *upgradeAgent {
	t.Helper()
	reg, err := transport.Register(t.Context(), url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
	require.NoError(t, err)
	a := &upgradeAgent{t: t, url: url, cred: reg.Credential, name: name, serverID: reg.ServerID,
		hello: transport.Hello{Protocol: transport.ProtocolVersion, Version: version, Arch: arch, Applied: map[string]int{},
			Upgradable: upgradable, CannotUpgrade: cannot, Facts: transport.Facts{Hostname: name}}}
	a.start()
	t.Cleanup(a.stop)
	return a
}

func (a *upgradeAgent) start() {
	a.t.Helper()
	a.mu.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	welcomed := make(chan struct{})
	var once sync.Once
	c, err := transport.NewClient(transport.ClientConfig{
		URL: a.url, Credential: a.cred, AllowPlain: true, Heartbeat: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.hello
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash}
		},
		OnConnected: func(transport.Welcome) { once.Do(func() { close(welcomed) }) },
		Upgrade: func(u transport.AgentUpgrade) {
			a.mu.Lock()
			a.got = append(a.got, u)
			f := a.onUpgrade
			a.mu.Unlock()
			if f != nil {
				go f(a, u)
			}
		},
	})
	require.NoError(a.t, err)
	a.client = c
	done := a.done
	a.mu.Unlock()
	go func() { defer close(done); _ = c.Run(ctx) }()
	select {
	case <-welcomed:
	case <-time.After(20 * time.Second):
		a.t.Fatalf("agent %s did not connect", a.name)
	}
}

func (a *upgradeAgent) stop() {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.cancel = nil
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// restartAs stops the agent and connects it again as version, with the
// facts of its last upgrade.
func (a *upgradeAgent) restartAs(version string, facts *transport.UpgradeFacts) {
	a.stop()
	a.mu.Lock()
	a.hello.Version, a.hello.Facts.AgentUpgrade = version, facts
	a.mu.Unlock()
	a.start()
}

func (a *upgradeAgent) version() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hello.Version
}

func (a *upgradeAgent) upgrades() []transport.AgentUpgrade {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]transport.AgentUpgrade(nil), a.got...)
}

// rollsBack replaces itself, crash-loops and puts the old binary back.
func rollsBack(a *upgradeAgent, u transport.AgentUpgrade) {
	from := a.version()
	_ = a.client.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
	a.restartAs(from, &transport.UpgradeFacts{From: from, To: u.Version, State: transport.UpgradeRolledBack,
		Reason: "crash loop: 3 starts without staying connected", At: time.Now()})
}

// succeeds replaces itself and comes back with the new version.
func succeeds(a *upgradeAgent, u transport.AgentUpgrade) {
	from := a.version()
	_ = a.client.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
	a.restartAs(u.Version, &transport.UpgradeFacts{From: from, To: u.Version, State: transport.UpgradeProbation, At: time.Now()})
}

// agentBinaries writes agent "binaries" for arches (their bytes only
// matter for their SHA-256 here).
func agentBinaries(t *testing.T, arches ...string) agentbin.Source {
	t.Helper()
	dir := t.TempDir()
	for _, arch := range arches {
		require.NoError(t, os.WriteFile(filepath.Join(dir, agentbin.FileName(arch)), []byte("agent 1.5.0 for "+arch), 0o600))
	}
	return agentbin.Dir(dir)
}

// apiServers lists cluster eu-1's servers by name, as the API returns them.
func apiServers(t *testing.T, url, token string) map[string]api.Server {
	t.Helper()
	var pg api.Page[api.Server]
	require.Equal(t, http.StatusOK, apiCall(t, "GET", url+"/api/v1/orgs/acme/clusters/eu-1/servers", token, nil, &pg))
	out := map[string]api.Server{}
	for _, s := range pg.Items {
		out[s.Name] = s
	}
	return out
}

// upgradeAudit is the instance's audit entries of agent upgrades and of the
// automatic upgrade setting.
func upgradeAudit(t *testing.T, url, token string) []api.AuditEntry {
	t.Helper()
	var pg struct {
		Items []api.AuditEntry `json:"items"`
	}
	require.Equal(t, http.StatusOK, apiCall(t, "GET", url+"/api/v1/audit?limit=1000", token, nil, &pg))
	var out []api.AuditEntry
	for _, e := range pg.Items {
		if strings.HasPrefix(e.Action, "server.agent.upgrade") || e.Action == "instance.agent_auto_upgrade.update" {
			out = append(out, e)
		}
	}
	return out
}

// waitAuditEntry waits for an entry of action whose target's name ends with
// target, and returns it.
func waitAuditEntry(t *testing.T, url, token, action, target string) api.AuditEntry {
	t.Helper()
	var found api.AuditEntry
	require.Eventually(t, func() bool {
		for _, e := range upgradeAudit(t, url, token) {
			if e.Action == action && strings.HasSuffix(e.Target.Name, target) {
				found = e
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "audit %s of %s", action, target)
	return found
}

// serverRow is the Servers page's table row of a server.
func serverRow(t *testing.T, page, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr data-server="` + regexp.QuoteMeta(name) + `">.*?</tr>`).FindString(page)
	require.NotEmpty(t, m, "no row of %s on the Servers page", name)
	return m
}

// TestServersPageOffersOnlyWhatTheAPIAccepts: against a real control plane
// (1.5.0, carrying an agent binary for amd64 only) with agents that are
// behind, current, newer, offline, that predate self-upgrades, that cannot
// upgrade themselves and that run on arm64, the Servers page and each
// server's page offer Upgrade agent exactly where the API accepts it, say
// why not elsewhere, and show no skew for the agent that runs the control
// plane's version; the automatic upgrade switch is there for the instance
// administrator only.
func TestServersPageOffersOnlyWhatTheAPIAccepts(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0", AgentBinaries: agentBinaries(t, "amd64")})
	root := srv.Setup(t, "ada@example.com", "acme")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", root, map[string]any{"email": "bob@example.com", "password": password}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", root, map[string]any{"email": "bob@example.com", "role": "admin"}, nil))
	require.Equal(t, http.StatusOK, apiCall(t, "PUT", srv.URL+"/api/v1/instance/settings", root, map[string]any{"agentAutoUpgrade": false}, nil))
	var cl api.ClusterResponse
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}, &cl))
	join := cl.JoinToken.Token

	agents := map[string]*upgradeAgent{
		"behind":   joinUpgradeAgent(t, srv.URL, join, "behind", "1.4.0", "amd64", yes(), ""),
		"current":  joinUpgradeAgent(t, srv.URL, join, "current", "1.5.0", "amd64", yes(), ""),
		"newer":    joinUpgradeAgent(t, srv.URL, join, "newer", "1.6.0", "amd64", yes(), ""),
		"offline":  joinUpgradeAgent(t, srv.URL, join, "offline", "1.4.0", "amd64", yes(), ""),
		"old":      joinUpgradeAgent(t, srv.URL, join, "old", "1.3.0", "amd64", nil, ""),
		"readonly": joinUpgradeAgent(t, srv.URL, join, "readonly", "1.4.0", "amd64", new(bool), transport.CannotUpgradeNotWritable),
		"arm":      joinUpgradeAgent(t, srv.URL, join, "arm", "1.4.0", "arm64", yes(), ""),
	}
	agents["offline"].stop()
	require.Eventually(t, func() bool {
		s := apiServers(t, srv.URL, root)
		return !s["offline"].Connected && s["arm"].Arch == "arm64"
	},
		20*time.Second, 100*time.Millisecond, "the offline agent shows disconnected")

	// What the API answers an upgrade of each, and why the page says it
	// cannot be done.
	refused := map[string]struct {
		status    int
		code, why string
	}{
		"current":  {http.StatusConflict, "agent_current", ""},
		"newer":    {http.StatusConflict, "agent_newer", "The agent is newer than the control plane."},
		"offline":  {http.StatusConflict, "server_offline", "The server's agent is not connected."},
		"old":      {http.StatusUnprocessableEntity, "agent_predates_upgrade", "The agent predates self-upgrades: install a newer agent by hand once."},
		"readonly": {http.StatusUnprocessableEntity, "agent_cannot_upgrade", "The agent cannot upgrade itself: binary path not writable."},
		"arm":      {http.StatusUnprocessableEntity, "no_agent_binary", "The control plane carries no agent binary for arm64."},
	}

	bob := newWebClient(t, srv.URL)
	resp, _ := bob.signIn("bob@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, page := bob.get("/o/acme/servers")
	require.Contains(t, page, `id="upgrade-all"`, "Upgrade agents: behind can be upgraded now")
	require.NotContains(t, page, `id="auto-upgrade"`, "the switch is for instance administrators")
	for name := range agents {
		row := serverRow(t, page, name)
		_, refusedHere := refused[name]
		require.Equal(t, !refusedHere, strings.Contains(row, `class="upgrade"`), "Upgrade agent offered for %s:\n%s", name, row)
		if r, ok := refused[name]; ok && r.why != "" {
			require.Contains(t, row, html.EscapeString(r.why), name)
		}
	}
	require.Contains(t, serverRow(t, page, "current"), `<td class="skew"></td>`, "no skew when the versions match")
	require.Contains(t, serverRow(t, page, "behind"), "Behind 1.5.0")
	require.Contains(t, serverRow(t, page, "arm"), "<td>arm64</td>", "the architecture, to an organisation admin too")

	// Each server's page: version, architecture, connection, and the same
	// decision.
	ids := map[string]string{}
	for name, s := range apiServers(t, srv.URL, root) {
		ids[name] = s.ID
	}
	for name := range agents {
		_, sp := bob.get("/o/acme/servers/" + ids[name])
		require.Contains(t, sp, "<h1>Server "+name+"</h1>")
		require.Contains(t, sp, agents[name].version())
		require.Contains(t, sp, `<dd id="arch">`+agents[name].hello.Arch+`</dd>`)
		require.Contains(t, sp, `<dt>Last upgrade</dt><dd id="last-upgrade">none yet</dd>`)
		r, refusedHere := refused[name]
		require.Equal(t, !refusedHere, strings.Contains(sp, `id="upgrade"`), "Upgrade agent on %s's page", name)
		if refusedHere && r.why != "" {
			require.Contains(t, sp, `<dd id="why">`+html.EscapeString(r.why)+`</dd>`)
		}
	}
	_, sp := bob.get("/o/acme/servers/" + ids["offline"])
	require.Contains(t, sp, "Disconnected")
	require.Contains(t, sp, `<span class="badge skew" id="skew">Behind 1.5.0</span>`)
	_, sp = bob.get("/o/acme/servers/" + ids["current"])
	require.NotContains(t, sp, `id="skew"`, "no skew when the versions match")
	resp, _ = bob.get("/o/acme/servers/00000000-0000-4000-8000-000000000000")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// The API agrees: it refuses every server the pages offer nothing for,
	// with the code the spec gives, and accepts the one they offer.
	for name, r := range refused {
		st, body := apiRaw(t, "POST", srv.URL+"/api/v1/servers/"+ids[name]+"/upgrade", root)
		require.Equal(t, r.status, st, name)
		require.Contains(t, body, `"`+r.code+`"`, name)
	}
	require.Equal(t, http.StatusAccepted, apiCall(t, "POST", srv.URL+"/api/v1/servers/"+ids["behind"]+"/upgrade", root, map[string]any{}, nil))
	require.Eventually(t, func() bool { return len(agents["behind"].upgrades()) == 1 }, 10*time.Second, 50*time.Millisecond)

	// An upgrade in progress: nothing offered, the page says so.
	_, page = bob.get("/o/acme/servers")
	require.NotContains(t, serverRow(t, page, "behind"), `class="upgrade"`)
	require.Contains(t, serverRow(t, page, "behind"), "Upgrading the agent from 1.4.0 to 1.5.0")
	require.NotContains(t, page, `id="upgrade-all"`, "no server left to upgrade")

	// The instance administrator sees the switch, as it stands.
	ada := newWebClient(t, srv.URL)
	resp, _ = ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, page = ada.get("/o/acme/servers")
	require.Contains(t, page, `id="auto-upgrade"`)
	require.Contains(t, page, `aria-checked="false"`)
	require.Contains(t, page, `name="agentAutoUpgrade" value="on"`)
}

// apiRaw sends an empty JSON object and returns the answer's status and
// body.
func apiRaw(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}
