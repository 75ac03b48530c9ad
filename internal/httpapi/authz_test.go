package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/image"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// routes returns the route table of an API built on a scratch database.
func routes(t *testing.T) []httpapi.RouteInfo {
	t.Helper()
	pool := pgtest.Pool(t)
	store := eventstore.New(pool, nil)
	cmd, err := dispatch.New(dispatch.Config{Store: store})
	require.NoError(t, err)
	k, _ := seal.GenerateMasterKey()
	mk, err := seal.ParseMasterKey(k)
	require.NoError(t, err)
	a, err := httpapi.New(httpapi.Config{Pool: pool, Commands: cmd, Sealer: seal.New(pool, mk, nil), Images: image.NewResolver(image.Config{}), Telemetry: telemetry.New(pool, nil)})
	require.NoError(t, err)
	return a.Routes()
}

type principal struct {
	name    string
	token   string
	role    domain.Role // in acme; "" for none
	admin   bool
	scopes  []domain.Scope // nil for a session
	orgRole bool
}

func (p principal) allowed(rt httpapi.RouteInfo) bool {
	if p.scopes != nil && rt.Scope != "" && !slices.Contains(p.scopes, rt.Scope) {
		return false
	}
	switch {
	case rt.Scope == "":
		return true
	case rt.Scope == domain.ScopeInstanceAdmin:
		return p.admin
	case strings.Contains(rt.Path, "{org}"):
		return p.role != "" && domain.RoleGrants(p.role, rt.Scope)
	}
	return true
}

type fixture struct {
	srv    *servertest.Server
	c      *client
	root   string
	people []principal
}

func login(t *testing.T, c *client, email string) string {
	t.Helper()
	r := c.do("POST", "/api/v1/sessions", "", map[string]string{"email": email, "password": "correct horse battery staple"})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var s api.SessionResponse
	r.json(t, &s)
	return s.Token
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{srv: servertest.Start(t, servertest.Options{})}
	f.c = newClient(t, f.srv)
	f.root = f.srv.Setup(t, "root@example.com", "acme")
	c, root := f.c, f.root
	must := func(r response, status int) {
		t.Helper()
		require.Equal(t, status, r.status, string(r.body))
	}
	must(c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", root, map[string]any{"name": "staging", "cluster": "eu-1"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects/shop/services", root, map[string]any{"name": "api", "image": "nginx:1", "port": 8080}), 201)
	f.people = append(f.people, principal{name: "owner+instance-admin", token: root, role: domain.RoleOwner, admin: true})
	for _, role := range []domain.Role{domain.RoleAdmin, domain.RoleMember, domain.RoleViewer} {
		email := string(role) + "@example.com"
		must(c.do("POST", "/api/v1/users", root, map[string]any{"email": email, "password": "correct horse battery staple"}), 201)
		must(c.do("POST", "/api/v1/orgs/acme/members", root, map[string]any{"email": email, "role": string(role)}), 201)
		f.people = append(f.people, principal{name: string(role), token: login(t, c, email), role: role})
	}
	must(c.do("POST", "/api/v1/users", root, map[string]any{"email": "outsider@example.com", "password": "correct horse battery staple"}), 201)
	out := login(t, c, "outsider@example.com")
	must(c.do("POST", "/api/v1/orgs", out, map[string]any{"name": "other"}), 201)
	f.people = append(f.people, principal{name: "owner of another organisation", token: out})
	for _, s := range domain.Scopes {
		r := c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "only-" + strings.ReplaceAll(string(s), ":", "-"), "scopes": []string{string(s)}})
		must(r, 201)
		var tok api.CreatedToken
		r.json(t, &tok)
		f.people = append(f.people, principal{name: "token with " + string(s), token: tok.Secret, role: domain.RoleOwner, admin: true, scopes: []domain.Scope{s}})
	}
	return f
}

