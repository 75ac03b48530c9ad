package console_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// items reads a list route of the API as the given token.
func items(t *testing.T, url, token string) []map[string]any {
	t.Helper()
	var pg struct{ Items []map[string]any }
	require.Equal(t, http.StatusOK, apiCall(t, "GET", url+"?limit=1000", token, nil, &pg), url)
	return pg.Items
}

func hasItem(list []map[string]any, key, value string) bool {
	return slices.ContainsFunc(list, func(m map[string]any) bool { return m[key] == value })
}

func itemWith(t *testing.T, list []map[string]any, key, value string) map[string]any {
	t.Helper()
	i := slices.IndexFunc(list, func(m map[string]any) bool { return m[key] == value })
	require.GreaterOrEqual(t, i, 0, "no item with %s %q in %v", key, value, list)
	return list[i]
}

// TestConsoleActionsInChromium performs, in headless Chromium against a real
// control plane (real PostgreSQL), the actions on a service in an
// environment (set a plain and a secret variable, unset one, add and remove
// a domain, scale a process) and in Settings (a token with scopes chosen
// from every scope, remove a member, be refused removing the last owner,
// revoke a join token, revoke a server, delete a cluster after cancelling
// once), and checks each through the API afterwards. Destructive actions
// ask on a confirmation page first; a variable change in a protected
// environment waits in a change set; a Viewer sees none of the buttons and
// is refused a forged form. axe-core runs on every page seen.
func TestConsoleActionsInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0"})
	admin := srv.Setup(t, "ada@example.com", "acme")
	for _, u := range []struct{ email, role string }{{"vic@example.com", "viewer"}, {"mo@example.com", "member"}} {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", admin, map[string]any{"email": u.email, "password": password}, nil))
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", admin, map[string]any{"email": u.email, "role": u.role}, nil))
	}
	org := srv.URL + "/api/v1/orgs/acme"
	var cl struct {
		JoinToken struct{ Token, ID string } `json:"joinToken"`
	}
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/clusters", admin, map[string]any{"name": "eu-1"}, &cl))
	reg, err := transport.Register(t.Context(), srv.URL, nil, transport.RegisterRequest{JoinToken: cl.JoinToken.Token, Name: "eu-1-a"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/clusters/eu-1/join-tokens", admin, map[string]any{}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/clusters", admin, map[string]any{"name": "spare"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects/shop/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects/shop/environments", admin, map[string]any{"name": "production", "cluster": "eu-1", "protected": true}, nil))
	port := 8080
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects/shop/services", admin, map[string]any{"name": "api", "image": "registry.example.com/api@sha256:" + strings.Repeat("a", 64), "port": port}, nil))
	staging := org + "/projects/shop/environments/staging/services/api"
	production := org + "/projects/shop/environments/production/services/api"
	page := "/o/acme/p/shop/e/staging/s/api"

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", page, "#set-var-form")

	// Variables: a plain one, a secret one (its value never comes back to
	// the browser), and unsetting one after a confirmation.
	b.fill("#var-name", "LOG_LEVEL")
	b.fill("#var-value", "debug")
	b.submit("#set-var", ".notice")
	require.Contains(t, b.text(".notice"), "Variable LOG_LEVEL set")
	require.Equal(t, "debug", itemWith(t, items(t, staging+"/variables", admin), "name", "LOG_LEVEL")["value"])
	b.fill("#var-name", "DB_PASSWORD")
	b.fill("#var-value", "hunter2-very-secret")
	b.do(chromedp.Click(chromedp.CSS("#var-secret")))
	b.submit("#set-var", ".notice")
	require.NotContains(t, eval[string](b, "document.documentElement.outerHTML"), "hunter2-very-secret", "a secret's value is never sent back")
	sec := itemWith(t, items(t, staging+"/variables", admin), "name", "DB_PASSWORD")
	require.Equal(t, true, sec["secret"])
	require.Empty(t, sec["value"], "the API returns no secret value either")
	require.Contains(t, b.text("#variables"), "secret (hidden)")

	b.submit("#unset-LOG_LEVEL", "#confirm-form")
	require.Contains(t, b.text("#confirm-question"), "Unset the variable LOG_LEVEL")
	require.True(t, hasItem(items(t, staging+"/variables", admin), "name", "LOG_LEVEL"), "asking changes nothing")
	b.visit("confirm")
	b.submit("#confirm", ".notice")
	require.Contains(t, b.text(".notice"), "LOG_LEVEL unset")
	require.False(t, hasItem(items(t, staging+"/variables", admin), "name", "LOG_LEVEL"))

	// Domains: add two, remove one after a confirmation.
	for _, host := range []string{"shop.example.com", "keep.example.com"} {
		b.fill("#domain-host", host)
		b.submit("#add-domain", ".notice")
		require.True(t, hasItem(items(t, staging+"/domains", admin), "host", host), host)
	}
	require.Contains(t, b.text("#domains"), "shop.example.com")
	b.submit(`#domains button[type=submit]`, "#confirm-form") // the first listed, whichever it is
	host := strings.TrimPrefix(b.text("#confirm"), "Remove ")
	require.Contains(t, []string{"shop.example.com", "keep.example.com"}, host)
	b.submit("#confirm", ".notice")
	require.Contains(t, b.text(".notice"), "Domain "+host+" removed")
	require.False(t, hasItem(items(t, staging+"/domains", admin), "host", host))
	require.Len(t, items(t, staging+"/domains", admin), 1)

	// Scale a process.
	process := eval[string](b, "document.querySelector('#scale-process').value")
	require.NotEmpty(t, process)
	b.fill("#scale-replicas", "3")
	b.submit("#scale", ".notice")
	require.Contains(t, b.text(".notice"), "scaled to 3")
	reps := itemWith(t, items(t, staging+"/replicas", admin), "process", process)
	require.EqualValues(t, 3, reps["replicas"])
	require.True(t, strings.HasPrefix(b.text("#replicas"), "3"), b.text("#replicas"))
	// Bad input: a clear error, nothing changed.
	b.fill("#scale-replicas", "-1")
	eval[bool](b, "document.querySelector('#scale-replicas').removeAttribute('min'); true")
	b.submit("#scale", "#problem")
	require.Contains(t, b.text("#problem"), "whole number")
	require.EqualValues(t, 3, itemWith(t, items(t, staging+"/replicas", admin), "process", process)["replicas"])
	b.open(page, "#scale-form")
	b.visit("service-actions")
	// Without the CSRF token an owner's forged form is refused too.
	require.Equal(t, http.StatusForbidden, b.post(page+"/variables", map[string]string{"name": "NO_CSRF", "value": "1"}, false))
	require.Equal(t, http.StatusForbidden, b.post(page+"/domains/shop.example.com/remove", map[string]string{"confirmed": "yes"}, false))
	require.False(t, hasItem(items(t, staging+"/variables", admin), "name", "NO_CSRF"))
	require.Len(t, items(t, staging+"/domains", admin), 1)

	// A protected environment: the variable waits in a change set.
	b.open("/o/acme/p/shop/e/production/s/api", "#set-var-form")
	b.fill("#var-name", "FEATURE_X")
	b.fill("#var-value", "on")
	b.submit("#set-var", "#diff")
	require.Contains(t, b.text(".notice"), "waits for approval in change set")
	require.Contains(t, eval[string](b, "location.pathname"), "/o/acme/p/shop/e/production/changesets/")
	require.Equal(t, "open", b.text("#cs-status"))
	require.False(t, hasItem(items(t, production+"/variables", admin), "name", "FEATURE_X"), "not applied before approval")
	sets := items(t, org+"/projects/shop/environments/production/changesets", admin)
	require.Len(t, sets, 1)
	require.Equal(t, "open", sets[0]["status"])
	b.visit("changeset-variable")
	// So do a domain and a scale there (the API answers them with the
	// change set itself, not wrapped as for variables).
	b.open("/o/acme/p/shop/e/production/s/api", "#add-domain-form")
	b.fill("#domain-host", "www.example.com")
	b.submit("#add-domain", "#diff")
	require.Contains(t, b.text(".notice"), "waits for approval in change set")
	require.Empty(t, items(t, production+"/domains", admin), "not routed before approval")
	b.open("/o/acme/p/shop/e/production/s/api", "#scale-form")
	b.fill("#scale-replicas", "5")
	b.submit("#scale", "#diff")
	require.Contains(t, b.text(".notice"), "waits for approval in change set")
	require.NotEqualValues(t, 5, itemWith(t, items(t, production+"/replicas", admin), "process", process)["replicas"], "not scaled before approval")
	open := 0
	for _, cs := range items(t, org+"/projects/shop/environments/production/changesets", admin) {
		if cs["status"] == "open" {
			open++
		}
	}
	require.GreaterOrEqual(t, open, 1)

	// Settings: a token with scopes chosen from every scope.
	b.open("/o/acme/settings", "#new-token-form")
	offered := eval[[]string](b, `[...document.querySelectorAll('#new-token-form input[name=scope]')].map(e => e.value)`)
	var all []string
	for _, s := range domain.Scopes {
		all = append(all, string(s))
	}
	require.ElementsMatch(t, all, offered, "every scope is offered")
	b.fill("#t-name", "reader")
	for _, s := range []string{"servers:read", "audit:read"} {
		b.do(chromedp.Click(chromedp.CSS(`#new-token-form input[value="` + s + `"]`)))
	}
	b.submit("#new-token-form button", "#new-token")
	tok := itemWith(t, items(t, srv.URL+"/api/v1/tokens", admin), "name", "reader")
	require.ElementsMatch(t, []any{"audit:read", "projects:read", "servers:read"}, tok["scopes"])

	// Remove a member, after a confirmation.
	members := items(t, org+"/members", admin)
	mo := itemWith(t, members, "email", "mo@example.com")["userId"].(string)
	ada := itemWith(t, members, "email", "ada@example.com")["userId"].(string)
	b.open("/o/acme/settings", "#members")
	b.submit("#remove-"+mo, "#confirm-form")
	require.Contains(t, b.text("#confirm-question"), "mo@example.com")
	b.submit("#confirm", ".notice")
	require.Contains(t, b.text(".notice"), "Removed mo@example.com")
	require.False(t, hasItem(items(t, org+"/members", admin), "email", "mo@example.com"))

	// The last owner cannot be removed: the API's error, nothing changed.
	b.submit("#remove-"+ada, "#confirm-form")
	b.submit("#confirm", "#problem")
	require.Contains(t, b.text("#problem"), "last owner")
	require.Equal(t, "owner", itemWith(t, items(t, org+"/members", admin), "email", "ada@example.com")["role"])

	// Revoke a join token and a server.
	revokedTokens := func() (n int) {
		for _, jt := range items(t, org+"/clusters/eu-1/join-tokens", admin) {
			if jt["revokedAt"] != nil {
				n++
			}
		}
		return n
	}
	before := revokedTokens()
	b.open("/o/acme/settings", "#cluster-list")
	b.submit(".revoke-join-token", "#confirm-form")
	b.submit("#confirm", ".notice")
	require.Contains(t, b.text(".notice"), "revoked")
	require.Equal(t, before+1, revokedTokens(), "one more join token revoked")
	b.submit(".revoke-server", "#confirm-form")
	require.Contains(t, b.text("#confirm-question"), "eu-1-a")
	b.submit("#confirm", ".notice")
	require.NotNil(t, itemWith(t, items(t, org+"/clusters/eu-1/servers", admin), "id", reg.ServerID)["revokedAt"], "the server is revoked")

	// Delete a cluster: cancelled once, then confirmed.
	b.submit("#delete-cluster-spare", "#confirm-form")
	b.submit("#cancel", "#cluster-list")
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/clusters/spare", admin, nil, nil), "cancelled: the cluster is still there")
	b.submit("#delete-cluster-spare", "#confirm-form")
	b.submit("#confirm", ".notice")
	require.Contains(t, b.text(".notice"), "Cluster spare deleted")
	require.Equal(t, http.StatusNotFound, apiCall(t, "GET", org+"/clusters/spare", admin, nil, nil))
	// A cluster that runs an environment: the API's refusal is shown.
	b.submit("#delete-cluster-eu-1", "#confirm-form")
	b.submit("#confirm", "#problem")
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/clusters/eu-1", admin, nil, nil))
	b.open("/o/acme/settings", "#cluster-list")
	b.visit("settings-actions")
	b.signOut()

	// A Viewer sees none of these buttons, and a forged form is refused.
	b.signIn("vic@example.com", page, "#variables")
	for _, sel := range []string{"#set-var-form", ".unset-var", "#add-domain-form", ".remove-domain", "#scale-form"} {
		require.False(t, b.has(sel), "a viewer sees no %s", sel)
	}
	require.NotContains(t, eval[string](b, "document.documentElement.outerHTML"), "hunter2-very-secret")
	b.visit("service-viewer-actions")
	require.Equal(t, http.StatusForbidden, b.post(page+"/variables", map[string]string{"name": "EVIL", "value": "1"}, true))
	require.Equal(t, http.StatusForbidden, b.post(page+"/domains/keep.example.com/remove", nil, true), "not even the confirmation page")
	require.Equal(t, http.StatusForbidden, b.post(page+"/domains/keep.example.com/remove", map[string]string{"confirmed": "yes"}, true))
	require.Equal(t, http.StatusForbidden, b.post(page+"/replicas", map[string]string{"process": process, "replicas": "0"}, true))
	require.Equal(t, http.StatusForbidden, b.post("/o/acme/clusters/eu-1/delete", map[string]string{"confirmed": "yes"}, true))
	require.False(t, hasItem(items(t, staging+"/variables", admin), "name", "EVIL"))
	require.Len(t, items(t, staging+"/domains", admin), 1)
	require.EqualValues(t, 3, itemWith(t, items(t, staging+"/replicas", admin), "process", process)["replicas"])
	b.open("/o/acme/settings", "#members")
	for _, sel := range []string{".remove-member", ".revoke-join-token", ".revoke-server", ".delete-cluster"} {
		require.False(t, b.has(sel), "a viewer sees no %s", sel)
	}
	b.visit("settings-viewer")
}
