package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// mcpSDK finds the official TypeScript SDK that scripts/ensure-mcp-sdk.sh
// installs (go tool task mcp-sdk): $MCP_SDK_PREFIX, or
// ~/.cache/nebulactrl/mcp-sdk. Under CI a missing SDK or node fails.
func mcpSDK(t *testing.T) (node, dir string) {
	t.Helper()
	prefix := os.Getenv("MCP_SDK_PREFIX")
	if prefix == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		prefix = filepath.Join(home, ".cache", "nebulactrl", "mcp-sdk")
	}
	dir = filepath.Join(prefix, "node_modules", "@modelcontextprotocol", "sdk")
	node, err := exec.LookPath("node")
	_, serr := os.Stat(filepath.Join(dir, "package.json"))
	if err != nil || serr != nil {
		msg := "the MCP TypeScript SDK is not installed (node: %v, %s: %v): run go tool task mcp-sdk"
		if os.Getenv("CI") == "true" {
			t.Fatalf(msg, err, dir, serr)
		}
		t.Skipf(msg, err, dir, serr)
	}
	return node, dir
}

// The official TypeScript SDK's client against a real control plane: list,
// read, deploy as a member's token (the deployment and its audit entry, via
// mcp, seen through the REST API), refused as a viewer's tokens with nothing
// changed.
func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	node, sdk := mcpSDK(t)
	f := newFixture(t, servertest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "client.mjs"))
	cmd.Env = append(os.Environ(), "MCP_SDK_DIR="+sdk, "MCP_URL="+f.srv.URL+mcpserver.Path,
		"MEMBER_TOKEN="+f.tokens["assistant"].Secret, "VIEWER_TOKEN="+f.tokens["viewer"].Secret,
		"OVERREACH_TOKEN="+f.tokens["overreach"].Secret, "IMAGE="+f.registry+"/api:v2")
	var stderr lockedbuf.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node client.mjs: %s", stderr.String())

	var seen struct {
		Server      struct{ Name, Version string }
		MemberTools []struct {
			Name                  string
			ReadOnly, Destructive bool
			Required              []string
		}
		Orgs, Services []string
		State          struct {
			IsError bool
			Text    string
		}
		Deploy struct {
			IsError      bool
			Status       int
			DeploymentID string
		}
		Invalid struct {
			IsError bool
			Text    string
		}
		ViewerTools  []string
		ViewerDeploy struct {
			Thrown  bool
			IsError bool
			Message string
		}
		OverreachDeploy struct {
			IsError bool
			Status  int
			Code    string
			Text    string
		}
	}
	t.Logf("the TypeScript client saw: %s", out)
	require.NoError(t, json.Unmarshal(out, &seen), "%s", out)
	require.Equal(t, "nebulactrl", seen.Server.Name)
	names := map[string]bool{}
	for _, tool := range seen.MemberTools {
		names[tool.Name] = true
		switch tool.Name {
		case "list_services":
			require.True(t, tool.ReadOnly)
			require.ElementsMatch(t, []string{"org", "project"}, tool.Required)
		case "deploy":
			require.False(t, tool.ReadOnly)
			require.True(t, tool.Destructive)
			require.ElementsMatch(t, []string{"org", "project", "environment", "service"}, tool.Required)
		}
	}
	require.True(t, names["deploy"] && names["list_organisations"] && names["get_container_logs"], "%v", names)
	require.Equal(t, []string{"acme"}, seen.Orgs)
	require.Equal(t, []string{"api"}, seen.Services)
	require.False(t, seen.State.IsError, "no revision yet is fine, but not an error of the tool: %s", seen.State.Text)

	require.False(t, seen.Deploy.IsError)
	require.Equal(t, 202, seen.Deploy.Status)
	require.NotEmpty(t, seen.Deploy.DeploymentID)
	ds, err := f.owner.Deployments(ctx, "acme", "shop", "staging", "api", 10)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, seen.Deploy.DeploymentID, ds[0].ID)
	page, err := f.owner.Audit(ctx, client.AuditQuery{Org: "acme", Action: "service.deploy"})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)
	require.Equal(t, f.tokens["assistant"].ID, page.Items[0].Actor.ID)
	require.Equal(t, "token", page.Items[0].Actor.Kind)
	require.Equal(t, "mcp", page.Items[0].Via)

	require.True(t, seen.Invalid.IsError)
	require.Contains(t, seen.Invalid.Text, `want "string"`)

	require.NotContains(t, seen.ViewerTools, "deploy")
	require.Contains(t, seen.ViewerTools, "list_services")
	require.True(t, seen.ViewerDeploy.Thrown, "a tool the viewer's token does not see cannot be called")
	require.Contains(t, seen.ViewerDeploy.Message, `unknown tool "deploy"`)
	require.True(t, seen.OverreachDeploy.IsError)
	require.Equal(t, 403, seen.OverreachDeploy.Status)
	require.Equal(t, "forbidden", seen.OverreachDeploy.Code)
	require.Contains(t, seen.OverreachDeploy.Text, "403 forbidden")

	ds, err = f.owner.Deployments(ctx, "acme", "shop", "staging", "api", 10)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the refused deploys made nothing")
	for _, tok := range []string{f.tokens["viewer"].ID, f.tokens["overreach"].ID} {
		require.Zero(t, f.count(t, `SELECT count(*) FROM events WHERE actor_id = $1`, tok))
	}
	require.False(t, slices.Contains(seen.ViewerTools, "approve_change_set"))
}
