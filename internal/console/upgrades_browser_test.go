package console_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// TestAgentUpgradesInChromium presses, in headless Chromium against a real
// control plane (real PostgreSQL, the real websocket hub and reactions) with
// two agents over the real protocol, the automatic upgrade switch on the
// Servers page, Upgrade agents (the first agent rolls the upgrade back, which
// halts the rollout), and Retry anyway on that server's page, and checks each
// outcome in the API's state and audit log. axe-core runs on each page.
func TestAgentUpgradesInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0", AgentBinaries: agentBinaries(t, agentbin.Arches...)})
	root := srv.Setup(t, "ada@example.com", "acme")
	b := startBrowser(t, chrome, srv.URL, shots)

	// The switch, on by default: pressed, automatic upgrade is off (before
	// the agents join, which would be upgraded as they connect otherwise).
	b.signIn("ada@example.com", "/o/acme/servers", "#auto-upgrade-switch")
	require.Equal(t, "true", eval[string](b, "document.querySelector('#auto-upgrade-switch').getAttribute('aria-checked')"))
	b.visit("servers-switch")
	b.submit("#auto-upgrade-switch", ".notice")
	require.Contains(t, b.text(".notice"), "Automatic upgrade off")
	require.Equal(t, "/o/acme/servers", eval[string](b, "location.pathname"), "back on the Servers page")
	require.Equal(t, "false", eval[string](b, "document.querySelector('#auto-upgrade-switch').getAttribute('aria-checked')"))
	var st api.InstanceSettings
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/instance/settings", root, nil, &st))
	require.False(t, st.AgentAutoUpgrade)
	waitAuditEntry(t, srv.URL, root, "instance.agent_auto_upgrade.update", "")

	var cl api.ClusterResponse
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}, &cl))
	first := joinUpgradeAgent(t, srv.URL, cl.JoinToken.Token, "eu-1-a", "1.4.0", "amd64", yes(), "")
	second := joinUpgradeAgent(t, srv.URL, cl.JoinToken.Token, "eu-1-b", "1.4.0", "amd64", yes(), "")
	first.mu.Lock()
	first.onUpgrade = rollsBack
	first.mu.Unlock()
	second.mu.Lock()
	second.onUpgrade = succeeds
	second.mu.Unlock()

	// Upgrade agents: eu-1-a goes first, rolls the upgrade back, and the
	// rollout halts with eu-1-b untouched.
	b.open("/o/acme/servers", "#upgrade-all")
	require.Contains(t, b.text(`tr[data-server="eu-1-a"]`), "Behind 1.5.0")
	b.visit("servers-upgrades")
	b.submit("#upgrade-all", ".notice")
	require.Contains(t, b.text(".notice"), "Upgrade of the organisation's agents started")
	rollout := waitAuditEntry(t, srv.URL, root, "server.agent.upgrade.rollout", "acme")
	require.Contains(t, rollout.Detail, "eu-1-a, eu-1-b")
	waitAuditEntry(t, srv.URL, root, "server.agent.upgrade", "/eu-1-a")
	failed := waitAuditEntry(t, srv.URL, root, "server.agent.upgrade.failed", "/eu-1-a")
	require.Equal(t, "The agent rolled the upgrade back: crash loop: 3 starts without staying connected", failed.Detail)
	waitAuditEntry(t, srv.URL, root, "server.agent.upgrade.halted", "/eu-1-a")
	require.Empty(t, second.upgrades(), "the rollout halted before eu-1-b")

	// eu-1-a's page: Last upgrade in the spec's words, and Retry anyway.
	require.Eventually(t, func() bool {
		s := apiServers(t, srv.URL, root)["eu-1-a"]
		return s.Connected && s.LastUpgrade != nil && s.LastUpgrade.State == "rolled_back"
	}, 20*time.Second, 100*time.Millisecond, "eu-1-a is back, rolled back")
	b.open("/o/acme/servers", `tr[data-server="eu-1-a"]`)
	require.Contains(t, b.text(`tr[data-server="eu-1-a"]`), "Retry anyway")
	require.True(t, b.has("#upgrade-all"), "the rollout halted: another would take eu-1-b")
	b.submit(`tr[data-server="eu-1-a"] a`, "#last-upgrade")
	require.Equal(t, "Server eu-1-a", b.text("h1"))
	require.Contains(t, b.text("#last-upgrade"), "The agent rolled the upgrade back: crash loop: 3 starts without staying connected")
	require.Equal(t, "amd64", b.text("#arch"))
	require.Contains(t, b.text("#connection"), "Connected")
	require.Contains(t, b.text("#version"), "1.4.0")
	require.False(t, b.has("#upgrade"), "Upgrade agent would be refused (rolled_back_recently)")
	b.visit("server-rolled-back")
	first.mu.Lock()
	first.onUpgrade = succeeds
	first.mu.Unlock()
	b.submit("#retry", ".notice")
	require.Contains(t, b.text(".notice"), "Upgrade requested")
	require.Equal(t, "Server eu-1-a", b.text("h1"), "back on the server's page")
	var forced api.AuditEntry
	require.Eventually(t, func() bool {
		for _, e := range upgradeAudit(t, srv.URL, root) {
			if e.Action == "server.agent.upgrade" && strings.HasSuffix(e.Target.Name, "/eu-1-a") && strings.Contains(e.Detail, "(force)") {
				forced = e
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the forced upgrade in the audit log")
	require.Contains(t, forced.Detail, "from 1.4.0 to 1.5.0")
	waitAuditEntry(t, srv.URL, root, "server.agent.upgraded", "/eu-1-a")
	ups := first.upgrades()
	require.Len(t, ups, 2)
	require.False(t, ups[0].Force)
	require.True(t, ups[1].Force, "Retry anyway sends force")

	// Upgraded: the page shows the new version, no skew and nothing to do.
	require.Eventually(t, func() bool { return apiServers(t, srv.URL, root)["eu-1-a"].Version == "1.5.0" }, 20*time.Second, 100*time.Millisecond)
	b.open(eval[string](b, "location.pathname"), "#last-upgrade")
	require.Equal(t, "The agent upgraded from 1.4.0 to 1.5.0", strings.SplitN(b.text("#last-upgrade"), "\n", 2)[0])
	require.False(t, b.has("#skew"))
	require.False(t, b.has("#retry") || b.has("#upgrade"))
	b.open("/o/acme/servers", `tr[data-server="eu-1-a"]`)
	require.Empty(t, b.text(`tr[data-server="eu-1-a"] td.skew`), "no skew when the versions match")
	require.True(t, b.has("#upgrade-all"), "eu-1-b can be upgraded")
	require.Len(t, first.upgrades(), 2)
}
