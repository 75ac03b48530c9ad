package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/transport"
)

// shapeOf writes the shape of a JSON value: one line per path with its
// type (string, time for RFC 3339 with a zone, number, bool, null, object,
// array); the elements of an array share the path name[] and their types
// are merged.
func shapeOf(v any) string {
	types := map[string]map[string]bool{}
	var walk func(path string, v any)
	add := func(path, typ string) {
		if types[path] == nil {
			types[path] = map[string]bool{}
		}
		types[path][typ] = true
	}
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			add(path, "object")
			for k, e := range v {
				walk(path+"."+k, e)
			}
		case []any:
			add(path, "array")
			for _, e := range v {
				walk(path+"[]", e)
			}
		case string:
			if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
				add(path, "time")
			} else {
				add(path, "string")
			}
		case json.Number, float64:
			add(path, "number")
		case bool:
			add(path, "bool")
		case nil:
			add(path, "null")
		}
	}
	walk("$", v)
	var lines []string
	for p, ts := range types {
		var names []string
		for t := range ts {
			names = append(names, t)
		}
		sort.Strings(names)
		lines = append(lines, p+" "+strings.Join(names, "|"))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// decodeJSON decodes one JSON document printed by a command.
func decodeJSON(t *testing.T, out string) any {
	t.Helper()
	var v any
	d := json.NewDecoder(strings.NewReader(out))
	d.UseNumber()
	require.NoError(t, d.Decode(&v), "not one JSON document:\n%s", out)
	_, err := d.Token()
	require.ErrorIs(t, err, io.EOF, "more than one JSON document:\n%s", out)
	return v
}

// TestReadCommandShapes runs every read command with -o json against a real
// control plane (real PostgreSQL, a real registry, an agent connected over
// the real protocol) and checks the JSON keys and types against
// testdata/json/<command>.txt (-update rewrites them); and the contracts
// around it: output flags anywhere, YAML, one shape for deploy whatever the
// environment, exit codes, confirmation on a terminal, named contexts.
func TestReadCommandShapes(t *testing.T) {
	bundle := setup(t)
	t.Setenv(envContext, "")
	regHost, srv, c := bundle.regHost, bundle.srv, bundle.c
	adaToken := srv.Setup(t, "ada@example.com", "acme")
	c.ok("login", "--url", srv.URL, "--token", adaToken, "--context", "main")

	dir := filepath.Join("testdata", "json")
	if *update {
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	shapes := map[string]bool{}
	// shape runs a read command with -o json and checks its shape.
	shape := func(name string, args ...string) any {
		t.Helper()
		out := c.ok(append(args, "-o", "json")...)
		v := decodeJSON(t, out)
		got := shapeOf(v)
		shapes[name] = true
		file := filepath.Join(dir, name+".txt")
		want, err := os.ReadFile(file)
		if *update {
			require.NoError(t, os.WriteFile(file, []byte(mergeShape(string(want), got)), 0o644))
			return v
		}
		require.NoError(t, err, "no golden shape for nebula %s: run go test ./cmd/nebula -run TestReadCommandShapes -update", strings.Join(args, " "))
		require.Empty(t, shapeMismatches(string(want), got), "the JSON of nebula %s changed shape (printed:\n%s): review it and run with -update", strings.Join(args, " "), got)
		return v
	}

	// --- the things to read
	var created api.ClusterResponse
	require.NoError(t, json.Unmarshal([]byte(c.ok("cluster", "create", "acme/eu-1", "-o", "json")), &created))
	require.NotNil(t, created.JoinToken)
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/staging", "--cluster", "eu-1")
	c.ok("env", "create", "acme/shop/production", "--cluster", "eu-1", "--protected")
	image := regHost + "/api:v1"
	c.ok("service", "create", "acme/shop/api", "--image", image, "--port", "8080")
	c.ok("var", "set", "acme/shop/staging/api", "LOG_LEVEL=info")
	c.okIn("s3cret-value\n", "var", "set", "acme/shop/staging/api", "--secret", "API_KEY")
	c.ok("domain", "add", "acme/shop/staging/api", "api.staging.example.com")
	c.okIn(password+"\n", "user", "create", "grace@example.com", "--name", "Grace", "--password-stdin")
	c.ok("member", "add", "acme", "grace@example.com", "--role", "admin")
	c.ok("token", "create", "ci", "--scope", "projects:read")

	// deploy prints one shape whether it starts or waits for approval.
	started := decodeJSON(t, c.ok("deploy", "acme/shop/staging/api", "-o", "json"))
	require.Equal(t, "started", started.(map[string]any)["status"])
	r := c.run("", "deploy", "acme/shop/production/api", "-o", "json")
	require.Equal(t, exitApproval, exitCode(r.failed), "waiting for approval exits 6: %s", r.err)
	waiting := decodeJSON(t, r.out)
	require.Equal(t, "waiting-for-approval", waiting.(map[string]any)["status"])
	keys := func(v any) []string {
		var ks []string
		for k := range v.(map[string]any) {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	require.Equal(t, []string{"changeSet", "deployment", "release", "status"}, keys(started))
	require.Equal(t, keys(started), keys(waiting))
	changeSetID := waiting.(map[string]any)["changeSet"].(map[string]any)["id"].(string)

	// --- the shapes of the read commands (before any agent connects, so the
	// deployments stay where they are)
	shape("whoami", "whoami")
	shape("org_list", "org", "list")
	shape("member_list", "member", "list", "acme")
	shape("user_list", "user", "list")
	shape("token_list", "token", "list")
	shape("settings_get", "settings", "get")
	shape("project_list", "project", "list", "acme")
	shape("env_list", "env", "list", "acme/shop")
	shape("service_list", "service", "list", "acme/shop")
	shape("var_list", "var", "list", "acme/shop/staging/api")
	shape("domain_list", "domain", "list", "acme/shop/staging")
	shape("releases", "releases", "acme/shop/staging/api")
	shape("deployments", "deployments", "acme/shop/staging/api")
	// The reactions open the deployment's stream (its "delivering" stage)
	// a moment after the deploy: wait for it, so that the shape of a stage
	// is checked every time instead of depending on timing.
	require.Eventually(t, func() bool {
		d, ok := decodeJSON(t, c.ok("deployments", "show", "acme/shop/staging/api", "-o", "json")).(map[string]any)
		stages, _ := d["stages"].([]any)
		return ok && len(stages) > 0
	}, 30*time.Second, 100*time.Millisecond, "the deployment's first stage")
	shape("deployments_show", "deployments", "show", "acme/shop/staging/api")
	shape("changeset_list", "changeset", "list", "acme/shop/production")
	shape("changeset_show", "changeset", "show", "acme/shop/production", changeSetID)
	shape("state", "state", "acme/shop/staging")
	shape("cluster_token_list", "cluster", "token", "list", "acme/eu-1")
	shape("logs", "logs", "acme/shop/staging/api")
	shape("context_list", "context", "list")
	audit := shape("audit", "audit", "--org", "acme")
	require.Greater(t, len(audit.([]any)), 5, "audit -o json is one array of every entry")

	// --- an agent connects: cluster list, cluster get and server list show it
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reg, err := transport.Register(ctx, srv.URL, nil, transport.RegisterRequest{JoinToken: created.JoinToken.Token, Name: "node-1"})
	require.NoError(t, err)
	agent, err := transport.NewClient(transport.ClientConfig{
		URL: srv.URL, Credential: reg.Credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.2.3", Arch: "amd64", Applied: map[string]int{}}
		},
		Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
		},
	})
	require.NoError(t, err)
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Run(ctx) }()
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^eu-1\s+Connected\s+(just now|\d+ s ago)\s+1\s+1\.2\.3\s`).MatchString(c.ok("cluster", "list", "acme"))
	}, 20*time.Second, 100*time.Millisecond, "cluster list shows the cluster Connected with its server and version")
	shape("cluster_list", "cluster", "list", "acme")
	shape("cluster_get", "cluster", "get", "acme/eu-1")
	servers := shape("server_list", "server", "list", "acme/eu-1").([]any)
	require.Len(t, servers, 1)
	require.Equal(t, "Connected", servers[0].(map[string]any)["state"])
	require.Equal(t, "1.2.3", servers[0].(map[string]any)["version"])
	out := c.ok("cluster", "get", "acme/eu-1")
	require.Contains(t, out, "state: Connected")
	require.Regexp(t, `(?m)^`+reg.ServerID+`\s+node-1\s+Connected\s+1\.2\.3\s`, out)

	// var set prints one shape whether it is done or waits (after the
	// shapes above: the release it makes supersedes the deployment).
	setDone := decodeJSON(t, c.ok("var", "set", "acme/shop/staging/api", "REGION=eu", "-o", "json"))
	require.Equal(t, "done", setDone.(map[string]any)["status"])
	r = c.run("", "var", "set", "acme/shop/production/api", "REGION=eu", "-o", "json")
	require.Equal(t, exitApproval, exitCode(r.failed), r.err)
	setWaiting := decodeJSON(t, r.out)
	require.Equal(t, "waiting-for-approval", setWaiting.(map[string]any)["status"])
	require.Equal(t, []string{"changeSet", "status", "variables"}, keys(setDone))
	require.Equal(t, keys(setDone), keys(setWaiting))

	if !*update {
		files, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, f := range files {
			require.True(t, shapes[strings.TrimSuffix(f.Name(), ".txt")], "testdata/json/%s names no command read here any more", f.Name())
		}
	}

	// --- output flags anywhere on the line, one contract
	want := c.ok("project", "list", "acme", "-o", "json")
	require.Equal(t, want, c.ok("--json", "project", "list", "acme"))
	require.Equal(t, want, c.ok("-o", "json", "project", "list", "acme"))
	require.Equal(t, want, c.ok("project", "list", "--json", "acme"))
	require.Equal(t, want, c.ok("project", "list", "--output=json", "acme"))
	var fromYAML, fromJSON any
	require.NoError(t, yaml.Unmarshal([]byte(c.ok("project", "list", "acme", "-o", "yaml")), &fromYAML))
	require.NoError(t, json.Unmarshal([]byte(want), &fromJSON))
	require.Equal(t, fromJSON, fromYAML, "-o yaml prints what -o json does")
	lines := strings.Split(strings.TrimSpace(c.ok("project", "list", "acme", "-o", "jsonl")), "\n")
	require.Len(t, lines, len(fromJSON.([]any)))
	require.Regexp(t, `(?m)^shop\s+(just now|\d+ (s|min) ago)$`, c.ok("project", "list", "acme"), "tables show relative times")
	require.Regexp(t, `"createdAt": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)"`, want, "JSON times are RFC 3339 with a zone")

	// --- exit codes of API errors, the same on every command
	r = c.run("", "project", "list", "nope")
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	r = c.run("", "cluster", "get", "acme/nope")
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	r = c.run("", "member", "add", "acme", "grace@example.com", "--role", "viewer")
	require.Equal(t, exitConflict, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "nebula member set-role acme grace@example.com viewer")
	r = c.run("", "cluster", "delete", "acme/eu-1", "--yes")
	require.Equal(t, exitConflict, exitCode(r.failed), "a cluster that runs environments is not deleted: %s", r.err)
	cl, err := client.New(srv.URL, adaToken)
	require.NoError(t, err)
	ci, err := cl.CreateToken(t.Context(), api.CreateTokenRequest{Name: "reader", Scopes: []string{"projects:read"}})
	require.NoError(t, err)
	t.Setenv(envToken, ci.Secret)
	r = c.run("", "project", "create", "acme/nope")
	require.Equal(t, exitForbidden, exitCode(r.failed), r.err)
	t.Setenv(envToken, "nbl_00000000000000000000000000000000_nonsense")
	r = c.run("", "project", "list", "acme")
	require.Equal(t, exitForbidden, exitCode(r.failed), r.err)
	t.Setenv(envToken, "")

	// --- the missing commands
	m := decodeJSON(t, c.ok("member", "set-role", "acme", "grace@example.com", "viewer", "-o", "json"))
	require.Equal(t, "viewer", m.(map[string]any)["role"])
	require.Regexp(t, `(?m)^grace@example.com\s+Grace\s+viewer`, c.ok("member", "list", "acme"))
	require.Contains(t, c.ok("env", "update", "acme/shop/staging", "--protected"), "protected: changes wait for approval")
	r = c.run("", "env", "update", "acme/shop/staging", "--protected=false", "-o", "json")
	require.Equal(t, exitApproval, exitCode(r.failed), "unprotecting waits for approval: %s", r.err)
	require.Equal(t, "waiting-for-approval", decodeJSON(t, r.out).(map[string]any)["status"])
	c.ok("cluster", "create", "acme/spare")
	require.Contains(t, c.ok("cluster", "delete", "acme/spare", "--yes"), "Deleted cluster acme/spare")
	require.NotContains(t, c.ok("cluster", "list", "acme"), "spare")
	require.Contains(t, c.ok("server", "revoke", "acme/eu-1", reg.ServerID, "--yes"), "Revoked server")
	require.Regexp(t, `(?m)^`+reg.ServerID+`\s+node-1\s+Revoked\s`, c.ok("server", "list", "acme/eu-1"))
	cancel()
	<-agentDone

	// --- confirmation on a terminal
	defer func(f func(io.Reader) bool) { stdinIsTerminal = f }(stdinIsTerminal)
	stdinIsTerminal = func(io.Reader) bool { return true }
	c.ok("project", "create", "acme/tmp")
	r = c.run("n\n", "project", "delete", "acme/tmp")
	require.Equal(t, exitFailure, exitCode(r.failed))
	require.Contains(t, r.err, "Delete project acme/tmp with its environments and services? [y/N] ")
	require.Contains(t, r.err, "not confirmed: nothing was changed")
	require.Contains(t, c.ok("project", "list", "acme"), "tmp", "nothing was deleted")
	require.Contains(t, c.okIn("yes\n", "project", "delete", "acme/tmp"), "Deleted project acme/tmp")
	require.NotContains(t, c.ok("project", "list", "acme"), "tmp")
	stdinIsTerminal = func(io.Reader) bool { return false }

	// --- named contexts: two sign-ins, switched by flag, variable and use
	c.okIn(password+"\n", "login", "--url", srv.URL, "--email", "grace@example.com", "--password-stdin", "--context", "grace")
	whoami := func(args ...string) string {
		var me api.MeResponse
		require.NoError(t, json.Unmarshal([]byte(c.ok(append([]string{"whoami", "-o", "json"}, args...)...)), &me))
		return me.User.Email
	}
	require.Equal(t, "grace@example.com", whoami(), "login makes its context the current one")
	require.Equal(t, "ada@example.com", whoami("--context", "main"))
	require.Equal(t, "ada@example.com", c.ok("--context", "main", "whoami")[:len("ada@example.com")])
	t.Setenv(envContext, "main")
	require.Equal(t, "ada@example.com", whoami())
	require.Equal(t, "grace@example.com", whoami("--context", "grace"), "--context wins over "+envContext)
	t.Setenv(envContext, "")
	require.Contains(t, c.ok("context", "use", "main"), "Using the context main")
	require.Equal(t, "ada@example.com", whoami())
	out = c.ok("context", "list")
	require.Regexp(t, `(?m)^\*\s+main\s+`+regexp.QuoteMeta(srv.URL)+`\s+yes$`, out)
	require.Regexp(t, `(?m)^\s+grace\s+`+regexp.QuoteMeta(srv.URL)+`\s+yes$`, out)
	out = c.ok("context", "list", "-o", "json")
	require.NotContains(t, out, adaToken, "context list never shows a token")
	require.NotContains(t, out, "token")
	require.Contains(t, c.ok("context", "rename", "grace", "g"), "Renamed")
	r = c.run("", "context", "rename", "g", "main")
	require.Equal(t, exitConflict, exitCode(r.failed))
	r = c.run("", "whoami", "--context", "grace")
	require.Equal(t, exitNotFound, exitCode(r.failed))
	require.Contains(t, r.err, `no context "grace" is stored`)
	r = c.run("", "context", "delete", "g")
	require.Equal(t, exitUsage, exitCode(r.failed), "deleting a context asks, or needs --yes")
	require.Contains(t, c.ok("context", "delete", "g", "--yes"), "Forgot the context g")
	require.NotContains(t, c.ok("context", "list"), " g ")
	require.Contains(t, c.ok("logout", "--context", "main"), "Signed out")
	require.Contains(t, c.fails("whoami"), "no control plane given")

	// --- the credentials file of the single-login format is migrated
	p, err := credentialsPath()
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`{"url": %q, "token": %q}`, srv.URL, adaToken)), 0o600))
	require.Equal(t, "ada@example.com", whoami(), "the old file still signs in")
	name := strings.TrimPrefix(srv.URL, "http://")
	var views []contextView
	require.NoError(t, json.Unmarshal([]byte(c.ok("context", "list", "-o", "json")), &views))
	require.Equal(t, []contextView{{Name: name, URL: srv.URL, Current: true, SignedIn: true}}, views)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	var file contextsFile
	require.NoError(t, json.Unmarshal(b, &file))
	require.Equal(t, contextsFile{Current: name, Contexts: map[string]credentials{name: {URL: srv.URL, Token: adaToken}}}, file, "the file is rewritten in the new format")
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}
