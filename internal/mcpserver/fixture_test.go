package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const password = "correct horse battery staple"

// fixture is a control plane with an organisation acme, its project shop
// (environments staging and production, protected, on cluster eu-1; service
// api from an image), four users and their API tokens:
//
//	alice  instance administrator and owner; token "everything": every scope
//	bob    admin;  token "approver": read, deploy, approve, audit
//	carol  member; token "assistant": read, write, deploy, builds
//	dave   viewer; token "viewer": projects:read; token "overreach":
//	       projects:read and deployments:write (more than his role grants)
type fixture struct {
	srv      *servertest.Server
	registry string
	// owner is alice's console session, for checks through the REST API.
	owner *client.Client
	// sessions are each user's console session.
	sessions map[string]*client.Client
	tokens   map[string]api.CreatedToken
	db       *pgxpool.Pool
}

func newFixture(t testing.TB, opts servertest.Options) *fixture {
	t.Helper()
	ctx := context.Background()
	registry := registrytest.Start(t, "api:v1", "api:v2", "api:v3")
	opts.Insecure = append(opts.Insecure, registry)
	srv := servertest.Start(t, opts)
	owner, err := client.New(srv.URL, srv.Setup(t, "alice@example.com", "acme"))
	require.NoError(t, err)
	f := &fixture{srv: srv, registry: registry, owner: owner, tokens: map[string]api.CreatedToken{}}

	anon, err := client.New(srv.URL, "")
	require.NoError(t, err)
	sessions := map[string]*client.Client{"alice": owner}
	f.sessions = sessions
	for user, role := range map[string]string{"bob": "admin", "carol": "member", "dave": "viewer"} {
		_, err := owner.CreateUser(ctx, api.CreateUserRequest{Email: user + "@example.com", Password: password})
		require.NoError(t, err)
		_, err = owner.AddMember(ctx, "acme", user+"@example.com", role)
		require.NoError(t, err)
		s, err := anon.Login(ctx, user+"@example.com", password)
		require.NoError(t, err)
		sessions[user], err = client.New(srv.URL, s.Token)
		require.NoError(t, err)
	}
	all := make([]string, len(domain.Scopes))
	for i, s := range domain.Scopes {
		all[i] = string(s)
	}
	for _, tk := range []struct {
		user, name string
		scopes     []string
	}{
		{"alice", "everything", all},
		{"bob", "approver", []string{"projects:read", "deployments:write", "approvals:write", "audit:read"}},
		{"carol", "assistant", []string{"projects:read", "projects:write", "deployments:write", "builds:read"}},
		{"dave", "viewer", []string{"projects:read"}},
		{"dave", "overreach", []string{"projects:read", "deployments:write"}},
	} {
		created, err := sessions[tk.user].CreateToken(ctx, api.CreateTokenRequest{Name: tk.name, Scopes: tk.scopes})
		require.NoError(t, err)
		f.tokens[tk.name] = created
	}

	_, err = owner.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	_, err = owner.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = owner.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	_, err = owner.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "production", Cluster: "eu-1", Protected: true})
	require.NoError(t, err)
	port := 8080
	_, err = owner.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "api", Image: registry + "/api:v1", Port: &port})
	require.NoError(t, err)

	f.db, err = pgxpool.New(ctx, srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(f.db.Close)
	return f
}

// bearer adds a token to every request of an MCP client.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect is the Go SDK's client over streamable HTTP, as the token.
func (f *fixture) connect(t *testing.T, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := f.dial(t, token)
	require.NoError(t, err)
	return cs
}

func (f *fixture) dial(t *testing.T, token string) (*mcp.ClientSession, error) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "nebulactrl-test", Version: "1"}, nil)
	tr := &mcp.StreamableClientTransport{Endpoint: f.srv.URL + mcpserver.Path, MaxRetries: -1, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{token: token, base: http.DefaultTransport}}}
	cs, err := c.Connect(t.Context(), tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// tools lists the session's tools by name.
func tools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		require.NoError(t, err)
		out[tool.Name] = tool
	}
	return out
}

// call calls a tool; a protocol error fails the test.
func call(t *testing.T, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, "calling %s", name)
	return res
}

// text is a result's text content, joined.
func text(res *mcp.CallToolResult) string {
	var s string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s += tc.Text + "\n"
		}
	}
	return s
}

// structured decodes a result's structured content into out.
func structured(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, out), "%s", b)
}

func target(extra map[string]any) map[string]any {
	args := map[string]any{"org": "acme", "project": "shop", "environment": "staging", "service": "api"}
	for k, v := range extra {
		args[k] = v
	}
	return args
}

// count counts rows of a query.
func (f *fixture) count(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, f.db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}
