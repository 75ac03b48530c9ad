package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

type envelope struct {
	Status          int             `json:"status"`
	Body            json.RawMessage `json:"body"`
	ChangeSetOpened string          `json:"changeSetOpened"`
	Error           struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// The Go SDK's client against a real control plane: the tools a token's
// scopes allow, reads, a deploy recorded as the token via mcp, refusals that
// change nothing, change sets and four eyes, secrets never returned.
func TestGoClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	assistant := f.connect(t, f.tokens["assistant"].Secret)

	t.Run("tools by scope", func(t *testing.T) {
		member := tools(t, assistant)
		viewer := tools(t, f.connect(t, f.tokens["viewer"].Secret))
		approver := tools(t, f.connect(t, f.tokens["approver"].Secret))
		for _, name := range []string{"list_organisations", "list_projects", "list_environments", "list_services", "get_environment_state",
			"list_deployments", "get_deployment", "get_container_logs", "list_variables", "list_change_sets", "get_change_set"} {
			require.Contains(t, viewer, name)
			require.True(t, viewer[name].Annotations.ReadOnlyHint, "%s reads", name)
		}
		for _, name := range []string{"deploy", "rollback", "set_variables", "unset_variable", "scale", "approve_change_set", "reject_change_set",
			"get_audit_log", "list_builds", "get_build_logs"} {
			require.NotContains(t, viewer, name, "a token with projects:read alone sees no %s", name)
		}
		for _, name := range []string{"deploy", "rollback", "set_variables", "unset_variable", "scale", "list_builds", "get_build_logs"} {
			require.Contains(t, member, name)
		}
		require.NotContains(t, member, "approve_change_set", "the assistant's token lacks approvals:write")
		require.NotContains(t, member, "get_audit_log", "and audit:read")
		require.Contains(t, approver, "approve_change_set")
		require.Contains(t, approver, "get_audit_log")
		require.NotContains(t, approver, "set_variables", "the approver's token lacks projects:write")
		for name, tool := range member {
			route := tool.Meta[mcpserver.MetaRoute].(string)
			require.Contains(t, tool.Description, route, "%s says which route it calls", name)
			require.NotEmpty(t, tool.Description)
			schema, ok := tool.InputSchema.(map[string]any)
			require.True(t, ok)
			require.Equal(t, "object", schema["type"])
			if strings.Contains(route, "{org}") {
				require.Contains(t, schema["required"], "org", "%s requires org", name)
			}
			if strings.HasPrefix(route, "GET ") {
				require.True(t, tool.Annotations.ReadOnlyHint, name)
				continue
			}
			require.False(t, tool.Annotations.ReadOnlyHint, name)
			require.NotNil(t, tool.Annotations.DestructiveHint, name)
			require.True(t, *tool.Annotations.DestructiveHint, name)
		}
		require.False(t, member["deploy"].Annotations.IdempotentHint, "each deploy is a new release")
		require.True(t, member["scale"].Annotations.IdempotentHint)
	})

	t.Run("reads", func(t *testing.T) {
		var orgs struct {
			Items []api.Organisation `json:"items"`
		}
		var env envelope
		res := call(t, assistant, "list_organisations", map[string]any{})
		require.False(t, res.IsError, text(res))
		structured(t, res, &env)
		require.Equal(t, 200, env.Status)
		require.NoError(t, json.Unmarshal(env.Body, &orgs))
		require.Len(t, orgs.Items, 1)
		require.Equal(t, "acme", orgs.Items[0].Name)
		require.Contains(t, text(res), `"acme"`, "the API's JSON is the text too")

		var page struct {
			Items []map[string]any `json:"items"`
		}
		for tool, want := range map[string][]string{
			"list_projects":     {"shop"},
			"list_environments": {"production", "staging"},
			"list_services":     {"api"},
		} {
			args := map[string]any{"org": "acme", "project": "shop"}
			if tool == "list_projects" {
				delete(args, "project")
			}
			res := call(t, assistant, tool, args)
			require.False(t, res.IsError, "%s: %s", tool, text(res))
			structured(t, res, &env)
			page.Items = nil
			require.NoError(t, json.Unmarshal(env.Body, &page), "%s", env.Body)
			var names []string
			for _, it := range page.Items {
				names = append(names, it["name"].(string))
			}
			sort.Strings(names)
			require.Equal(t, want, names, tool)
		}

		// Unknown names are the API's 404, as a tool error.
		res = call(t, assistant, "list_services", map[string]any{"org": "acme", "project": "nope"})
		require.True(t, res.IsError)
		structured(t, res, &env)
		require.Equal(t, 404, env.Status)
		require.Equal(t, "not_found", env.Error.Code)
		require.Contains(t, text(res), "project acme/nope not found")
	})

	var deploymentID string
	t.Run("deploy as the member's token", func(t *testing.T) {
		before := f.count(t, `SELECT count(*) FROM events`)
		res := call(t, assistant, "deploy", target(map[string]any{"image": f.registry + "/api:v2"}))
		require.False(t, res.IsError, text(res))
		var env envelope
		structured(t, res, &env)
		require.Equal(t, 202, env.Status)
		require.Empty(t, env.ChangeSetOpened, "staging is not protected")
		var dr api.DeployResponse
		require.NoError(t, json.Unmarshal(env.Body, &dr))
		require.NotNil(t, dr.Deployment)
		deploymentID = dr.Deployment.ID
		require.Greater(t, f.count(t, `SELECT count(*) FROM events`), before)

		// The deployment is there through the REST API.
		ds, err := f.owner.Deployments(ctx, "acme", "shop", "staging", "api", 10)
		require.NoError(t, err)
		require.NotEmpty(t, ds)
		require.Equal(t, deploymentID, ds[0].ID)

		// The audit log names the token, via mcp.
		page, err := f.owner.Audit(ctx, client.AuditQuery{Org: "acme", Action: "service.deploy"})
		require.NoError(t, err)
		require.NotEmpty(t, page.Items)
		e := page.Items[len(page.Items)-1]
		require.Equal(t, "token", e.Actor.Kind)
		require.Equal(t, f.tokens["assistant"].ID, e.Actor.ID)
		require.Contains(t, e.Actor.Name, "carol@example.com (token assistant)")
		require.Equal(t, "mcp", e.Via)
		// A change made through the REST API records no via.
		_, err = f.owner.SetVariables(ctx, "acme", "shop", "staging", "api", []api.VariableInput{{Name: "REST", Value: "1"}})
		require.NoError(t, err)
		page, err = f.owner.Audit(ctx, client.AuditQuery{Org: "acme", Action: "variable.update"})
		require.NoError(t, err)
		require.NotEmpty(t, page.Items)
		require.Empty(t, page.Items[len(page.Items)-1].Via)

		// The deployment and its stages, through the tools.
		res = call(t, assistant, "get_deployment", target(map[string]any{"deployment": deploymentID}))
		require.False(t, res.IsError, text(res))
		var detail api.DeploymentDetail
		structured(t, res, &env)
		require.NoError(t, json.Unmarshal(env.Body, &detail))
		require.Equal(t, deploymentID, detail.ID)
		require.NotNil(t, detail.Stages)
		res = call(t, assistant, "list_deployments", target(nil))
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), deploymentID)

		// The state: latest, and by revision number.
		res = call(t, assistant, "get_environment_state", map[string]any{"org": "acme", "project": "shop", "environment": "staging"})
		require.False(t, res.IsError, text(res))
		var rev api.Revision
		structured(t, res, &env)
		require.NoError(t, json.Unmarshal(env.Body, &rev))
		require.Positive(t, rev.Number)
		res = call(t, assistant, "get_environment_state", map[string]any{"org": "acme", "project": "shop", "environment": "staging", "revision": 1})
		require.False(t, res.IsError, text(res))
		res = call(t, assistant, "get_environment_state", map[string]any{"org": "acme", "project": "shop", "environment": "staging", "at": "2000-01-01T00:00:00Z"})
		require.True(t, res.IsError, "no revision in 2000: %s", text(res))
		require.Contains(t, text(res), "404")

		res = call(t, assistant, "get_container_logs", target(nil))
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), `"items"`)
	})

	t.Run("refused for the viewer: nothing changed", func(t *testing.T) {
		viewer := f.connect(t, f.tokens["viewer"].Secret)
		deployments, err := f.owner.Deployments(ctx, "acme", "shop", "staging", "api", 100)
		require.NoError(t, err)

		// A tool the token's scopes do not show cannot be called.
		_, err = viewer.CallTool(t.Context(), &mcp.CallToolParams{Name: "deploy", Arguments: target(map[string]any{"image": f.registry + "/api:v3"})})
		require.Error(t, err)
		require.Contains(t, err.Error(), "deploy")

		// A token with deployments:write whose user is a viewer sees the
		// tool, and the API refuses the call: a tool error with its code.
		overreach := f.connect(t, f.tokens["overreach"].Secret)
		require.Contains(t, tools(t, overreach), "deploy")
		res := call(t, overreach, "deploy", target(map[string]any{"image": f.registry + "/api:v3"}))
		require.True(t, res.IsError)
		var env envelope
		structured(t, res, &env)
		require.Equal(t, 403, env.Status)
		require.Equal(t, "forbidden", env.Error.Code)
		require.Contains(t, env.Error.Message, "viewer")
		require.Contains(t, text(res), "403 forbidden")

		after, err := f.owner.Deployments(ctx, "acme", "shop", "staging", "api", 100)
		require.NoError(t, err)
		require.Len(t, after, len(deployments), "no deployment was made")
		for _, tok := range []string{f.tokens["viewer"].ID, f.tokens["overreach"].ID} {
			require.Zero(t, f.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, tok), "no event by the refused token")
			require.Zero(t, f.count(t, `SELECT count(*) FROM audit_log WHERE actor_id = $1`, tok))
		}
	})

	t.Run("variables: secrets never returned", func(t *testing.T) {
		const secret = "s3cr3t-value-never-shown"
		res := call(t, assistant, "set_variables", target(map[string]any{"variables": []map[string]any{
			{"name": "PLAIN", "value": "visible"}, {"name": "TOKEN", "value": secret, "secret": true}}}))
		require.False(t, res.IsError, text(res))
		require.NotContains(t, text(res), secret)
		b, _ := json.Marshal(res.StructuredContent)
		require.NotContains(t, string(b), secret)
		res = call(t, assistant, "list_variables", target(nil))
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), "visible")
		require.Contains(t, text(res), "TOKEN")
		require.NotContains(t, text(res), secret)
		res = call(t, assistant, "get_environment_state", map[string]any{"org": "acme", "project": "shop", "environment": "staging"})
		require.False(t, res.IsError, text(res))
		require.NotContains(t, text(res), secret, "the desired state carries secrets sealed")

		res = call(t, assistant, "unset_variable", target(map[string]any{"name": "PLAIN"}))
		require.False(t, res.IsError, text(res))
		vars, err := f.owner.Variables(ctx, "acme", "shop", "staging", "api")
		require.NoError(t, err)
		for _, v := range vars {
			require.NotEqual(t, "PLAIN", v.Name)
		}
		res = call(t, assistant, "unset_variable", target(map[string]any{"name": "PLAIN"}))
		require.True(t, res.IsError, "unsetting it again: %s", text(res))
	})

	t.Run("scale and roll back", func(t *testing.T) {
		res := call(t, assistant, "scale", target(map[string]any{"replicas": 3}))
		require.False(t, res.IsError, text(res))
		reps, err := f.owner.Replicas(ctx, "acme", "shop", "staging", "api")
		require.NoError(t, err)
		require.Equal(t, 3, reps[0].Replicas)
		res = call(t, assistant, "rollback", target(map[string]any{"release": 1}))
		require.False(t, res.IsError, text(res))
		var env envelope
		structured(t, res, &env)
		var dr api.DeployResponse
		require.NoError(t, json.Unmarshal(env.Body, &dr))
		require.NotNil(t, dr.Release)
		res = call(t, assistant, "rollback", target(map[string]any{"release": 999}))
		require.True(t, res.IsError, text(res))
	})

	t.Run("change sets and four eyes", func(t *testing.T) {
		approver := f.connect(t, f.tokens["approver"].Secret)
		prod := map[string]any{"org": "acme", "project": "shop", "environment": "production", "service": "api", "image": f.registry + "/api:v2"}
		res := call(t, approver, "deploy", prod)
		require.False(t, res.IsError, text(res))
		var env envelope
		structured(t, res, &env)
		require.NotEmpty(t, env.ChangeSetOpened, "a deploy to a protected environment opens a change set")
		id := env.ChangeSetOpened
		require.Contains(t, text(res), "A change set was opened (id "+id+")")
		ds, err := f.owner.Deployments(ctx, "acme", "shop", "production", "api", 10)
		require.NoError(t, err)
		require.Empty(t, ds, "nothing deployed yet")

		where := map[string]any{"org": "acme", "project": "shop", "environment": "production", "changeSet": id}
		res = call(t, approver, "get_change_set", where)
		require.False(t, res.IsError, text(res))
		var cs api.ChangeSetView
		structured(t, res, &env)
		require.NoError(t, json.Unmarshal(env.Body, &cs))
		require.Equal(t, "open", cs.Status)

		// Bob opened it: his token cannot approve it.
		res = call(t, approver, "approve_change_set", map[string]any{"org": "acme", "project": "shop", "environment": "production", "changeSet": id, "version": cs.Version})
		require.True(t, res.IsError, text(res))
		structured(t, res, &env)
		require.Equal(t, 403, env.Status, text(res))
		ds, err = f.owner.Deployments(ctx, "acme", "shop", "production", "api", 10)
		require.NoError(t, err)
		require.Empty(t, ds)

		// Alice approves it through her token.
		everything := f.connect(t, f.tokens["everything"].Secret)
		res = call(t, everything, "approve_change_set", map[string]any{"org": "acme", "project": "shop", "environment": "production", "changeSet": id, "version": cs.Version})
		require.False(t, res.IsError, text(res))
		ds, err = f.owner.Deployments(ctx, "acme", "shop", "production", "api", 10)
		require.NoError(t, err)
		require.Len(t, ds, 1, "approved: deployed")
		page, err := f.owner.Audit(ctx, client.AuditQuery{Org: "acme", Action: "changeset.approve"})
		require.NoError(t, err)
		require.NotEmpty(t, page.Items)
		require.Equal(t, f.tokens["everything"].ID, page.Items[len(page.Items)-1].Actor.ID)
		require.Equal(t, "mcp", page.Items[len(page.Items)-1].Via)

		// Another change set, rejected.
		res = call(t, assistant, "scale", map[string]any{"org": "acme", "project": "shop", "environment": "production", "service": "api", "replicas": 2})
		require.False(t, res.IsError, text(res))
		structured(t, res, &env)
		require.NotEmpty(t, env.ChangeSetOpened, "scaling in production waits too: %s", text(res))
		res = call(t, everything, "reject_change_set", map[string]any{"org": "acme", "project": "shop", "environment": "production", "changeSet": env.ChangeSetOpened, "reason": "not now"})
		require.False(t, res.IsError, text(res))
		res = call(t, approver, "list_change_sets", map[string]any{"org": "acme", "project": "shop", "environment": "production", "status": "rejected"})
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), env.ChangeSetOpened)

		res = call(t, approver, "get_audit_log", map[string]any{"org": "acme", "action": "changeset.*", "order": "newest"})
		require.False(t, res.IsError, text(res))
		require.Contains(t, text(res), `"via":"mcp"`)
	})

	t.Run("instance administration is never a tool", func(t *testing.T) {
		// The route table as the API publishes it: each operation's scope.
		resp, err := http.Get(f.srv.URL + "/api/v1/openapi.json")
		require.NoError(t, err)
		defer resp.Body.Close()
		var doc struct {
			Paths map[string]map[string]struct {
				Description string `json:"description"`
			} `json:"paths"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
		scopeRe := regexp.MustCompile(`Needs the scope ([a-z:]+)\.`)
		admin := func(method, path, scope string) bool {
			return scope == "instance:admin" || strings.HasPrefix(path, "/api/v1/instance") || strings.HasPrefix(path, "/api/v1/users") ||
				path == "/api/v1/audit" || strings.Contains(path, "/upgrade") || strings.Contains(path, "backup") || strings.Contains(path, "restore")
		}
		var adminRoutes int
		for path, ops := range doc.Paths {
			for method, op := range ops {
				m := scopeRe.FindStringSubmatch(op.Description)
				if len(m) > 0 && admin(method, path, m[1]) {
					adminRoutes++
				}
			}
		}
		require.Greater(t, adminRoutes, 5, "the walk sees the administrator's routes")

		// The instance administrator's token with every scope.
		all := tools(t, f.connect(t, f.tokens["everything"].Secret))
		require.Len(t, all, 23, "every tool, and only those")
		for name, tool := range all {
			route, _ := tool.Meta[mcpserver.MetaRoute].(string)
			method, path, ok := strings.Cut(route, " ")
			require.True(t, ok, "%s names its route", name)
			op, ok := doc.Paths[path][strings.ToLower(method)]
			require.True(t, ok, "%s: %s is a route of the API", name, route)
			scope := ""
			if m := scopeRe.FindStringSubmatch(op.Description); len(m) > 0 {
				scope = m[1]
			}
			require.Equal(t, scope, tool.Meta[mcpserver.MetaScope], "%s needs its route's scope", name)
			require.False(t, admin(method, path, scope), "%s maps to %s, an instance administrator's route", name, route)
		}

		// docs/mcp.md lists every tool with its route and scope.
		mcpDoc, err := os.ReadFile(filepath.Join("..", "..", "docs", "mcp.md"))
		require.NoError(t, err)
		rows := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `([A-Z]+ [^`]+)` \\| ([^|]+) \\|").FindAllStringSubmatch(string(mcpDoc), -1)
		require.Len(t, rows, len(all), "docs/mcp.md's table has a row per tool")
		for _, row := range rows {
			tool, ok := all[row[1]]
			require.True(t, ok, "docs/mcp.md lists %s, which is no tool", row[1])
			require.Equal(t, tool.Meta[mcpserver.MetaRoute], row[2], row[1])
			scope := "none"
			if s := tool.Meta[mcpserver.MetaScope].(string); s != "" {
				scope = "`" + s + "`"
			}
			require.Equal(t, scope, strings.TrimSpace(row[3]), row[1])
		}
	})

	t.Run("bad arguments: a clear error, nothing changed", func(t *testing.T) {
		before := f.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, f.tokens["assistant"].ID)
		for _, c := range []struct {
			args map[string]any
			says string
		}{
			{map[string]any{"org": "acme"}, `missing properties: ["project" "environment" "service"]`},
			{target(map[string]any{"image": 42}), `has type "integer", want "string"`},
			{target(map[string]any{"image": f.registry + "/api:v2", "extra": true}), `unexpected additional properties ["extra"]`},
			{target(map[string]any{"service": ""}), `minLength`},
			{target(map[string]any{"service": "api\x00"}), `422 validation_failed: path parameter service: contains U+0000 (NUL)`},
			{target(map[string]any{"image": strings.Repeat("x", 300_000)}), `422 validation_failed: field image: is 300000 bytes long`},
			{target(map[string]any{"service": "../../../instance/backups"}), `404 not_found: service acme/shop/../../../instance/backups not found`},
			// "." and ".." stay themselves when escaped: the path would name
			// another route, which the API's mux answers with a redirect
			// (reported as a success before).
			{target(map[string]any{"service": ".."}), `service must be a name, not ".."`},
			{target(map[string]any{"environment": "."}), `environment must be a name, not "."`},
		} {
			res := call(t, assistant, "deploy", c.args)
			require.True(t, res.IsError, "deploy %v: %s", c.args, text(res))
			require.Contains(t, text(res), c.says)
		}
		require.Equal(t, before, f.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, f.tokens["assistant"].ID))
	})

	t.Run("revoked at once", func(t *testing.T) {
		tok := f.tokens["assistant"]
		cs := f.connect(t, tok.Secret)
		require.False(t, call(t, cs, "list_organisations", map[string]any{}).IsError)
		require.NoError(t, f.sessions["carol"].RevokeToken(ctx, tok.ID))
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_organisations", Arguments: map[string]any{}})
		require.Error(t, err, "the next call is refused")
		status, header, body := post(t, f.srv.URL+mcpserver.Path, tok.Secret, initialize, nil)
		require.Equal(t, http.StatusUnauthorized, status, body)
		require.Contains(t, body, "revoked")
		require.Contains(t, header.Get("WWW-Authenticate"), "resource_metadata=")
	})
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`

// post sends one JSON-RPC message to /mcp as a plain HTTP client would.
func post(t testing.TB, url, token, body string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// What any HTTP client sees: 401 naming the resource metadata, the metadata
// itself, the body limit, browsers' cross-origin requests refused, and
// console sessions refused.
func TestHTTPEdges(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	url := f.srv.URL + mcpserver.Path
	good := f.tokens["assistant"].Secret

	status, _, body := post(t, url, good, initialize, nil)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"serverInfo"`)

	for _, tok := range []string{"", "nbl_nope", good + "x"} {
		status, header, body := post(t, url, tok, initialize, nil)
		require.Equal(t, http.StatusUnauthorized, status, "token %q: %s", tok, body)
		require.Equal(t, `Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource/mcp"`, header.Get("WWW-Authenticate"))
	}
	resp, err := http.Get(f.srv.URL + mcpserver.MetadataPath)
	require.NoError(t, err)
	var meta struct {
		Resource        string   `json:"resource"`
		ScopesSupported []string `json:"scopes_supported"`
		BearerMethods   []string `json:"bearer_methods_supported"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&meta))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "http://127.0.0.1/mcp", meta.Resource)
	require.Contains(t, meta.ScopesSupported, "deployments:write")
	require.Equal(t, []string{"header"}, meta.BearerMethods)

	// A console session is not an API token.
	anon, err := client.New(f.srv.URL, "")
	require.NoError(t, err)
	session, err := anon.Login(context.Background(), "carol@example.com", password)
	require.NoError(t, err)
	status, _, body = post(t, url, session.Token, initialize, nil)
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, "console session")

	// Over the body limit: announced, or chunked.
	huge := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"` + strings.Repeat("x", mcpserver.DefaultMaxBodyBytes) + `"}}`
	status, _, body = post(t, url, good, huge, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	req, err := http.NewRequest(http.MethodPost, url, io.MultiReader(strings.NewReader(huge)))
	require.NoError(t, err)
	req.ContentLength = -1
	req.Header.Set("Authorization", "Bearer "+good)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)

	// Browsers' cross-origin requests are refused; the same origin is not.
	for _, h := range []map[string]string{
		{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
		{"Origin": "https://evil.example"},
		{"Sec-Fetch-Site": "same-site", "Origin": "https://sub.127.0.0.1"},
	} {
		status, _, body := post(t, url, good, initialize, h)
		require.Equal(t, http.StatusForbidden, status, "%v: %s", h, body)
	}
	status, _, body = post(t, url, good, initialize, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": f.srv.URL})
	require.Equal(t, http.StatusOK, status, body)

	// Not JSON: a JSON-RPC parse error, nothing else.
	status, _, body = post(t, url, good, `{"jsonrpc":"2.0","id":1,"method":`, nil)
	require.NotEqual(t, http.StatusOK, status, body)
	require.Zero(t, f.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, f.tokens["assistant"].ID))
	require.True(t, slices.Contains([]int{http.StatusBadRequest}, status), "%d %s", status, body)
}
