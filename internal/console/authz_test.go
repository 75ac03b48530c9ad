package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/console"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// consoleRoute is a console route with what its API call needs: the scope
// checked in the organisation (or none), and a request that is refused or
// fails validation after the scope check, so that the matrix changes
// nothing worth keeping.
type consoleRoute struct {
	pattern string
	path    string
	form    url.Values
	scope   domain.Scope
}

// TestConsoleAuthorisationMatrix sends every console route as each kind of
// user (owner and instance administrator, admin, member, viewer, and a user
// of no organisation) against a real control plane: a role without the
// API's scope gets 403, a non-member 404 for anything under the
// organisation, everyone else gets past the check (the API's answer to the
// deliberately incomplete input, never 403). Every route the console
// registers is in the table, or named as exempt.
func TestConsoleAuthorisationMatrix(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0"})
	admin := srv.Setup(t, "ada@example.com", "acme")
	users := map[string]domain.Role{"adam@example.com": domain.RoleAdmin, "mia@example.com": domain.RoleMember, "vic@example.com": domain.RoleViewer, "nora@example.com": ""}
	for email, role := range users {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", admin, map[string]any{"email": email, "password": password}, nil))
		if role != "" {
			require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", admin, map[string]any{"email": email, "role": role}, nil))
		}
	}
	var cl struct {
		JoinToken struct{ Token string } `json:"joinToken"`
	}
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", admin, map[string]any{"name": "eu-1"}, &cl))
	reg, err := transport.Register(t.Context(), srv.URL, nil, transport.RegisterRequest{JoinToken: cl.JoinToken.Token, Name: "eu-1-a"})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/services", admin, map[string]any{"name": "api", "image": "registry.example.com/api@sha256:" + strings.Repeat("a", 64)}, nil))

	target := "/o/acme/p/shop/e/staging/s/api"
	missing := uuid.NewString()
	routes := []consoleRoute{
		{"GET /{$}", "/", nil, ""},
		{"GET /me", "/me", nil, ""},
		{"GET /switch", "/switch?org=acme", nil, ""},
		{"GET /o/{org}", "/o/acme", nil, domain.ScopeProjectsRead},
		{"POST /o/{org}/projects", "/o/acme/projects", url.Values{"name": {""}}, domain.ScopeProjectsWrite},
		{"GET /o/{org}/audit", "/o/acme/audit", nil, domain.ScopeAuditRead},
		{"GET /o/{org}/audit/events", "/o/acme/audit/events", nil, domain.ScopeAuditRead},
		{"GET /o/{org}/settings", "/o/acme/settings", nil, domain.ScopeProjectsRead},
		// API tokens are the user's own (POST /api/v1/tokens names no
		// organisation): any member may make one.
		{"POST /o/{org}/settings/tokens", "/o/acme/settings/tokens", url.Values{"name": {""}}, ""},
		{"POST /o/{org}/settings/members/{user}/role", "/o/acme/settings/members/" + missing + "/role", url.Values{"role": {"viewer"}}, domain.ScopeMembersWrite},
		// A token is revoked by its owner (DELETE /api/v1/tokens/{token}).
		{"POST /o/{org}/settings/tokens/{token}/revoke", "/o/acme/settings/tokens/" + missing + "/revoke", nil, ""},
		{"POST /o/{org}/settings/members", "/o/acme/settings/members", url.Values{"email": {""}, "role": {"viewer"}}, domain.ScopeMembersWrite},
		{"POST /o/{org}/clusters", "/o/acme/clusters", url.Values{"name": {""}}, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/join-tokens", "/o/acme/clusters/eu-1/join-tokens", nil, domain.ScopeServersWrite},
		{"GET /o/{org}/servers", "/o/acme/servers", nil, domain.ScopeServersRead},
		{"GET /o/{org}/servers/{server}", "/o/acme/servers/" + reg.ServerID, nil, domain.ScopeServersRead},
		{"POST /o/{org}/servers/upgrade", "/o/acme/servers/upgrade", nil, domain.ScopeServersWrite},
		{"POST /o/{org}/servers/{server}/upgrade", "/o/acme/servers/" + reg.ServerID + "/upgrade", nil, domain.ScopeServersWrite},
		{"GET /o/{org}/mesh", "/o/acme/mesh", nil, domain.ScopeServersRead},
		// eu-1 has no node in the mesh: nothing to ask, past the scope.
		{"POST /o/{org}/mesh/clusters/{cluster}/rotate", "/o/acme/mesh/clusters/eu-1/rotate", nil, domain.ScopeServersWrite},
		// Outbound webhooks (webhooks.go): read with audit:read, changed
		// with webhooks:write; an endpoint without a URL is refused past the
		// scope (the API's 400, or the console's own 422 without an event
		// type), the endpoint and delivery named do not exist.
		{"GET /o/{org}/webhooks", "/o/acme/webhooks", nil, domain.ScopeAuditRead},
		{"POST /o/{org}/webhooks", "/o/acme/webhooks", url.Values{"url": {""}, "event": {"*"}}, domain.ScopeWebhooksWrite},
		{"POST /o/{org}/webhooks", "/o/acme/webhooks", url.Values{"url": {"https://hooks.example.com/x"}}, domain.ScopeWebhooksWrite},
		{"GET /o/{org}/webhooks/{webhook}", "/o/acme/webhooks/" + missing, nil, domain.ScopeAuditRead},
		{"POST /o/{org}/webhooks/{webhook}/rotate", "/o/acme/webhooks/" + missing + "/rotate", nil, domain.ScopeWebhooksWrite},
		{"POST /o/{org}/webhooks/{webhook}/enable", "/o/acme/webhooks/" + missing + "/enable", nil, domain.ScopeWebhooksWrite},
		{"POST /o/{org}/webhooks/{webhook}/delete", "/o/acme/webhooks/" + missing + "/delete", nil, domain.ScopeWebhooksWrite},
		{"POST /o/{org}/webhooks/{webhook}/delete", "/o/acme/webhooks/" + missing + "/delete", url.Values{"confirmed": {"yes"}}, domain.ScopeWebhooksWrite},
		{"GET /o/{org}/webhooks/{webhook}/deliveries/{delivery}", "/o/acme/webhooks/" + missing + "/deliveries/" + missing, nil, domain.ScopeAuditRead},
		{"POST /o/{org}/webhooks/{webhook}/deliveries/{delivery}/redeliver", "/o/acme/webhooks/" + missing + "/deliveries/" + missing + "/redeliver", nil, domain.ScopeWebhooksWrite},
		{"GET /o/{org}/p/{project}", "/o/acme/p/shop", nil, domain.ScopeProjectsRead},
		{"POST /o/{org}/p/{project}/environments", "/o/acme/p/shop/environments", url.Values{"name": {""}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/services", "/o/acme/p/shop/services", url.Values{"name": {""}}, domain.ScopeProjectsWrite},
		{"GET /o/{org}/p/{project}/e/{env}", "/o/acme/p/shop/e/staging", nil, domain.ScopeProjectsRead},
		{"GET /o/{org}/p/{project}/e/{env}/changesets", "/o/acme/p/shop/e/staging/changesets", nil, domain.ScopeProjectsRead},
		{"GET /o/{org}/p/{project}/e/{env}/changesets/{changeset}", "/o/acme/p/shop/e/staging/changesets/" + missing, nil, domain.ScopeProjectsRead},
		{"POST /o/{org}/p/{project}/e/{env}/changesets/{changeset}/{decision}", "/o/acme/p/shop/e/staging/changesets/" + missing + "/approve", url.Values{"version": {"1"}}, domain.ScopeApprovalsWrite},
		{"GET /o/{org}/p/{project}/e/{env}/events", "/o/acme/p/shop/e/staging/events", nil, domain.ScopeProjectsRead},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}", target, nil, domain.ScopeProjectsRead},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/deploy", target + "/deploy", url.Values{"image": {"not an image!"}}, domain.ScopeDeploymentsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/rollback", target + "/rollback", url.Values{"release": {"999"}}, domain.ScopeDeploymentsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/resume", target + "/resume", nil, domain.ScopeDeploymentsWrite},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}/logs", target + "/logs", nil, domain.ScopeProjectsRead},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}/d/{deployment}", target + "/d/" + missing, nil, domain.ScopeProjectsRead},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}/d/{deployment}/events", target + "/d/" + missing + "/events", nil, domain.ScopeProjectsRead},
		// Builds from Git (builds.go): api deploys an image, so it tracks
		// no branch (404 past the scope check); the build does not exist;
		// a rotation makes the project's webhook secret (a new one for
		// each role that may).
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/tracking", target + "/tracking", url.Values{"branch": {"main"}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/tracking", target + "/tracking", url.Values{"branch": {""}}, domain.ScopeProjectsWrite},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}/b/{build}", target + "/b/" + missing, nil, domain.ScopeBuildsRead},
		{"GET /o/{org}/p/{project}/e/{env}/s/{service}/b/{build}/events", target + "/b/" + missing + "/events", nil, domain.ScopeBuildsRead},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/b/{build}/cancel", target + "/b/" + missing + "/cancel", nil, domain.ScopeBuildsWrite},
		{"POST /o/{org}/p/{project}/webhook/rotate", "/o/acme/p/shop/webhook/rotate", nil, domain.ScopeProjectsWrite},
		// The actions added with actions.go: a destructive one is asked
		// first (a confirmation page, refused to a role without the scope),
		// then sent with confirmed=yes, for something that does not exist.
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/variables", target + "/variables", url.Values{"name": {""}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/variables/{name}/unset", target + "/variables/NO_SUCH_VAR/unset", nil, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/variables/{name}/unset", target + "/variables/NO_SUCH_VAR/unset", url.Values{"confirmed": {"yes"}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/domains", target + "/domains", url.Values{"host": {""}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/domains/{host}/remove", target + "/domains/missing.example.com/remove", nil, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/domains/{host}/remove", target + "/domains/missing.example.com/remove", url.Values{"confirmed": {"yes"}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/replicas", target + "/replicas", url.Values{"replicas": {"-1"}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/p/{project}/e/{env}/s/{service}/replicas", target + "/replicas", url.Values{"process": {"no-such-process"}, "replicas": {"1"}}, domain.ScopeProjectsWrite},
		{"POST /o/{org}/settings/members/{user}/remove", "/o/acme/settings/members/" + missing + "/remove", nil, domain.ScopeMembersWrite},
		{"POST /o/{org}/settings/members/{user}/remove", "/o/acme/settings/members/" + missing + "/remove", url.Values{"confirmed": {"yes"}}, domain.ScopeMembersWrite},
		{"POST /o/{org}/clusters/{cluster}/join-tokens/{token}/revoke", "/o/acme/clusters/eu-1/join-tokens/" + missing + "/revoke", nil, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/join-tokens/{token}/revoke", "/o/acme/clusters/eu-1/join-tokens/" + missing + "/revoke", url.Values{"confirmed": {"yes"}}, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/delete", "/o/acme/clusters/no-such-cluster/delete", nil, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/delete", "/o/acme/clusters/no-such-cluster/delete", url.Values{"confirmed": {"yes"}}, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/servers/{server}/revoke", "/o/acme/clusters/eu-1/servers/" + missing + "/revoke", nil, domain.ScopeServersWrite},
		{"POST /o/{org}/clusters/{cluster}/servers/{server}/revoke", "/o/acme/clusters/eu-1/servers/" + missing + "/revoke", url.Values{"confirmed": {"yes"}}, domain.ScopeServersWrite},
		{"GET /instance", "/instance", nil, domain.ScopeInstanceAdmin},
		{"POST /instance/auto-upgrade", "/instance/auto-upgrade", url.Values{"agentAutoUpgrade": {"on"}}, domain.ScopeInstanceAdmin},
	}
	// Exempt: public (static files, the sign-in form), sign-out (it ends
	// the session; TestConsoleSecurity covers it), the not-found page.
	exempt := []string{"GET /static/{hash}/{file}", "GET /signin", "POST /signin", "POST /signout", "/"}
	con := consoleRoutes(t)
	for _, p := range con {
		if slices.Contains(exempt, p) {
			continue
		}
		require.True(t, slices.ContainsFunc(routes, func(r consoleRoute) bool { return r.pattern == p }), "console route %s is not in the authorisation matrix", p)
	}
	for _, r := range routes {
		require.Contains(t, con, r.pattern, "the matrix names a route the console does not have")
	}

	type who struct {
		email string
		role  domain.Role
		admin bool
	}
	people := []who{{"ada@example.com", domain.RoleOwner, true}}
	for email, role := range users {
		people = append(people, who{email, role, false})
	}
	for _, p := range people {
		c := newWebClient(t, srv.URL)
		resp, _ := c.signIn(p.email, password)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, p.email)
		token := c.csrf("/me")
		for _, r := range routes {
			status := c.status(r, token)
			underOrg := strings.HasPrefix(r.path, "/o/") || strings.HasPrefix(r.path, "/switch")
			switch {
			case underOrg && p.role == "":
				require.Equal(t, http.StatusNotFound, status, "%s as %s (not a member)", r.pattern, p.email)
			case r.scope == domain.ScopeInstanceAdmin && !p.admin,
				r.scope != "" && r.scope != domain.ScopeInstanceAdmin && !domain.RoleGrants(p.role, r.scope):
				require.Equal(t, http.StatusForbidden, status, "%s as %s (%s, lacks %s)", r.pattern, p.email, p.role, r.scope)
			default:
				require.NotEqual(t, http.StatusForbidden, status, "%s as %s (%s)", r.pattern, p.email, p.role)
				require.Less(t, status, 500, "%s as %s", r.pattern, p.email)
			}
		}
	}
}

// status sends the route's request and returns the answer's status (an
// event stream is cut off once its status is known).
func (w *webClient) status(r consoleRoute, csrf string) int {
	w.t.Helper()
	method := strings.Fields(r.pattern)[0]
	var body io.Reader
	if method == "POST" {
		f := url.Values{}
		for k, v := range r.form {
			f[k] = v
		}
		f.Set("csrf", csrf)
		body = strings.NewReader(f.Encode())
	}
	ctx, cancel := context.WithTimeout(w.t.Context(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, w.base+r.path, body)
	require.NoError(w.t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := w.http.Do(req)
	require.NoError(w.t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// consoleRoutes lists the routes the console registers.
func consoleRoutes(t *testing.T) []string {
	t.Helper()
	// The handler is only needed to build the console; no request is sent.
	con, err := console.New(console.Config{API: http.NotFoundHandler()})
	require.NoError(t, err)
	return con.Routes()
}
