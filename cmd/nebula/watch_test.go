package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
)

// running is a nebula command running in the background.
type running struct {
	out, errb *lockedbuf.Buffer
	done      chan error
}

func (c cliRun) start(args ...string) *running {
	c.t.Helper()
	r := &running{out: &lockedbuf.Buffer{}, errb: &lockedbuf.Buffer{}, done: make(chan error, 1)}
	go func() {
		err := run(c.t.Context(), append([]string{"nebula"}, args...), strings.NewReader(""), r.out, r.errb)
		if err != nil {
			fmt.Fprintln(r.errb, "nebula:", err)
		}
		r.done <- err
	}()
	return r
}

// wait returns the command's exit code (as main would exit) and its stdout.
func (r *running) wait(t *testing.T) (int, string) {
	t.Helper()
	select {
	case err := <-r.done:
		return exitCode(err), r.out.String()
	case <-time.After(30 * time.Second):
		t.Fatalf("the command did not end; stdout so far:\n%s\nstderr:\n%s", r.out.String(), r.errb.String())
	}
	return 0, ""
}

var followingRE = regexp.MustCompile(`Following deployment ([0-9a-f-]{36})`)

// id waits for the deployment's id in the output.
func (r *running) id(t *testing.T) string {
	t.Helper()
	var id string
	require.Eventually(t, func() bool {
		if m := followingRE.FindStringSubmatch(r.out.String()); m != nil {
			id = m[1]
		}
		return id != ""
	}, 20*time.Second, 20*time.Millisecond, "the watch starts")
	return id
}

// stages plays the agent of a cluster.
type stages struct {
	t                    *testing.T
	cl                   *client.Client
	cmd                  *dispatch.Handler
	orgID, cluster       string
	org, project, env, s string
}

func (s stages) delivered(id string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		d, err := s.cl.Deployment(s.t.Context(), s.org, s.project, s.env, s.s, id)
		return err == nil && d.Status != string(domain.StatusRequested)
	}, 20*time.Second, 20*time.Millisecond, "deployment %s is delivered", id)
}

func (s stages) report(id string, stage domain.DeploymentStatus, ready, desired int) {
	s.t.Helper()
	_, err := s.cmd.Deployment(s.t.Context(), dispatch.Context{Actor: domain.Actor{Kind: domain.ActorAgent, ID: "a1", Name: "eu-1/a1"}},
		s.orgID, id, domain.ReportStage{ClusterID: s.cluster, Stage: stage, Ready: ready, Desired: desired})
	require.NoError(s.t, err)
}

