package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/serveproc"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/transport"
)

// TestAKilledReplicasAgentsAreGoneEverywhere (issue 17, item 4): agents
// connected to a control-plane replica that is killed with SIGKILL (`nebula
// serve`, a real process: no disconnect is ever recorded) are gone, on
// another replica of the same database, once 60 s passed without their
// heartbeat (the replica's injected clock jumps over them): the servers
// API, the agents' standing for upgrades, the cluster's status and the
// console's Servers page say Disconnected, an upgrade is refused 409
// server_offline at once and queues nothing, and a rollout finds nothing
// to upgrade. An agent that connects again (to the live replica) is
// Connected again and can be upgraded.
func TestAKilledReplicasAgentsAreGoneEverywhere(t *testing.T) {
	clock := &testclock.Offset{}
	live := servertest.Start(t, servertest.Options{Version: "1.5.0", Now: clock.Now, JobInterval: 200 * time.Millisecond, AgentBinaries: fakeBinaries(t)})
	c := newClient(t, live)
	root := live.Setup(t, "root@example.com", "acme")
	r := c.do("PUT", "/api/v1/instance/settings", root, map[string]any{"agentAutoUpgrade": false})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	r = c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var cl api.ClusterResponse
	r.json(t, &cl)

	doomed := serveproc.Start(t, serveproc.Binary(t), live.DatabaseURL, live.SecretKey)
	agents := map[string]*fakeUpgradeAgent{}
	for _, name := range []string{"one", "two"} {
		reg, err := transport.Register(context.Background(), doomed.URL, nil, transport.RegisterRequest{JoinToken: cl.JoinToken.Token, Name: name})
		require.NoError(t, err)
		a := &fakeUpgradeAgent{t: t, url: doomed.URL, cred: reg.Credential, name: name, behaviour: upgradeHangs, version: "1.4.0", arch: "amd64", upgradable: yes()}
		a.start()
		t.Cleanup(a.stop)
		agents[name] = a
	}

	servers := func() map[string]api.Server {
		t.Helper()
		r := c.do("GET", "/api/v1/orgs/acme/clusters/eu-1/servers", root, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var ss []api.Server
		r.items(t, &ss)
		out := map[string]api.Server{}
		for _, s := range ss {
			out[s.Name] = s
		}
		return out
	}
	standing := func() map[string]api.ServerUpgrade {
		t.Helper()
		r := c.do("GET", "/api/v1/instance/upgrade", root, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var st api.InstanceUpgrade
		r.json(t, &st)
		out := map[string]api.ServerUpgrade{}
		for _, s := range st.Servers {
			out[s.Name] = s
		}
		return out
	}
	status := func() api.ClusterStatus {
		t.Helper()
		r := c.do("GET", "/api/v1/orgs/acme/clusters/eu-1", root, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var cr api.ClusterResponse
		r.json(t, &cr)
		return cr.Status
	}
	console := newConsoleClient(t, live.URL, "root@example.com")
	row := func(name string) string {
		t.Helper()
		page := console.get(t, "/o/acme/servers")
		m := regexp.MustCompile(`(?s)<tr data-server="` + regexp.QuoteMeta(name) + `">.*?</tr>`).FindString(page)
		require.NotEmpty(t, m, "no row of %s on the Servers page:\n%s", name, page)
		return m
	}
	require.Eventually(t, func() bool {
		s := servers()
		return s["one"].Connected && s["two"].Connected
	}, 20*time.Second, 100*time.Millisecond, "both agents connected to the doomed replica")
	require.Equal(t, 2, status().ConnectedAgents)
	require.Contains(t, row("one"), `badge ok">Connected`)
	ids := map[string]string{}
	for name, s := range servers() {
		ids[name] = s.ID
	}

	// SIGKILL: no disconnect, no clean shutdown. The agents keep trying the
	// dead replica's address.
	doomed.Kill(t)
	require.True(t, servers()["one"].Connected, "live until 60 s passed without a heartbeat")

	clock.Advance(61 * time.Second)
	for name, s := range servers() {
		require.False(t, s.Connected, "servers API: %s", name)
		require.NotNil(t, s.LastHeartbeatAt, "the last heartbeat stays known: %s", name)
	}
	for name, s := range standing() {
		require.False(t, s.Connected, "instance upgrade: %s", name)
	}
	st := status()
	require.Equal(t, api.StateDisconnected, st.State)
	require.Zero(t, st.ConnectedAgents)
	for _, name := range []string{"one", "two"} {
		rw := row(name)
		require.Contains(t, rw, "Disconnected", "console: %s", name)
		require.NotContains(t, rw, `class="upgrade"`, "console offers no upgrade: %s", name)
		require.Contains(t, rw, "The server&#39;s agent is not connected.", "console: %s", name)
	}
	requireCode(t, c.do("POST", "/api/v1/servers/"+ids["one"]+"/upgrade", root, map[string]any{}), http.StatusConflict, "server_offline")
	requireCode(t, c.do("POST", "/api/v1/servers/upgrade", root, map[string]any{"org": "acme"}), http.StatusConflict, "nothing_to_upgrade")
	time.Sleep(500 * time.Millisecond)
	for name, s := range standing() {
		require.Nil(t, s.LastUpgrade, "nothing queued for %s", name)
	}
	r = c.do("GET", "/api/v1/audit?limit=1000", root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NotContains(t, string(r.body), "server.agent.upgrade", "no upgrade was asked for")

	// One agent connects again, to the live replica: Connected again, and
	// its upgrade is accepted and sent.
	one := agents["one"]
	one.stop()
	one.mu.Lock()
	one.url = live.URL
	one.mu.Unlock()
	one.start()
	require.Eventually(t, func() bool { return servers()["one"].Connected }, 20*time.Second, 100*time.Millisecond)
	require.False(t, servers()["two"].Connected)
	require.True(t, standing()["one"].Connected)
	require.False(t, standing()["two"].Connected)
	st = status()
	require.Equal(t, api.StateConnected, st.State)
	require.Equal(t, 1, st.ConnectedAgents)
	require.Contains(t, row("one"), `class="upgrade"`)
	require.Contains(t, row("two"), "Disconnected")
	r = c.do("POST", "/api/v1/servers/"+ids["one"]+"/upgrade", root, map[string]any{})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Eventually(t, func() bool { return len(one.upgrades()) == 1 }, 10*time.Second, 50*time.Millisecond, "the agent gets its agent_upgrade")
	requireCode(t, c.do("POST", "/api/v1/servers/"+ids["two"]+"/upgrade", root, map[string]any{}), http.StatusConflict, "server_offline")
}

// consoleClient is a browser without JavaScript signed in to the console.
type consoleClient struct {
	base string
	http *http.Client
}

func newConsoleClient(t *testing.T, base, email string) *consoleClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	cc := &consoleClient{base: base, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(cc.get(t, "/signin"))
	require.NotNil(t, m, "the sign-in form carries a CSRF token")
	form := url.Values{"csrf": {m[1]}, "email": {email}, "password": {"correct horse battery staple"}, "next": {"/o/acme"}}
	resp, err := cc.http.Post(base+"/signin", "application/x-www-form-urlencoded", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed in")
	return cc
}

func (cc *consoleClient) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := cc.http.Get(cc.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
	return string(b)
}
