package console_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// buildAgent is an agent over the real protocol that runs builds (its hello
// says so, as the leader of its cluster): it is sent the set of builds the
// control plane wants running in its cluster, and sends their output and
// verdicts as the real agent's build Jobs do (no Kubernetes cluster runs
// behind it: agent/build has its own tests). It acknowledges every desired
// state.
type buildAgent struct {
	t      *testing.T
	client *transport.Client
	mu     sync.Mutex
	sets   []transport.Builds
}

func joinBuildAgent(t *testing.T, url, joinToken, name string) *buildAgent {
	t.Helper()
	reg, err := transport.Register(t.Context(), url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
	require.NoError(t, err)
	a := &buildAgent{t: t}
	welcomed := make(chan struct{})
	var once sync.Once
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: reg.Credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.5.0", Arch: "amd64", Applied: map[string]int{}, Builds: true,
				Facts: transport.Facts{Hostname: name, Leader: true}}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash}
		},
		Builds: func(b transport.Builds) {
			a.mu.Lock()
			a.sets = append(a.sets, b)
			a.mu.Unlock()
		},
		OnConnected: func(transport.Welcome) { once.Do(func() { close(welcomed) }) },
	})
	require.NoError(t, err)
	a.client = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-welcomed:
	case <-time.After(20 * time.Second):
		t.Fatal("the build agent did not connect")
	}
	return a
}

// running says whether the last set of builds the agent was sent has id.
func (a *buildAgent) running(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.sets) == 0 {
		return false
	}
	for _, b := range a.sets[len(a.sets)-1].Builds {
		if b.ID == id {
			return true
		}
	}
	return false
}

// waitRunning waits until the control plane has sent the agent the build
// (want) or taken it out of the set (a cancelled build's Job is stopped).
func (a *buildAgent) waitRunning(id string, want bool) {
	a.t.Helper()
	require.Eventually(a.t, func() bool { return a.running(id) == want }, 20*time.Second, 50*time.Millisecond,
		"the agent's set of builds has %s: %v", id, want)
}

// logs sends lines of a build's output, as the build pod prints them.
func (a *buildAgent) logs(id string, lines ...string) {
	a.t.Helper()
	var ls []transport.LogLine
	for _, l := range lines {
		ls = append(ls, transport.LogLine{Time: time.Now(), Stream: "stdout", Text: l})
	}
	require.NoError(a.t, a.client.Send(transport.TypeBuildLogs, transport.BuildLogs{BuildID: id, Container: "build", Lines: ls}))
}

func (a *buildAgent) report(r transport.BuildReport) {
	a.t.Helper()
	r.Time = time.Now()
	require.NoError(a.t, a.client.Send(transport.TypeBuildReport, r))
}

// githubPush is GitHub's own example of a push event (branch master of
// Codertocat/Hello-World created at 6113728f27ae…), vendored in forge/testdata.
func githubPush(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../forge/testdata/github/push-branch-created.json")
	require.NoError(t, err)
	return string(b)
}

const pushedCommit = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"

