package mcpserver

import (
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
)

// The tool table itself names no route of the instance's administration,
// of agent upgrades, backups or restore, nor of credentials.
func TestToolTableNamesNoAdministratorRoute(t *testing.T) {
	t.Parallel()
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, d := range toolTable() {
		require.Regexp(t, snake, d.name)
		require.NotEmpty(t, d.description, d.name)
		require.NotEmpty(t, d.title, d.name)
		for _, bad := range []string{"/api/v1/instance", "/api/v1/users", "/api/v1/tokens", "/api/v1/sessions", "/api/v1/setup"} {
			require.False(t, strings.HasPrefix(d.path, bad), "%s names %s", d.name, d.path)
		}
		require.NotEqual(t, "/api/v1/audit", d.path, d.name)
		for _, bad := range []string{"upgrade", "backup", "restore"} {
			require.NotContains(t, d.path, bad, d.name)
		}
		if d.effect == reads {
			require.Equal(t, "GET", d.method, d.name)
		}
	}
}

// bind refuses a table that names a route never offered, one the API does
// not have, or one whose {x} the arguments leave empty; a good table gets
// each route's scope.
func TestBindChecksTheTable(t *testing.T) {
	t.Parallel()
	routes := []httpapi.RouteInfo{
		{Method: "GET", Path: "/api/v1/orgs"},
		{Method: "GET", Path: "/api/v1/orgs/{org}/projects", Scope: domain.ScopeProjectsRead, List: true},
		{Method: "GET", Path: "/api/v1/instance/backups", Scope: domain.ScopeInstanceAdmin},
		{Method: "POST", Path: "/api/v1/servers/{server}/upgrade", Scope: domain.ScopeServersWrite, Request: struct{}{}},
		{Method: "PATCH", Path: "/api/v1/instance/settings", Scope: domain.ScopeInstanceAdmin, Request: struct{}{}},
	}
	good, err := bind([]toolDef{
		tool[noArgs]("list_organisations", "t", "GET", "/api/v1/orgs", reads, true, "d"),
		tool[listProjectsArgs]("list_projects", "t", "GET", "/api/v1/orgs/{org}/projects", reads, true, "d"),
	}, routes)
	require.NoError(t, err)
	require.Equal(t, domain.Scope(""), good[0].scope)
	require.Equal(t, domain.ScopeProjectsRead, good[1].scope, "the scope comes from the route")

	type serverArgs struct {
		Server string `json:"server" path:"server"`
	}
	for _, c := range []struct {
		def  toolDef
		says string
	}{
		{tool[noArgs]("backups", "t", "GET", "/api/v1/instance/backups", reads, true, "d"), "never a tool"},
		{tool[serverArgs]("upgrade", "t", "POST", "/api/v1/servers/{server}/upgrade", replaces, false, "d"), "never a tool"},
		{tool[noArgs]("settings", "t", "PATCH", "/api/v1/instance/settings", replaces, true, "d"), "never a tool"},
		{tool[noArgs]("nowhere", "t", "GET", "/api/v1/nowhere", reads, true, "d"), "no route of the API"},
		{tool[noArgs]("projects", "t", "GET", "/api/v1/orgs/{org}/projects", reads, true, "d"), "does not fill {org}"},
		{tool[orgArgs]("orgs", "t", "GET", "/api/v1/orgs", reads, true, "d"), "fills {org}"},
	} {
		_, err := bind([]toolDef{c.def}, routes)
		require.ErrorContains(t, err, c.says, c.def.name)
	}
	// Every route an instance administrator alone may call is never offered.
	for _, r := range routes {
		if r.Scope == domain.ScopeInstanceAdmin || strings.Contains(r.Path, "upgrade") {
			_, never := neverOffered(r.Method, r.Path, r.Scope)
			require.True(t, never, r.Path)
		}
	}
}

// A token's bucket: burst at once, then rate a second.
func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	l := newLimiter(2, 3, func() time.Time { return now })
	for range 3 {
		ok, _ := l.allow("a")
		require.True(t, ok)
	}
	ok, wait := l.allow("a")
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, wait)
	ok, _ = l.allow("b")
	require.True(t, ok, "b has its own bucket")
	now = now.Add(500 * time.Millisecond)
	ok, _ = l.allow("a")
	require.True(t, ok)
	ok, _ = l.allow("a")
	require.False(t, ok)
	now = now.Add(time.Hour)
	for range 3 {
		ok, _ := l.allow("a")
		require.True(t, ok, "a bucket never holds more than its burst")
	}
	ok, _ = l.allow("a")
	require.False(t, ok)
}

// The SDK's per-request Info lines are dropped; its warnings are kept.
func TestQuietLogger(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	l := quiet(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))).With("k", "v").WithGroup("g")
	l.Info("server session connected")
	l.Warn("something odd", "x", 1)
	require.NotContains(t, b.String(), "session connected")
	require.Contains(t, b.String(), "something odd")
	require.Contains(t, b.String(), "k=v")
}

// Only a success is a tool's success: a redirect did not do what was asked
// (the API answers none by design; its mux answers one for a path that
// names another route).
func TestOnlyASuccessIsAToolsSuccess(t *testing.T) {
	t.Parallel()
	bt := boundTool{}
	bt.method = "DELETE"
	for _, status := range []int{301, 307, 308, 400, 403, 409, 500} {
		res := result(bt, "/api/v1/orgs/acme", status, []byte(`<a href="/api/v1/orgs/acme">Temporary Redirect</a>`))
		if !res.IsError {
			t.Errorf("%d is a tool success", status)
		}
	}
	for _, status := range []int{200, 201, 202, 204} {
		if res := result(bt, "/api/v1/orgs/acme", status, []byte(`{}`)); res.IsError {
			t.Errorf("%d is a tool error", status)
		}
	}
}