// TestWaitForDeployments follows deployments with deploy --wait, rollback
// --wait and deployments watch against a real control plane, with the
// stages an agent would report issued as commands: the exit code says how
// each ended, and piped output is plain lines, one per stage.
func TestWaitForDeployments(t *testing.T) {
	b := setup(t)
	regHost, srv := b.regHost, b.srv
	token := srv.Setup(t, "ada@example.com", "acme")
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, token)
	c := b.c
	image := regHost + "/api:v1"
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/staging", "--cluster", "eu-1")
	c.ok("env", "create", "acme/shop/production", "--cluster", "eu-1", "--protected")
	c.ok("service", "create", "acme/shop/api", "--image", image, "--port", "8080", "--replicas", "2")
	// A release of slow must be ready within a second of its pods starting.
	c.ok("service", "create", "acme/shop/slow", "--image", image, "--progress-deadline", "1s")
	require.Contains(t, c.fails("service", "update", "acme/shop/slow", "--progress-deadline", "1500ms"), "whole seconds")
	require.Contains(t, c.ok("service", "update", "acme/shop/api", "--progress-deadline", "15m"), "progress deadline 15m0s")
	var svc api.Service
	c.json(&svc, "service", "update", "acme/shop/api", "--replicas", "2")
	require.Equal(t, 900, svc.ProgressDeadlineSeconds, "what is not given stays")

	cl, err := client.New(srv.URL, token)
	require.NoError(t, err)
	org, err := cl.Organisation(t.Context(), "acme")
	require.NoError(t, err)
	cluster, err := cl.Cluster(t.Context(), "acme", "eu-1")
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	require.NoError(t, err)
	agent := stages{t: t, cl: cl, cmd: cmd, orgID: org.ID, cluster: cluster.ID, org: "acme", project: "shop", env: "staging", s: "api"}

	// Succeeded: 0, and a plain line per stage.
	w := c.start("deploy", "acme/shop/staging/api", "--wait")
	id := w.id(t)
	agent.delivered(id)
	agent.report(id, domain.StatusStarting, 0, 2)
	agent.report(id, domain.StatusProbing, 1, 2)
	agent.report(id, domain.StatusProbing, 2, 2)
	agent.report(id, domain.StatusSwitching, 2, 2)
	agent.report(id, domain.StatusRetiring, 2, 2)
	agent.report(id, domain.StatusSucceeded, 2, 2)
	code, out := w.wait(t)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, w.errb.String())
	require.Contains(t, out, "Deploying acme/shop/staging/api: release 1")
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d delivering$`, out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d starting 0/2 ready$`, out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d probing 1/2 ready$`, out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d probing 2/2 ready$`, out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d switching 2/2 ready$`, out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d retiring 2/2 ready$`, out)
	require.Regexp(t, `(?m)^Deployment `+id+` succeeded in [0-9.]+s\.$`, out)
	require.Contains(t, out, "! blocked: delivery", "no agent is connected: the delivery blocker shows while delivering")
	require.Contains(t, out, "no longer blocked")
	require.NotContains(t, out, "\r", "no redrawing when piped")
	require.NotContains(t, out, "\033[")
	// Watching it afterwards prints its stages again and ends at once.
	code, out = c.start("deployments", "watch", "acme/shop/staging/api").wait(t)
	require.Equal(t, 0, code)
	require.Equal(t, 1, strings.Count(out, "succeeded in"), out)
	require.Regexp(t, `(?m)^\d\d:\d\d:\d\d retiring 2/2 ready$`, out)
	out = c.ok("deployments", "show", "acme/shop/staging/api", id)
	require.Regexp(t, `(?m)^SEQ\s+STAGE\s+AT\s+READY\s+BY\s+DETAIL$`, out)
	require.Regexp(t, `(?m)^\d+\s+probing\s+.*\s2/2\s+agent:eu-1/a1`, out)
	require.Regexp(t, `(?m)^`+id+`\s+1\s+succeeded\s+2/2\s+-\s`, c.ok("deployments", "acme/shop/staging/api"))

	// Superseded: 4.
	w = c.start("deploy", "acme/shop/staging/api", "--wait")
	first := w.id(t)
	agent.delivered(first)
	agent.report(first, domain.StatusStarting, 0, 2)
	// The stall flag shows when it is raised.
	_, err = cmd.Deployment(t.Context(), dispatch.Context{Actor: domain.System("test")}, org.ID, first, domain.CheckStall{StallTimeout: time.Nanosecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(w.out.String(), "! stalled: no progress since") }, 10*time.Second, 20*time.Millisecond)
	res, err := cl.Deploy(t.Context(), "acme", "shop", "staging", "api", "")
	require.NoError(t, err)
	code, out = w.wait(t)
	require.Equal(t, exitSuperseded, code, out)
	require.Contains(t, out, "superseded by deployment "+res.Deployment.ID)
	agent.delivered(res.Deployment.ID)

	// Timed out: 5; the deployment goes on.
	code, out = c.start("deployments", "watch", "acme/shop/staging/api", "--timeout", "1s").wait(t)
	require.Equal(t, exitTimedOut, code, out)

	// Failed: 3, with the reason. slow's release must be ready a second after
	// its pods start; the reactions' timer fails it.
	w = c.start("deploy", "acme/shop/staging/slow", "--wait")
	id = w.id(t)
	slow := agent
	slow.s = "slow"
	slow.delivered(id)
	slow.report(id, domain.StatusStarting, 0, 1)
	code, out = w.wait(t)
	require.Equal(t, exitFailed, code, out)
	require.Contains(t, out, "progress deadline of 1s (0/1 pods ready)")
	require.Contains(t, w.errb.String(), "failed: the release was not ready within its progress deadline")

	// Waiting for approval: 6, with the change set and how to approve it.
	r := c.run("", "deploy", "acme/shop/production/api", "--wait")
	require.Equal(t, exitApproval, exitCode(r.failed), r.out+r.err)
	sets, err := cl.ChangeSets(t.Context(), "acme", "shop", "production", "open")
	require.NoError(t, err)
	require.Len(t, sets, 1)
	require.Contains(t, r.out, "nebula changeset approve acme/shop/production "+sets[0].ID+" --version 1")
	require.Contains(t, r.err, "waits for approval in change set "+sets[0].ID)

	// A rollback with --wait, which pauses automatic deploys until resumed.
	w = c.start("rollback", "acme/shop/staging/api", "--release", "1", "--wait")
	id = w.id(t)
	agent.delivered(id)
	for _, s := range []domain.DeploymentStatus{domain.StatusStarting, domain.StatusProbing, domain.StatusSwitching, domain.StatusRetiring, domain.StatusSucceeded} {
		agent.report(id, s, 2, 2)
	}
	code, out = w.wait(t)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Rolling acme/shop/staging/api back to release 1")
	out = c.ok("deployments", "acme/shop/staging/api")
	require.Contains(t, out, "Automatic deploys of acme/shop/staging/api are paused since")
	var tv api.TargetView
	c.json(&tv, "service", "resume-deploys", "acme/shop/staging/api")
	require.Nil(t, tv.DeploysPaused)
	require.Contains(t, c.ok("service", "resume-deploys", "acme/shop/staging/api"), "are resumed")
	require.NotContains(t, c.ok("deployments", "acme/shop/staging/api"), "paused")

	// On a terminal: a line redrawn, and a line per stage done.
	stdoutIsTerminal = func(io.Writer) bool { return true }
	t.Cleanup(func() { stdoutIsTerminal = isTerminal })
	code, out = c.start("deployments", "watch", "acme/shop/staging/api", id).wait(t)
	require.Equal(t, 0, code, out)
	for _, s := range []string{"delivering", "starting", "probing", "switching", "retiring"} {
		require.Regexp(t, `(?m)✓ `+s+` +[0-9.]+s$`, out)
	}
	require.Contains(t, out, "\r\033[K", "the line is redrawn")
	require.Regexp(t, `\r\033\[K\S+ probing  2/2 pods ready`, out)
	require.NotRegexp(t, `(?m)^\d\d:\d\d:\d\d `, out, "no plain lines")
	stdoutIsTerminal = isTerminal

	// --help names the exit codes.
	help := c.ok("deploy", "--help")
	for _, s := range []string{"3  what it names was not found", "6  the environment is protected", "7  the deployment failed", "8  a newer deployment superseded it", "9  --timeout passed"} {
		require.Contains(t, help, s)
	}
	require.Contains(t, c.ok("deployments", "watch", "--help"), "9  --timeout passed")
	// No code means two things: the deployment's own are above the uniform ones.
	require.Greater(t, exitFailed, max(exitUsage, exitNotFound, exitForbidden, exitConflict, exitApproval))
}

