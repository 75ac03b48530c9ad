package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const password = "correct horse battery staple"

var tokenRE = regexp.MustCompile(`nbl_[0-9a-f]{32}_[A-Za-z0-9_-]+`)

// cliRun runs the nebula command in-process as main does: what it returns
// is printed to stderr as "nebula: <message>".
type cliRun struct {
	t *testing.T
}

type result struct {
	out, err string
	failed   error
}

func (c cliRun) run(stdin string, args ...string) result {
	c.t.Helper()
	return c.runWith(run, stdin, args...)
}

func (c cliRun) runWith(fn func(context.Context, []string, io.Reader, io.Writer, io.Writer) error, stdin string, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	err := fn(c.t.Context(), append([]string{"nebula"}, args...), strings.NewReader(stdin), &out, &errb)
	if err != nil {
		fmt.Fprintln(&errb, "nebula:", err)
	}
	return result{out: out.String(), err: errb.String(), failed: err}
}

// ok runs a command that must succeed and returns its stdout.
func (c cliRun) ok(args ...string) string {
	c.t.Helper()
	return c.okIn("", args...)
}

func (c cliRun) okIn(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	require.NoError(c.t, r.failed, "nebula %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
	return r.out
}

// fails runs a command that must fail and returns its stderr.
func (c cliRun) fails(args ...string) string {
	c.t.Helper()
	r := c.run("", args...)
	require.Error(c.t, r.failed, "nebula %s must fail\nstdout: %s", strings.Join(args, " "), r.out)
	return r.err
}

// waits runs a change that must wait in a change set (exit code 6) and
// returns its stdout.
func (c cliRun) waits(stdin string, args ...string) string {
	c.t.Helper()
	r := c.run(stdin, args...)
	require.Equal(c.t, exitApproval, exitCode(r.failed), "nebula %s must wait for approval\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.out, r.err)
	return r.out
}

func (c cliRun) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	require.NoError(c.t, json.Unmarshal([]byte(out), v), "nebula %s --json printed:\n%s", strings.Join(args, " "), out)
}

// runAudit runs nebula with the audit command wired as audit.go is to wire
// it: the API's audit log as the action when no subcommand is given.
func runAudit(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	audit := auditCommand()
	if audit.Action == nil {
		audit.Flags, audit.Action = auditLogFlags(), auditLogAction
	}
	app := &cli.App{Name: "nebula", Reader: stdin, Writer: stdout, ErrWriter: stderr,
		Commands: []*cli.Command{audit}, ExitErrHandler: func(*cli.Context, error) {}}
	return app.RunContext(ctx, args)
}

// cliBundle is what a command-line test starts from (setup): a home of its own,
// a registry holding api:v1, a control plane that may pull from it, and the
// runner of the commands.
type cliBundle struct {
	home    string // HOME; XDG_CONFIG_HOME is its config
	regHost string
	srv     *servertest.Server
	c       cliRun
}

// setup sets HOME and XDG_CONFIG_HOME to a new directory and clears
// NEBULACTRL_URL and NEBULACTRL_TOKEN (so the test cannot run in parallel),
// then starts a registry and a control plane.
func setup(t *testing.T) *cliBundle {
	t.Helper()
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	regHost := registrytest.Start(t)
	return &cliBundle{home: home, regHost: regHost, srv: servertest.Start(t, servertest.Options{Insecure: []string{regHost}}), c: cliRun{t: t}}
}

// TestClientCommands drives the command-line client against a real control
// plane on a real PostgreSQL and a real (in-process) image registry. It sets
// HOME and XDG_CONFIG_HOME, so it cannot run in parallel.
func TestClientCommands(t *testing.T) {
	b := setup(t)
	srv, regHost, c := b.srv, b.regHost, b.c
	credPath := filepath.Join(b.home, "config", "nebulactrl", "credentials.json")

	// Nothing is known yet.
	require.Contains(t, c.fails("whoami"), "no control plane given")

	// --- setup, credentials, login, logout
	out := c.okIn(password+"\n", "setup", "--url", srv.URL, "--email", "ada@example.com", "--org", "acme", "--name", "Ada", "--password-stdin")
	adaToken := tokenRE.FindString(out)
	require.NotEmpty(t, adaToken, out)
	require.Contains(t, out, "shown only this once")
	require.Contains(t, out, "export NEBULACTRL_TOKEN=")
	st, err := os.Stat(credPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the credentials file is the user's alone")
	st, err = os.Stat(filepath.Dir(credPath))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())
	stored, err := currentCredentials()
	require.NoError(t, err)
	require.Equal(t, credentials{URL: srv.URL, Token: adaToken}, stored)
	require.Contains(t, c.ok("whoami"), "ada@example.com (Ada)")
	require.Contains(t, c.fails("setup", "--url", srv.URL, "--email", "eve@example.com", "--org", "evil", "--password-stdin"), "stdin ended")
	r := c.run(password+"\n", "setup", "--url", srv.URL, "--email", "eve@example.com", "--org", "evil", "--password-stdin")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "set up already")

	// The setup token is an API token: logout forgets it without revoking it.
	require.Contains(t, c.ok("logout"), "stored credentials are removed")
	stored, err = currentCredentials()
	require.NoError(t, err)
	require.Zero(t, stored, "the context is forgotten")
	require.Contains(t, c.fails("whoami"), "no control plane given")
	require.Contains(t, c.ok("login", "--url", srv.URL, "--token", adaToken), "Signed in")
	require.Contains(t, c.fails("login", "--url", srv.URL, "--token", "nbl_nonsense"), "the token is malformed")

	// A session from e-mail and password, ended by logout.
	out = c.okIn(password+"\n", "login", "--url", srv.URL, "--email", "ada@example.com", "--password-stdin")
	require.Contains(t, out, "Signed in to "+srv.URL+" as ada@example.com until")
	require.Contains(t, c.ok("whoami"), "signed in with: a session")
	session, err := currentCredentials()
	require.NoError(t, err)
	require.NotEqual(t, adaToken, session.Token)
	require.Contains(t, c.ok("logout"), "the session is ended")
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, session.Token)
	require.Contains(t, c.fails("whoami"), "the token was revoked")
	t.Setenv(envToken, adaToken)
	require.Contains(t, c.ok("whoami"), "ada@example.com", "NEBULACTRL_URL and NEBULACTRL_TOKEN work without stored credentials")
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	r = c.run("ada@example.com\nwrong password!!\n", "login", "--url", srv.URL, "--password-stdin")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "nebula: wrong e-mail address or password")

	c.ok("login", "--url", srv.URL, "--token", adaToken)
	out = c.ok("whoami")
	require.Contains(t, out, "instance administrator: yes")
	require.Contains(t, out, "signed in with: an API token")
	require.Regexp(t, `acme\s+owner`, out)
	// The stored token is never sent to another control plane.
	require.Contains(t, c.fails("whoami", "--url", "http://127.0.0.1:1"), "not signed in to http://127.0.0.1:1")

	// --- organisations, clusters, projects, environments, services
	require.Contains(t, c.ok("org", "create", "beta"), "Created organisation beta")
	var orgs []api.Organisation
	c.json(&orgs, "org", "list")
	require.Len(t, orgs, 2)
	require.Regexp(t, `(?m)^acme\s+owner`, c.ok("org", "list"))

	out = c.ok("cluster", "create", "acme/eu-1")
	require.Contains(t, out, "Created cluster acme/eu-1")
	require.Regexp(t, tokenRE, out, "the join token is printed")
	require.Contains(t, out, "shown only this once")
	require.Regexp(t, `(?m)^eu-1\s+Disconnected\s+-\s+0\s+-\s`, c.ok("cluster", "list", "acme"))
	out = c.ok("cluster", "token", "create", "acme/eu-1", "--expires-in-hours", "2")
	require.Regexp(t, tokenRE, out)
	var joinTokens []api.JoinToken
	c.json(&joinTokens, "cluster", "token", "list", "acme/eu-1")
	require.Len(t, joinTokens, 2)
	require.Contains(t, c.ok("cluster", "token", "revoke", "acme/eu-1", joinTokens[0].ID, "--yes"), "Revoked join token")
	require.Contains(t, c.ok("cluster", "token", "list", "acme/eu-1"), "revoked")

	require.Contains(t, c.ok("project", "create", "acme/shop"), "Created project acme/shop")
	require.Regexp(t, `(?m)^shop\s`, c.ok("project", "list", "acme"))
	require.Contains(t, c.ok("env", "create", "acme/shop/staging", "--cluster", "eu-1"), "Created environment acme/shop/staging on cluster eu-1")
	// Flags may come before the arguments too.
	require.Contains(t, c.ok("env", "create", "--protected", "--cluster", "eu-1", "acme/shop/production"), "protected")
	var envs []api.Environment
	c.json(&envs, "env", "list", "acme/shop")
	require.Len(t, envs, 2)
	require.Equal(t, "production", envs[0].Name)
	require.True(t, envs[0].Protected)
	require.False(t, envs[1].Protected)
	require.Contains(t, c.fails("env", "create", "acme/shop/qa"), "--cluster CLUSTER")

	image := regHost + "/api:v1"
	c.ok("service", "create", "acme/shop/api", "--image", image, "--port", "8080", "--replicas", "2")
	c.ok("service", "create", "acme/shop/db", "--image", image, "--port", "5432")
	c.ok("service", "create", "acme/shop/worker", "--git", "https://github.com/acme/worker", "--branch", "main")
	require.Contains(t, c.fails("service", "create", "acme/shop/x", "--git", "https://github.com/acme/x"), "--git needs --branch")
	out = c.ok("service", "list", "acme/shop")
	require.Regexp(t, `(?m)^api\s+`+regexp.QuoteMeta(image)+`\s+web:8080 x2`, out)
	require.Regexp(t, `(?m)^worker\s+https://github.com/acme/worker#main`, out)
	var services []api.Service
	c.json(&services, "service", "list", "acme/shop")
	require.Len(t, services, 3)

	// --- variables: plain, secret from stdin, a reference
	c.ok("var", "set", "acme/shop/staging/db", "HOST=db.internal")
	require.Contains(t, c.ok("var", "set", "acme/shop/staging/api", "LOG_LEVEL=info", "DB_HOST=${{ db.HOST }}"), "Set LOG_LEVEL, DB_HOST on acme/shop/staging/api")
	const secret = "sk_live_0123456789abcdef"
	require.Contains(t, c.okIn(secret+"\n", "var", "set", "acme/shop/staging/api", "STRIPE_KEY", "--secret"), "STRIPE_KEY (secret)")
	c.ok("var", "set", "acme/shop/staging", "REGION=eu")
	out = c.ok("var", "list", "acme/shop/staging/api")
	require.NotContains(t, out, secret, "a secret's value is never printed")
	require.Regexp(t, `(?m)^STRIPE_KEY\s+\(secret\)\s+service`, out)
	require.Regexp(t, `(?m)^DB_HOST\s+\$\{\{ db\.HOST \}\}\s+service`, out)
	require.Regexp(t, `(?m)^REGION\s+eu\s+environment`, out)
	var vars []api.Variable
	c.json(&vars, "var", "list", "acme/shop/staging/api")
	require.Len(t, vars, 4)
	for _, v := range vars {
		if v.Name == "STRIPE_KEY" {
			require.True(t, v.Secret)
			require.Empty(t, v.Value)
		}
	}
	require.NotContains(t, c.ok("var", "list", "acme/shop/staging/api", "--json"), secret)
	require.Contains(t, c.fails("var", "set", "acme/shop/staging/api", "TOKEN"), "--secret TOKEN")
	require.Contains(t, c.fails("var", "set", "acme/shop/staging/api", "1BAD=x"), "variable name")
	require.Contains(t, c.ok("var", "unset", "acme/shop/staging/api", "LOG_LEVEL", "--yes"), "Unset LOG_LEVEL")
	require.NotContains(t, c.ok("var", "list", "acme/shop/staging/api"), "LOG_LEVEL")

	// --- domains
	require.Contains(t, c.ok("domain", "add", "acme/shop/staging/api", "api.staging.example.com"), "Routed api.staging.example.com")
	require.Regexp(t, `(?m)^api\.staging\.example\.com\s+api\s`, c.ok("domain", "list", "acme/shop/staging"))
	var domains []api.Domain
	c.json(&domains, "domain", "list", "acme/shop/staging/api")
	require.Len(t, domains, 1)
	c.ok("domain", "add", "acme/shop/staging/db", "db.staging.example.com")
	require.Contains(t, c.ok("domain", "remove", "acme/shop/staging/db", "db.staging.example.com", "-y"), "Stopped routing")
	require.NotContains(t, c.ok("domain", "list", "acme/shop/staging"), "db.staging")

	// --- deploy, releases, deployments, rollback
	out = c.ok("deploy", "acme/shop/staging/api")
	require.Contains(t, out, "release 1")
	require.Contains(t, out, regHost+"/api@sha256:", "the tag is pinned to its digest")
	var rels []api.Release
	c.json(&rels, "releases", "acme/shop/staging/api")
	require.Len(t, rels, 1)
	require.Contains(t, rels[0].Image, "@sha256:")
	require.Contains(t, rels[0].Variables, "STRIPE_KEY"+query.SecretSuffix)

	r = c.run("", "deploy", "acme/shop/staging/api", "--image", regHost+"/api:missing")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "nebula: ")
	require.Contains(t, r.err, "api:missing")
	c.json(&rels, "releases", "acme/shop/staging/api")
	require.Len(t, rels, 1, "an image that cannot be resolved creates nothing")

	out = c.ok("deploy", "acme/shop/staging/api", "--image", image)
	require.Contains(t, out, "release 2")
	require.Regexp(t, `(?m)^2\s+\*\s+\S+@sha256:`, c.ok("releases", "acme/shop/staging/api"))
	out = c.ok("rollback", "acme/shop/staging/api", "--release", "1")
	require.Contains(t, out, "Rolling acme/shop/staging/api back to release 1")
	require.Contains(t, out, "follow it with: nebula deployments watch acme/shop/staging/api ")
	require.Contains(t, c.fails("rollback", "acme/shop/staging/api"), "--release N")
	var deps []api.Deployment
	c.json(&deps, "deployments", "acme/shop/staging/api")
	require.Len(t, deps, 3)
	require.Regexp(t, `(?m)^ID\s+RELEASE\s+STATUS`, c.ok("deployments", "acme/shop/staging/api", "--limit", "2"))

	// --- the desired state
	var rev api.Revision
	c.json(&rev, "state", "acme/shop/staging")
	require.Equal(t, "staging", rev.Document.Environment.Name)
	found := false
	for _, s := range rev.Document.Services {
		if s.Name == "api" && s.Release != nil {
			found = true
			require.Contains(t, s.Release.Image, "@sha256:")
		}
	}
	require.True(t, found, "the state has api's release: %+v", rev.Document.Services)
	require.NoError(t, json.Unmarshal([]byte(c.ok("state", "acme/shop/staging")), &rev), "state prints JSON without --json too")
	require.NotContains(t, c.ok("state", "acme/shop/staging"), secret)
	out = c.ok("state", "acme/shop/staging", "--summary")
	require.Regexp(t, `(?m)^SERVICE\s+RELEASE\s+IMAGE\s+HELD`, out)
	require.Regexp(t, `(?m)^api\s+1\s+\S+@sha256:`, out)
	c.json(&rev, "state", "acme/shop/staging", "--revision", "1")
	require.Equal(t, 1, rev.Number)
	c.json(&rev, "state", "acme/shop/staging", "--at", time.Now().Add(time.Minute).UTC().Format(time.RFC3339))
	require.Contains(t, c.fails("state", "acme/shop/staging", "--revision", "1", "--at", "1h"), "not both")

	// --- a protected environment: changes wait for someone else's approval
	out = c.waits("", "deploy", "acme/shop/production/api")
	require.Contains(t, out, "waits in change set")
	var sets []api.ChangeSet
	c.json(&sets, "changeset", "list", "acme/shop/production")
	require.Len(t, sets, 1)
	require.Equal(t, "open", sets[0].Status)
	require.Contains(t, out, sets[0].ID)
	require.Regexp(t, `(?m)^`+sets[0].ID+`\s+open\s+1\s`, c.ok("changeset", "list", "acme/shop/production"))
	// A second change of the same person joins the open change set: version 2.
	require.Contains(t, c.waits("", "var", "set", "acme/shop/production/api", "LOG_LEVEL=warn"), "waits in change set "+sets[0].ID+" (version 2)")
	require.Contains(t, c.waits(secret+"\n", "var", "set", "acme/shop/production/api", "STRIPE_KEY", "--secret"), "(version 3)")
	require.Regexp(t, `(?m)^`+sets[0].ID+`\s+open\s+3\s`, c.ok("changeset", "list", "acme/shop/production"))
	require.Contains(t, c.fails("changeset", "approve", "acme/shop/production", sets[0].ID), "someone other than who opened it")
	c.json(&rels, "releases", "acme/shop/production/api")
	require.Empty(t, rels)
	// What the change set changes, before anyone approves it.
	out = c.ok("changeset", "show", "acme/shop/production", sets[0].ID)
	require.Contains(t, out, "open, version 3")
	require.Contains(t, out, "~ deploy api: "+regHost+"/api@sha256:")
	require.Contains(t, out, "~ set LOG_LEVEL on api: warn")
	require.Contains(t, out, "~ set STRIPE_KEY (secret) on api: ********")
	require.NotContains(t, out, secret)
	require.Contains(t, out, "nebula changeset approve acme/shop/production "+sets[0].ID+" --version 3")
	var view api.ChangeSetView
	c.json(&view, "changeset", "show", "acme/shop/production", sets[0].ID)
	require.Equal(t, 3, view.Version)
	require.Len(t, view.Diff, 3)
	require.NotContains(t, c.ok("changeset", "show", "acme/shop/production", sets[0].ID, "--json"), secret)

	// Another user approves: created by the administrator, added as an admin
	// (the flag after the arguments).
	require.Contains(t, c.okIn(password+"\n", "user", "create", "grace@example.com", "--name", "Grace", "--password-stdin"), "Created user grace@example.com")
	require.Contains(t, c.ok("member", "add", "acme", "grace@example.com", "--role", "admin"), "as admin")
	require.Regexp(t, `(?m)^grace@example.com\s+Grace\s+admin`, c.ok("member", "list", "acme"))
	c.okIn(password+"\n", "login", "--url", srv.URL, "--email", "grace@example.com", "--password-stdin")
	// An approval of a version that is not the change set's is refused.
	stderr := c.fails("changeset", "approve", "acme/shop/production", sets[0].ID, "--version", "2")
	require.Contains(t, stderr, "review it again: nebula changeset show acme/shop/production "+sets[0].ID)
	require.Contains(t, c.ok("changeset", "approve", "acme/shop/production", sets[0].ID), "is approved")
	c.json(&sets, "changeset", "list", "acme/shop/production", "--status", "open")
	require.Empty(t, sets, "every change was in the one change set")
	out = c.ok("changeset", "show", "acme/shop/production", view.ID)
	require.Contains(t, out, "approved, version 3")
	require.Contains(t, out, "~ set LOG_LEVEL on api: warn", "a decided change set shows the new values only")
	require.NotContains(t, out, "nebula changeset approve")
	c.ok("logout")
	c.ok("login", "--url", srv.URL, "--token", adaToken)
	require.Contains(t, c.waits("", "var", "set", "acme/shop/production/api", "LOG_LEVEL=error"), "waits in change set")
	c.json(&sets, "changeset", "list", "acme/shop/production", "--status", "open")
	require.Len(t, sets, 1)
	require.Contains(t, c.ok("changeset", "show", "acme/shop/production", sets[0].ID), "~ set LOG_LEVEL on api: warn -> error")
	c.okIn(password+"\n", "login", "--url", srv.URL, "--email", "grace@example.com", "--password-stdin")
	require.Contains(t, c.ok("changeset", "reject", "acme/shop/production", sets[0].ID, "--reason", "not now"), "is rejected")
	c.ok("logout")
	c.ok("login", "--url", srv.URL, "--token", adaToken)
	c.json(&rels, "releases", "acme/shop/production/api")
	require.Len(t, rels, 3, "the approved change set made a release per change: the deployment, then each variable change")
	require.Equal(t, []string{"variables", "variables", "deploy"}, []string{rels[0].Reason, rels[1].Reason, rels[2].Reason})
	require.Contains(t, c.ok("member", "remove", "acme", "grace@example.com", "--yes"), "Removed grace@example.com")
	require.NotContains(t, c.ok("member", "list", "acme"), "grace")

	// --- the audit log, through the API
	a := cliRun{t: t}
	r = a.runWith(runAudit, "", "audit")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "several organisations (acme, beta): give --org ORG")
	r = a.runWith(runAudit, "", "audit", "--org", "acme")
	require.NoError(t, r.failed, r.err)
	require.Regexp(t, `(?m)^TIME\s+ACTOR\s+ACTION\s+TARGET`, r.out)
	require.Contains(t, r.out, "acme/shop/staging/api")
	// -o jsonl: one entry per line; --json (-o json): one array of them.
	r = a.runWith(runAudit, "", "audit", "--org", "acme", "-o", "jsonl", "--since", "1h")
	require.NoError(t, r.failed, r.err)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Greater(t, len(lines), 10)
	for _, l := range lines {
		var e api.AuditEntry
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		require.NotZero(t, e.Seq)
	}
	var entries []api.AuditEntry
	r = a.runWith(runAudit, "", "audit", "--org", "acme", "--json", "--since", "1h")
	require.NoError(t, r.failed, r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), &entries), "audit --json prints one array:\n%s", r.out)
	require.Len(t, entries, len(lines))
	r = a.runWith(runAudit, "", "audit", "--all", "--json")
	require.NoError(t, r.failed, r.err)
	require.NoError(t, json.Unmarshal([]byte(r.out), &entries))
	require.GreaterOrEqual(t, len(entries), len(lines))
	r = a.runWith(runAudit, "", "audit", "--org", "acme", "--since", "yesterday")
	require.Contains(t, r.err, "is not a time")
	r = a.runWith(runAudit, "", "audit", "replay", "--help")
	require.NoError(t, r.failed, "the database subcommands stay")
	require.Contains(t, r.out, "rebuild every projection")

	// --follow prints what happens after it started, until interrupted.
	auditPollInterval = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	followOut := &lockedbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- runAudit(ctx, []string{"nebula", "audit", "--org", "acme", "--follow", "--action", "project.*"}, strings.NewReader(""), followOut, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(followOut.String(), "acme/shop") }, 10*time.Second, 50*time.Millisecond)
	cl, err := client.New(srv.URL, adaToken)
	require.NoError(t, err)
	_, err = cl.CreateProject(t.Context(), "acme", "followed")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(followOut.String(), "acme/followed") }, 10*time.Second, 50*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "interrupting --follow is not an error")
	case <-time.After(10 * time.Second):
		t.Fatal("audit --follow did not stop when interrupted")
	}

	// --- API tokens
	out = c.ok("token", "create", "ci", "--scope", "projects:read", "--expires-in-days", "30")
	ciToken := tokenRE.FindString(out)
	require.NotEmpty(t, ciToken, out)
	require.Contains(t, out, "shown only this once")
	require.Regexp(t, `(?m)^\S+\s+ci\s+projects:read\s`, c.ok("token", "list"))
	var toks []api.Token
	c.json(&toks, "token", "list")
	var ciID string
	for _, tk := range toks {
		if tk.Name == "ci" {
			ciID = tk.ID
		}
	}
	require.NotEmpty(t, ciID)
	t.Setenv(envToken, ciToken)
	require.Contains(t, c.ok("project", "list", "acme"), "shop", "NEBULACTRL_TOKEN overrides the stored token")
	require.Contains(t, c.fails("project", "create", "acme/nope"), "projects:write")
	t.Setenv(envToken, "")
	require.Contains(t, c.ok("token", "revoke", ciID, "--yes"), "Revoked token")
	t.Setenv(envToken, ciToken)
	stderr = c.fails("project", "list", "acme")
	require.Contains(t, stderr, "the token was revoked")
	require.Contains(t, stderr, "nebula login")
	t.Setenv(envToken, "")
	require.Contains(t, c.fails("token", "create", "bad"), "--scope")

	// --- instance settings
	require.Contains(t, c.ok("settings", "get"), "agent auto-upgrade: on")
	require.Contains(t, c.ok("settings", "set", "--agent-auto-upgrade=false"), "agent auto-upgrade: off")
	var settings api.InstanceSettings
	c.json(&settings, "settings", "get")
	require.False(t, settings.AgentAutoUpgrade)
	require.Contains(t, c.fails("settings", "set"), "nothing to set")

	// --- errors: the API's message on stderr, and a non-zero exit
	stderr = c.fails("env", "list", "acme/nope")
	require.Contains(t, stderr, "nebula: project acme/nope not found")
	require.Contains(t, c.fails("service", "delete", "acme/shop/nope", "--yes"), "service acme/shop/nope not found")
	require.Contains(t, c.fails("project", "list", "nope"), "organisation nope not found")

	// --- addresses of the wrong shape
	require.Contains(t, c.fails("env", "list", "acme"), "want ORG/PROJECT, got 1 part")
	require.Contains(t, c.fails("deploy", "acme/shop/staging"), "want ORG/PROJECT/ENV/SERVICE, got 3 parts")
	require.Contains(t, c.fails("var", "list", "acme/shop"), "want ORG/PROJECT/ENV[/SERVICE], got 2 parts")
	require.Contains(t, c.fails("changeset", "list", "acme//staging"), "empty or padded PROJECT")
	require.Contains(t, c.fails("project", "list"), "want ORG, got 0 argument(s)")
	require.Contains(t, c.fails("member", "add", "acme", "x@example.com", "--nope"), "flag provided but not defined: --nope")

	// --- deleting
	require.Contains(t, c.ok("service", "delete", "acme/shop/worker", "--yes"), "Deleted service acme/shop/worker")
	require.Contains(t, c.ok("env", "delete", "acme/shop/staging", "--yes"), "Deleted environment acme/shop/staging")
	require.Contains(t, c.ok("--yes", "project", "delete", "acme/followed"), "Deleted project acme/followed")
	require.NotContains(t, c.ok("project", "list", "acme"), "followed")

	// The file is still the user's alone after every rewrite.
	st, err = os.Stat(credPath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
}