// deliverGitHub posts a push to the project's webhook URL as GitHub does:
// the body signed with HMAC-SHA256 of the secret.
func deliverGitHub(t *testing.T, hookURL, secret, body string) (int, string) {
	t.Helper()
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	req, err := http.NewRequestWithContext(t.Context(), "POST", hookURL, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "push")
	req.Header.Set("X-GitHub-Delivery", uuid.NewString())
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// TestBuildsInChromium drives builds from Git in headless Chromium against
// a real control plane (real PostgreSQL, the real websocket hub and the
// real webhook endpoint), with an agent over the real protocol that runs
// builds: a Git service is created on the project page, the webhook's
// secret is made there (shown once: the page reloaded does not show it), a
// signed GitHub push is delivered to the webhook's URL, its delivery is
// listed on the project page and its build on the service page; the build
// page receives the lines the agent sends without a reload, and Cancel
// cancels it (the agent is told to stop it). Then the service's tracked
// branch is changed and set to none, and Deploy builds the tracked
// branch's head (again, a second attempt) and a commit given, each landing
// on its build page, which follows the agent's verdicts live (succeeded:
// image@digest; failed: reason, exit code and log tail). axe-core runs on
// every page seen.
func TestBuildsInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0"})
	admin := srv.Setup(t, "ada@example.com", "acme")
	org := srv.URL + "/api/v1/orgs/acme"
	var cl struct {
		JoinToken struct{ Token string } `json:"joinToken"`
	}
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/clusters", admin, map[string]any{"name": "eu-1"}, &cl))
	agent := joinBuildAgent(t, srv.URL, cl.JoinToken.Token, "eu-1-a")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects/shop/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", "/o/acme/p/shop", "#new-service")

	// A Git service, from the project page's form.
	b.fill("#svc-name", "hello")
	b.fill("#svc-git", "https://github.com/Codertocat/Hello-World.git")
	b.fill("#svc-branch", "master")
	b.fill("#svc-port", "8080")
	b.submit("#new-service button", "#matrix")
	require.Contains(t, b.text(".notice"), "Service hello created")
	var svc struct {
		Source struct{ GitURL, GitBranch string }
	}
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/projects/shop/services/hello", admin, nil, &svc))
	require.Equal(t, "https://github.com/Codertocat/Hello-World.git", svc.Source.GitURL)
	require.Equal(t, "master", svc.Source.GitBranch)

	// The push webhook: no secret yet; making it shows it once.
	require.Contains(t, b.text("#webhook-secret"), "none yet")
	hookURL := b.text("#webhook-url")
	require.Regexp(t, `^http://127\.0\.0\.1/api/v1/hooks/git/[0-9a-f-]{36}$`, hookURL)
	require.Equal(t, "Make the secret", b.text("#webhook-rotate"))
	b.submit("#webhook-rotate", "#new-webhook-secret")
	secret := b.text("#new-webhook-secret-value")
	require.Regexp(t, `^nbh_\S{40,}$`, secret)
	require.Contains(t, b.text("#new-webhook-secret"), "shown once and never again")
	require.False(t, b.has("#previous-secret"), "the first secret has no previous one")
	require.Contains(t, b.text("#webhook-secret"), "set ")
	require.Equal(t, "Rotate the secret", b.text("#webhook-rotate"))
	b.visit("webhook-secret")
	b.open("/o/acme/p/shop", "#webhook-url")
	require.False(t, b.has("#new-webhook-secret"), "the secret is shown once")
	require.NotContains(t, eval[string](b, "document.documentElement.outerHTML"), secret, "the secret is not on the page again")
	require.Contains(t, b.text("#deliveries-empty"), "No delivery yet")

	// A push to master, signed as GitHub signs it, delivered to the URL
	// the page shows (the control plane's public URL is http://127.0.0.1).
	status, answer := deliverGitHub(t, srv.URL+strings.TrimPrefix(hookURL, "http://127.0.0.1"), secret, githubPush(t))
	require.Equal(t, http.StatusOK, status, answer)
	require.Contains(t, answer, `"outcome":"building"`)
	b.open("/o/acme/p/shop", "#deliveries")
	row := b.text("#deliveries tbody tr")
	for _, want := range []string{"github", "push", "refs/heads/master", pushedCommit[:12], "building", "1 build"} {
		require.Contains(t, row, want)
	}
	b.visit("project-webhook")

	// The build, on the service page: running at once (the cluster has
	// room), and sent to the agent.
	require.Eventually(t, func() bool {
		b.open("/o/acme/p/shop/e/staging/s/hello", "#h-builds")
		return b.has("#builds tbody tr")
	}, 20*time.Second, 100*time.Millisecond, "the push's build on the service page")
	row = b.text("#builds tbody tr")
	for _, want := range []string{"master", pushedCommit[:12], "push"} {
		require.Contains(t, row, want)
	}
	require.Regexp(t, `queued|running`, row)
	require.Contains(t, b.text("#tracked-branch"), "master")
	buildID := eval[string](b, `document.querySelector('#builds tbody tr').getAttribute('data-build')`)
	agent.waitRunning(buildID, true)
	b.visit("service-builds")

	// The build page follows its output live: the agent's lines arrive
	// without a reload, in order.
	b.submit("#builds tbody tr a", "#build")
	require.Equal(t, "/o/acme/p/shop/e/staging/s/hello/b/"+buildID, eval[string](b, "location.pathname"))
	b.waitJS(`document.querySelector('#build-status').innerText === 'running'`, "the build is running")
	require.Contains(t, b.text("#build"), "https://github.com/Codertocat/Hello-World.git")
	require.Contains(t, b.text("#build-commit"), pushedCommit)
	require.Contains(t, b.text("#build"), "Dockerfile in .")
	require.Contains(t, b.text("#build"), "staging, when it succeeds")
	require.Contains(t, b.text("#build-log-empty"), "No output yet")
	require.Contains(t, b.text("#stream-state"), "Following live")
	eval[bool](b, "window.__sameDocument = true; true")
	time.Sleep(300 * time.Millisecond) // the stream is open before the first line
	agent.logs(buildID, "#1 [internal] load build definition from Dockerfile", "#1 transferring dockerfile: 120B done")
	b.waitJS(`document.querySelector('#build-log').innerText.includes('transferring dockerfile')`, "the first lines on the page")
	agent.logs(buildID, "#2 [1/3] FROM docker.io/library/alpine:3.22")
	b.waitJS(`document.querySelector('#build-log').innerText.includes('[1/3] FROM')`, "the next line on the page")
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "the lines arrived without a reload")
	require.False(t, b.has("#build-log-empty"), "the empty state goes with the first line")
	require.Equal(t, []string{"#1 [internal] load build definition from Dockerfile", "#1 transferring dockerfile: 120B done", "#2 [1/3] FROM docker.io/library/alpine:3.22"},
		eval[[]string](b, `[...document.querySelectorAll('#build-log .log-line')].map(e => e.textContent)`), "each line once, in order")
	b.visit("build")

	// The page reloaded shows the lines it has, and follows from the last.
	b.open("/o/acme/p/shop/e/staging/s/hello/b/"+buildID, "#build-log")
	require.Equal(t, 3, eval[int](b, `document.querySelectorAll('#build-log .log-line').length`))
	eval[bool](b, "window.__sameDocument = true; true")
	time.Sleep(300 * time.Millisecond)
	agent.logs(buildID, "#3 [2/3] RUN make")
	b.waitJS(`document.querySelector('#build-log').innerText.includes('RUN make')`, "a line after the reload")
	require.Equal(t, 4, eval[int](b, `document.querySelectorAll('#build-log .log-line').length`), "no line twice")
	require.True(t, eval[bool](b, "window.__sameDocument === true"))

	// Cancel: the build is cancelled, and the agent told to stop it.
	b.submit("#cancel-build", ".notice")
	require.Equal(t, "cancelled", b.text("#build-status"))
	require.Contains(t, b.text("#build-reason"), "cancelled by")
	require.False(t, b.has("#cancel-form"), "no Cancel once it is over")
	require.Contains(t, b.text("#stream-state"), "over")
	var got struct{ Status string }
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/builds/"+buildID, admin, nil, &got))
	require.Equal(t, "cancelled", got.Status)
	agent.waitRunning(buildID, false)
	require.Equal(t, http.StatusConflict, b.post("/o/acme/p/shop/e/staging/s/hello/b/"+buildID+"/cancel", nil, true), "the API refuses to cancel a build that is over")

	// The tracked branch: another, then none.
	b.open("/o/acme/p/shop/e/staging/s/hello", "#track-form")
	b.fill("#track-branch", "release/1.x")
	b.submit("#track", ".notice")
	require.Contains(t, b.text(".notice"), "Pushes to release/1.x now build hello")
	require.Contains(t, b.text("#tracked-branch"), "release/1.x")
	var tr struct {
		Branch    string
		Untracked bool
	}
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/projects/shop/environments/staging/services/hello/tracking", admin, nil, &tr))
	require.Equal(t, "release/1.x", tr.Branch)
	b.submit("#track-none", ".notice")
	require.Contains(t, b.text(".notice"), "follows no branch")
	require.Contains(t, b.text("#tracked-branch"), "none")
	require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/projects/shop/environments/staging/services/hello/tracking", admin, nil, &tr))
	require.True(t, tr.Untracked)
	b.fill("#track-branch", "master")
	b.submit("#track", ".notice")
	require.Contains(t, b.text("#tracked-branch"), "master")

	// Deploy builds the tracked branch's head (as the last push said): the
	// cancelled build's commit, a second attempt; the agent's success shows
	// on its page without a reload, with the image and its digest.
	require.Contains(t, b.text("#deploy-hint"), "Builds the head of master")
	b.submit("#deploy", "#build")
	require.Equal(t, "/o/acme/p/shop/e/staging/s/hello/b/"+buildID, eval[string](b, "location.pathname"))
	require.Contains(t, b.text(".notice"), "Building master at "+pushedCommit[:12])
	require.Contains(t, b.text("#build"), "deploy, attempt 2")
	agent.waitRunning(buildID, true)
	b.waitJS(`document.querySelector('#build-status').innerText === 'running'`, "the second attempt runs")
	eval[bool](b, "window.__sameDocument = true; true")
	time.Sleep(300 * time.Millisecond)
	digest := "sha256:" + strings.Repeat("ab", 32)
	agent.logs(buildID, "#9 pushing manifest done")
	agent.report(transport.BuildReport{BuildID: buildID, State: transport.BuildSucceeded, Commit: pushedCommit, Image: "localhost:30500/acme/shop/hello", Digest: digest})
	b.waitJS(`document.querySelector('#build-status').innerText === 'succeeded'`, "the success on the page")
	b.waitJS(`document.querySelector('#stream-state').innerText.includes('over')`, "the stream ends with the build")
	require.Equal(t, "localhost:30500/acme/shop/hello@"+digest, b.text("#build-image"))
	require.Contains(t, b.text("#build-log"), "pushing manifest done")
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "the verdict arrived without a reload")
	require.False(t, b.has("#cancel-form"), "Cancel goes when the build is over")
	b.open("/o/acme/p/shop/e/staging/s/hello/b/"+buildID, "#build")
	require.Equal(t, "localhost:30500/acme/shop/hello@"+digest, b.text("#build-image"))
	b.visit("build-succeeded")
	// The success deployed it.
	require.Eventually(t, func() bool {
		b.open("/o/acme/p/shop/e/staging/s/hello", "#h-builds")
		return strings.Contains(b.text("section[aria-labelledby=h-releases]"), "localhost:30500/acme/shop/hello@"+digest)
	}, 20*time.Second, 100*time.Millisecond, "the build's image released")

	// Deploy of a commit given: its own build, which fails; the page
	// shows why after it.
	other := "0123456789abcdef0123456789abcdef01234567"
	b.fill("#deploy-commit", other)
	b.submit("#deploy", "#build")
	require.Contains(t, b.text("#build-commit"), other)
	otherPath := eval[string](b, "location.pathname")
	otherID := otherPath[strings.LastIndex(otherPath, "/")+1:]
	require.NotEqual(t, buildID, otherID)
	agent.waitRunning(otherID, true)
	b.waitJS(`document.querySelector('#build-status').innerText === 'running'`, "the commit's build runs")
	time.Sleep(300 * time.Millisecond)
	agent.logs(otherID, "#4 [3/3] RUN go test ./...", "FAIL github.com/codertocat/hello")
	agent.report(transport.BuildReport{BuildID: otherID, State: transport.BuildFailed, ExitCode: 1,
		Reason: `process "/bin/sh -c go test ./..." did not complete successfully: exit code: 1`, LogTail: []string{"#4 [3/3] RUN go test ./...", "FAIL github.com/codertocat/hello"}})
	b.waitJS(`document.querySelector('#build-status').innerText === 'failed'`, "the failure on the page")
	require.Equal(t, "1", b.text("#build-exit"))
	require.Contains(t, b.text("#build-reason"), "did not complete successfully")
	b.open(otherPath, "#build-tail")
	require.Contains(t, b.text("#build-tail"), "FAIL github.com/codertocat/hello")
	require.Equal(t, "failed", b.text("#build-status"))
	b.visit("build-failed")

	// The service page lists the two builds of eu-1, newest first.
	b.open("/o/acme/p/shop/e/staging/s/hello", "#builds")
	require.Equal(t, []string{otherID, buildID}, eval[[]string](b, `[...document.querySelectorAll('#builds tbody tr')].map(tr => tr.getAttribute('data-build'))`),
		"one row per build (the second attempt is the same build)")
	require.Contains(t, b.text("#builds"), "failed")
	require.Contains(t, b.text("#builds"), "succeeded")

	// Rotating the secret: the new one is shown once, the previous one is
	// still accepted for 24 hours.
	b.open("/o/acme/p/shop", "#webhook-form")
	b.submit("#webhook-rotate", "#new-webhook-secret")
	rotated := b.text("#new-webhook-secret-value")
	require.NotEqual(t, secret, rotated)
	require.Contains(t, b.text("#previous-secret"), "previous secret is still accepted until")
	require.Contains(t, b.text("#previous-secret"), "24 hours")
	require.Contains(t, b.text("#webhook-secret"), "the previous one is accepted until")
	status, answer = deliverGitHub(t, srv.URL+strings.TrimPrefix(hookURL, "http://127.0.0.1"), secret, githubPush(t))
	require.Equal(t, http.StatusOK, status, "the previous secret still signs: %s", answer)
	status, _ = deliverGitHub(t, srv.URL+strings.TrimPrefix(hookURL, "http://127.0.0.1"), "not-the-secret", githubPush(t))
	require.Equal(t, http.StatusUnauthorized, status)
	b.open("/o/acme/p/shop", "#deliveries")
	require.NotContains(t, eval[string](b, "document.documentElement.outerHTML"), rotated, "the new secret is shown once too")
	require.Equal(t, 2, eval[int](b, "document.querySelectorAll('#deliveries tbody tr').length"), "the refused delivery is not recorded")

	// 320 CSS pixels wide: the pages of builds reflow without scrolling
	// sideways.
	b.do(chromedp.EmulateViewport(320, 800))
	for _, path := range []string{"/o/acme/p/shop", "/o/acme/p/shop/e/staging/s/hello", "/o/acme/p/shop/e/staging/s/hello/b/" + buildID, otherPath} {
		b.open(path, "main")
		require.True(t, eval[bool](b, "document.documentElement.scrollWidth <= window.innerWidth"),
			"%s scrolls sideways at 320 px, past the edge: %v", path,
			eval[[]string](b, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
				.slice(0, 8).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))`))
	}
	b.do(chromedp.EmulateReset())

	// A build is shown under its own service only.
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects/shop/services", admin, map[string]any{"name": "other", "image": "registry.example.com/other@sha256:" + strings.Repeat("c", 64)}, nil))
	b.open("/o/acme/p/shop/e/staging/s/other/b/"+buildID, "#problem")
	require.Contains(t, b.text("#problem"), "There is no build")
}

// TestBuildFormsRefuseMissingCSRF: the builds' forms (track a branch,
// make or rotate the webhook's secret, cancel a build, deploy a Git
// service) refuse a request without the session's CSRF token, or with it
// from another site, and change nothing; a Viewer sees none of their
// buttons and the API refuses the Viewer's forged ones.
func TestBuildFormsRefuseMissingCSRF(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	admin := srv.Setup(t, "ada@example.com", "acme")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", admin, map[string]any{"email": "vic@example.com", "password": password}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", admin, map[string]any{"email": "vic@example.com", "role": "viewer"}, nil))
	org := srv.URL + "/api/v1/orgs/acme"
	shop := org + "/projects/shop"
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/clusters", admin, map[string]any{"name": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", org+"/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", shop+"/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", shop+"/services", admin,
		map[string]any{"name": "hello", "gitUrl": "https://github.com/Codertocat/Hello-World.git", "gitBranch": "master", "port": 8080}, nil))
	var dep struct{ Build struct{ ID, Status string } }
	target := shop + "/environments/staging/services/hello"
	require.Equal(t, http.StatusAccepted, apiCall(t, "POST", target+"/deployments", admin, map[string]any{}, &dep))
	buildID := dep.Build.ID
	require.NotEmpty(t, buildID)

	// What each refused form could have changed, as the API shows it.
	type state struct {
		tracking string
		webhook  bool
		build    string
		builds   int
	}
	now := func() state {
		t.Helper()
		var tr struct{ Branch string }
		require.Equal(t, http.StatusOK, apiCall(t, "GET", target+"/tracking", admin, nil, &tr))
		var wh struct{ SecretSet bool }
		require.Equal(t, http.StatusOK, apiCall(t, "GET", shop+"/webhook", admin, nil, &wh))
		var b struct{ Status string }
		require.Equal(t, http.StatusOK, apiCall(t, "GET", org+"/builds/"+buildID, admin, nil, &b))
		return state{tr.Branch, wh.SecretSet, b.Status, len(items(t, shop+"/builds", admin))}
	}
	require.Eventually(t, func() bool { return now().build == "running" }, 20*time.Second, 50*time.Millisecond)
	before := now()
	require.Equal(t, state{"master", false, "running", 1}, before)

	page := "/o/acme/p/shop/e/staging/s/hello"
	forms := []struct {
		path string
		form url.Values
	}{
		{page + "/tracking", url.Values{"branch": {"evil"}}},
		{page + "/tracking", url.Values{"none": {"yes"}}},
		{"/o/acme/p/shop/webhook/rotate", nil},
		{page + "/b/" + buildID + "/cancel", nil},
		{page + "/deploy", url.Values{"commit": {strings.Repeat("e", 40)}}},
	}
	ada := newWebClient(t, srv.URL)
	resp, _ := ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	token := ada.csrf(page)
	for _, f := range forms {
		for name, h := range map[string]map[string]string{
			"no token":            nil,
			"from another origin": {"X-CSRF-Token": token, "Origin": "https://evil.example"},
		} {
			resp, body := ada.post(f.path, f.form, h)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s %s", f.path, name)
			require.Contains(t, body, "CSRF token missing or wrong")
		}
	}
	require.Equal(t, before, now(), "no refused form changed anything")

	// A Viewer sees the builds and the webhook, none of the buttons, and
	// the API refuses the Viewer's forms with a valid token.
	vic := newWebClient(t, srv.URL)
	resp, _ = vic.signIn("vic@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, html := vic.get(page)
	require.Contains(t, html, `data-build="`+buildID+`"`)
	for _, id := range []string{`id="deploy-form"`, `id="track-form"`} {
		require.NotContains(t, html, id)
	}
	resp, html = vic.get(page + "/b/" + buildID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, html, "running")
	require.NotContains(t, html, `id="cancel-form"`, "no Cancel without builds:write")
	_, html = vic.get("/o/acme/p/shop")
	require.Contains(t, html, `id="webhook-url"`)
	require.NotContains(t, html, `id="webhook-form"`)
	vicToken := vic.csrf(page)
	for _, f := range forms {
		form := url.Values{"csrf": {vicToken}}
		for k, v := range f.form {
			form[k] = v
		}
		resp, _ := vic.post(f.path, form, nil)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s as a Viewer", f.path)
	}
	require.Equal(t, before, now(), "the Viewer's forms changed nothing")

	// With the token, each works.
	resp, _ = ada.post(page+"/tracking", url.Values{"branch": {"release"}, "csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, html = ada.post("/o/acme/p/shop/webhook/rotate", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, regexp.MustCompile(`id="new-webhook-secret-value">nbh_`), html)
	resp, _ = ada.post(page+"/b/"+buildID+"/cancel", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, page+"/b/"+buildID, resp.Header.Get("Location"))
	require.Equal(t, state{"release", true, "cancelled", 1}, now())
}