// A watch resumes after a lost connection with Last-Event-ID: every stage
// is printed once.
func TestWatchResumesAfterALostConnection(t *testing.T) {
	b := setup(t)
	regHost, srv := b.regHost, b.srv
	token := srv.Setup(t, "ada@example.com", "acme")
	// A proxy that cuts every event stream after its first stage event.
	backend, err := url.Parse(srv.URL)
	require.NoError(t, err)
	var cuts, resumedWith atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(backend)
	rp.FlushInterval = -1
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/events") {
			rp.ServeHTTP(w, r)
			return
		}
		if id := r.Header.Get("Last-Event-ID"); id != "" {
			var n int64
			fmt.Sscan(id, &n)
			resumedWith.Store(n)
		}
		rp.ServeHTTP(&cutAfterStage{ResponseWriter: w, cut: func() { cuts.Add(1) }}, r)
	}))
	t.Cleanup(proxy.Close)
	t.Setenv(envURL, proxy.URL)
	t.Setenv(envToken, token)
	c := b.c
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/staging", "--cluster", "eu-1")
	c.ok("service", "create", "acme/shop/api", "--image", regHost+"/api:v1")

	cl, err := client.New(srv.URL, token)
	require.NoError(t, err)
	org, err := cl.Organisation(t.Context(), "acme")
	require.NoError(t, err)
	cluster, err := cl.Cluster(t.Context(), "acme", "eu-1")
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	require.NoError(t, err)
	agent := stages{t: t, cl: cl, cmd: cmd, orgID: org.ID, cluster: cluster.ID, org: "acme", project: "shop", env: "staging", s: "api"}

	w := c.start("deploy", "acme/shop/staging/api", "--wait")
	id := w.id(t)
	agent.delivered(id)
	for _, s := range []domain.DeploymentStatus{domain.StatusStarting, domain.StatusProbing, domain.StatusSwitching, domain.StatusRetiring, domain.StatusSucceeded} {
		// Give the watch the time to connect again (sometimes, not always).
		time.Sleep(300 * time.Millisecond)
		agent.report(id, s, 1, 1)
	}
	code, out := w.wait(t)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, w.errb.String())
	for _, s := range []string{"delivering", "starting 1/1 ready", "probing 1/1 ready", "switching 1/1 ready", "retiring 1/1 ready"} {
		require.Equal(t, 1, strings.Count(out, " "+s+"\n"), "%q once in:\n%s", s, out)
	}
	require.Contains(t, out, "succeeded in")
	require.Contains(t, w.errb.String(), "connection lost")
	require.GreaterOrEqual(t, cuts.Load(), int64(3))
	require.Positive(t, resumedWith.Load(), "the watch resumed with Last-Event-ID")
}

// cutAfterStage passes a stream on until a stage event has passed, then
// drops the connection (as a proxy or a network might).
type cutAfterStage struct {
	http.ResponseWriter
	cut  func()
	seen bool
}

func (c *cutAfterStage) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.Flush()
	c.seen = c.seen || strings.Contains(string(p), "event: stage")
	if c.seen && strings.Contains(string(p), "\n\n") && !strings.Contains(string(p), `"terminal":true`) {
		c.cut()
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (c *cutAfterStage) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