// concrete fills a route's path with names that exist, except that the
// thing a DELETE would delete does not, so the matrix changes nothing.
func concrete(rt httpapi.RouteInfo) string {
	values := map[string]string{"org": "acme", "project": "shop", "env": "staging", "service": "api", "cluster": "eu-1",
		"user": uuid.NewString(), "token": uuid.NewString(), "server": uuid.NewString(), "name": "NOPE", "host": "nope.example.com", "changeset": uuid.NewString(),
		"deployment": uuid.NewString()}
	path := rt.Path
	if rt.Method == "DELETE" {
		for _, last := range []string{"{project}", "{env}", "{service}", "{cluster}"} {
			if strings.HasSuffix(path, last) {
				path = strings.TrimSuffix(path, last) + "gone"
			}
		}
	}
	for k, v := range values {
		path = strings.ReplaceAll(path, "{"+k+"}", v)
	}
	return path
}

func body(rt httpapi.RouteInfo) any {
	switch {
	case rt.Method == "GET" || rt.Method == "DELETE":
		return nil
	case strings.HasSuffix(rt.Path, "/deployments"):
		return map[string]any{"image": "not a reference!"}
	}
	return "{}"
}

// TestAuthorizationMatrix calls every route as every role and with tokens
// of every single scope, and checks allow and deny against the rules.
func TestAuthorizationMatrix(t *testing.T) {
	f := newFixture(t)
	table := routes(t)
	checked := 0
	for _, rt := range table {
		if rt.Public || rt.Path == "/api/v1/sessions/current" {
			continue
		}
		for _, p := range f.people {
			r := f.c.do(rt.Method, concrete(rt), p.token, body(rt))
			_, msg := "", ""
			if r.status >= 400 {
				_, msg = r.errorCode(t)
			}
			orgHidden := r.status == http.StatusNotFound && strings.Contains(msg, "organisation acme not found")
			denied := r.status == http.StatusForbidden || r.status == http.StatusUnauthorized || orgHidden
			what := fmt.Sprintf("%s %s as %s: %d %s", rt.Method, rt.Path, p.name, r.status, msg)
			if p.allowed(rt) {
				require.False(t, denied, "should be allowed: "+what)
			} else {
				require.True(t, denied, "should be denied: "+what)
				if r.status == http.StatusForbidden {
					require.Contains(t, msg, string(rt.Scope), "a denial names the missing scope: "+what)
				}
			}
			checked++
		}
	}
	require.Greater(t, checked, 500)
	t.Logf("checked %d route × principal pairs", checked)
}

func TestRequestsWithoutAValidTokenAreRefused(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	// The root token with its last character changed (to another one).
	last := "A"
	if strings.HasSuffix(root, "A") {
		last = "B"
	}
	for _, tok := range []string{"", "garbage", "nbl_0000_x", root[:len(root)-1] + last, "nbl_" + strings.Repeat("a", 32) + "_" + strings.Repeat("b", 43)} {
		r := c.do("GET", "/api/v1/orgs/acme/projects", tok, nil)
		require.Equal(t, http.StatusUnauthorized, r.status, tok)
	}
	// A revoked token stops working at once.
	r := c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "ci", "scopes": []string{"projects:read"}})
	require.Equal(t, 201, r.status)
	var tok api.CreatedToken
	r.json(t, &tok)
	require.Equal(t, 200, c.do("GET", "/api/v1/orgs/acme/projects", tok.Secret, nil).status)
	require.Equal(t, 204, c.do("DELETE", "/api/v1/tokens/"+tok.ID, root, nil).status)
	r = c.do("GET", "/api/v1/orgs/acme/projects", tok.Secret, nil)
	require.Equal(t, http.StatusUnauthorized, r.status)
	_, msg := r.errorCode(t)
	require.Contains(t, msg, "revoked")
	// Signing out revokes the session.
	sess := login(t, c, "root@example.com")
	require.Equal(t, 204, c.do("DELETE", "/api/v1/sessions/current", sess, nil).status)
	require.Equal(t, http.StatusUnauthorized, c.do("GET", "/api/v1/me", sess, nil).status)
	_ = context.Background
}
