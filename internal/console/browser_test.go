package console_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// axe-core 4.14.1 (npm package axe-core, MPL-2.0), vendored: run on every
// page the browser test visits.
//
//go:embed testdata/axe.min.js
var axeSource string

const password = "correct horse battery staple"

// chromiumPath finds the Debian chromium (task deps installs it); without
// it the browser tests fail, never skip.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run `go tool task deps` (scripts/ensure-chromium.sh)")
	return ""
}

// apiCall is a plain API request, for what the test sets up outside the
// browser (users) and checks behind it.
func apiCall(t *testing.T, method, url, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = strings.NewReader(string(b))
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(b, out), string(b))
	}
	return resp.StatusCode
}

// protocolAgent is an agent over the real protocol: the transport client
// the real agent uses, registered with a join token and connected to the
// control plane's real websocket hub. It acknowledges every desired state
// and reports rollout stages when the test says so; no Kubernetes cluster
// runs behind it (the agent's own tests cover that, agent/rollout_e2e_test.go).
type protocolAgent struct {
	t      *testing.T
	client *transport.Client
	mu     sync.Mutex
	seen   map[string]bool
	fresh  chan deliveredRelease
}

type deliveredRelease struct {
	env, deployment, service string
	release                  int
}

func joinProtocolAgent(t *testing.T, url, joinToken, name, version string) *protocolAgent {
	t.Helper()
	reg, err := transport.Register(t.Context(), url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
	require.NoError(t, err)
	a := &protocolAgent{t: t, seen: map[string]bool{}, fresh: make(chan deliveredRelease, 16)}
	up := true
	welcomed := make(chan struct{})
	var once sync.Once
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: reg.Credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: version, Arch: "amd64", Applied: map[string]int{},
				Upgradable: &up, Facts: transport.Facts{Hostname: name}}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			a.mu.Lock()
			for _, s := range ds.Document.Services {
				if s.Release != nil && s.Release.DeploymentID != "" && !a.seen[s.Release.DeploymentID] {
					a.seen[s.Release.DeploymentID] = true
					a.fresh <- deliveredRelease{env: ds.EnvironmentID, deployment: s.Release.DeploymentID, service: s.Name, release: s.Release.Number}
				}
			}
			a.mu.Unlock()
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash}
		},
		OnConnected: func(transport.Welcome) { once.Do(func() { close(welcomed) }) },
		Upgrade:     func(transport.AgentUpgrade) {},
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
		t.Fatal("the protocol-level agent did not connect")
	}
	return a
}

// next waits for the next release delivered to the agent.
func (a *protocolAgent) next() deliveredRelease {
	a.t.Helper()
	select {
	case d := <-a.fresh:
		return d
	case <-time.After(30 * time.Second):
		a.t.Fatal("no release was delivered to the agent")
	}
	return deliveredRelease{}
}

// rollout reports a release's stages, as a successful rollout does, a
// moment apart so that a page can be seen receiving them one by one.
func (a *protocolAgent) rollout(d deliveredRelease, gap time.Duration) {
	a.t.Helper()
	for i, stage := range []string{"starting", "probing", "switching", "retiring", "succeeded"} {
		time.Sleep(gap)
		ready := min(i, 2)
		require.NoError(a.t, a.client.Send(transport.TypeStage, transport.StageReport{EnvironmentID: d.env, DeploymentID: d.deployment,
			Service: d.service, Release: d.release, Stage: stage, Ready: ready, Desired: 2, Time: time.Now()}))
	}
}

// browser drives one Chromium tab.
type browser struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, steps...))
}

func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	require.NoError(b.t, err, js)
	return v
}

// waitJS waits until the expression is true in the page.
func (b *browser) waitJS(js, what string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("!!("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	body := eval[string](b, "document.body.innerText")
	b.t.Fatalf("waiting for %s (%s); the page says:\n%s", what, js, body)
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	return eval[string](b, "(document.querySelector("+jsString(sel)+")||{}).innerText||''")
}

func (b *browser) has(sel string) bool {
	b.t.Helper()
	return eval[bool](b, "document.querySelector("+jsString(sel)+") !== null")
}

func jsString(s string) string {
	j, _ := json.Marshal(s)
	return string(j)
}

// visit checks the page as it stands: no serious or critical axe-core
// violation, no CSP violation, and writes its screenshot.
func (b *browser) visit(name string) {
	b.t.Helper()
	if !eval[bool](b, "typeof axe !== 'undefined'") {
		eval[bool](b, axeSource+";true")
	}
	violations := eval[[]string](b, `axe.run(document, {resultTypes: ['violations']}).then(r => r.violations
		.filter(v => v.impact === 'serious' || v.impact === 'critical')
		.map(v => v.impact + ' ' + v.id + ': ' + v.help + ' at ' + v.nodes.map(n => n.target.join(' ')).join(', ')))`)
	require.Empty(b.t, violations, "axe-core on the %s page", name)
	require.Equal(b.t, 0, eval[int](b, "window.__cspViolations || 0"), "CSP violations on the %s page", name)
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

func (b *browser) open(path, waitFor string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS(waitFor)))
	b.watchCSP()
}

// watchCSP counts the page's Content-Security-Policy violations: the
// console has no inline script or style, so there must be none.
func (b *browser) watchCSP() {
	eval[bool](b, `window.__cspViolations = window.__cspViolations || 0;
		document.addEventListener('securitypolicyviolation', () => { window.__cspViolations++; }); true`)
}

func (b *browser) fill(sel, value string) {
	b.t.Helper()
	b.do(chromedp.SetValue(chromedp.CSS(sel), value))
}

// submit clicks a button and waits for the page that answers.
func (b *browser) submit(button, waitFor string) {
	b.t.Helper()
	// The page that answers is a new document: wait for it, not for an
	// element the page before also had.
	eval[bool](b, "window.__before = true; true")
	b.do(chromedp.Click(chromedp.CSS(button)))
	b.waitJS("window.__before === undefined && document.readyState !== 'loading' && document.querySelector("+jsString(waitFor)+")", "the answer to "+button)
	b.do(chromedp.WaitVisible(chromedp.CSS(waitFor)))
	b.watchCSP()
}

func (b *browser) signIn(email, path, waitFor string) {
	b.t.Helper()
	b.open("/signin?next="+path, "#signin-form")
	b.fill("#email", email)
	b.fill("#password", password)
	b.submit("#signin", waitFor)
}

func (b *browser) signOut() {
	b.t.Helper()
	b.submit("#signout", "#signin-form")
}

// post sends a form POST from the page, as a forged form or script would,
// with the page's CSRF token when withToken; it returns the status.
func (b *browser) post(path string, fields map[string]string, withToken bool) int {
	b.t.Helper()
	f, _ := json.Marshal(fields)
	tok := "''"
	if withToken {
		tok = `document.querySelector('meta[name="csrf-token"]').content`
	}
	return eval[int](b, fmt.Sprintf(`(async () => {
		const body = new URLSearchParams(%s);
		if (%s) body.set('csrf', %s);
		const r = await fetch(%s, {method: 'POST', body, redirect: 'manual'});
		return r.type === 'opaqueredirect' ? 303 : r.status;
	})()`, f, tok, tok, jsString(path)))
}

// screenshots is where the browser tests write their screenshots.
func screenshots(t *testing.T) string {
	t.Helper()
	shots := os.Getenv("NEBULACTRL_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(shots, 0o755))
	return shots
}

// startBrowser starts a headless Chromium of its own for the test.
func startBrowser(t *testing.T, chrome, base, shots string) *browser {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	// The first run starts the browser, on a context without a deadline.
	require.NoError(t, chromedp.Do(ctx))
	return &browser{t: t, ctx: ctx, base: base, shots: shots}
}

// TestConsoleInChromium drives the console in headless Chromium against a
// real control plane (real PostgreSQL, the real websocket hub, a real
// in-process image registry), with an agent over the real protocol that
// reports rollout stages (no Kubernetes cluster behind it). axe-core runs on
// every page; screenshots go to $NEBULACTRL_SCREENSHOTS (or a temporary
// directory).
func TestConsoleInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	regHost := registrytest.Start(t)
	bins := t.TempDir()
	for _, arch := range agentbin.Arches {
		require.NoError(t, os.WriteFile(filepath.Join(bins, agentbin.FileName(arch)), []byte("agent 1.5.0 for "+arch), 0o600))
	}
	srv := servertest.Start(t, servertest.Options{Insecure: []string{regHost}, Version: "1.5.0", AgentBinaries: agentbin.Dir(bins)})
	admin := srv.Setup(t, "ada@example.com", "acme")
	for _, u := range []struct{ email, role string }{{"bob@example.com", "admin"}, {"vic@example.com", "viewer"}} {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", admin, map[string]any{"email": u.email, "password": password}, nil))
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", admin, map[string]any{"email": u.email, "role": u.role}, nil))
	}

	b := startBrowser(t, chrome, srv.URL, shots)

	// Sign in; the overview's empty states tell the next step.
	b.open("/", "#signin-form")
	b.visit("signin")
	b.fill("#email", "ada@example.com")
	b.fill("#password", "wrong password, twelve+")
	b.submit("#signin", "#problem")
	require.Contains(t, b.text("#problem"), "e-mail address or password")
	b.fill("#email", "ada@example.com")
	b.fill("#password", password)
	b.submit("#signin", "#no-projects")
	require.Contains(t, b.text("#no-clusters"), "nebula cluster manifest acme/eu-1 | kubectl apply -f -")
	require.Equal(t, "ada@example.com", b.text("#whoami"))
	require.True(t, eval[bool](b, `JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRF-Token'] === document.querySelector('meta[name="csrf-token"]').content`),
		"htmx sends the session's CSRF token with every request")
	b.visit("overview-empty")

	// The instance administrator turns the automatic agent upgrade off (the
	// agent below is to be upgraded by hand, on the Servers page).
	b.open("/instance", "#auto-upgrade")
	require.True(t, eval[bool](b, "document.querySelector('#agentAutoUpgrade').checked"), "on by default")
	b.do(chromedp.Click(chromedp.CSS("#agentAutoUpgrade")))
	b.submit("#auto-upgrade button", ".notice")
	require.Contains(t, b.text(".notice"), "Automatic upgrade off")
	require.False(t, eval[bool](b, "document.querySelector('#agentAutoUpgrade').checked"))

	// A cluster, created in Settings: its join token is shown once; the
	// agent joins with it.
	b.open("/o/acme/settings", "#new-cluster")
	b.fill("#c-name", "eu-1")
	b.submit("#new-cluster button", "#new-join-token")
	b.visit("settings-join-token")
	m := regexp.MustCompile(`join-token=(\S+)`).FindStringSubmatch(b.text("#new-join-token"))
	require.NotNil(t, m, "the join token is shown")
	agent := joinProtocolAgent(t, srv.URL, m[1], "eu-1-a", "1.4.0")
	b.open("/o/acme/settings", "#members")
	require.False(t, b.has("#new-join-token"), "a join token is shown once")

	// A project, an environment and a service.
	b.open("/o/acme", "#new-project")
	b.waitJS(`document.querySelector('#clusters') && document.querySelector('#clusters').innerText.includes('Connected')`, "the cluster shows Connected")
	b.fill("#project-name", "shop")
	b.submit("#new-project button", "#new-env")
	require.Contains(t, b.text("#matrix-empty"), "No environment yet")
	b.fill("#env-name", "staging")
	b.submit("#new-env button", "#env-name")
	b.fill("#svc-name", "api")
	b.fill("#svc-image", regHost+"/api:v1")
	b.fill("#svc-port", "8080")
	b.submit("#new-service button", "#matrix")
	b.visit("project")

	// Deploy, and watch the stages arrive without a reload.
	b.submit(`#matrix a[data-cell="api/staging"]`, "#deploy-form")
	b.visit("service")
	b.submit("#deploy", "#stages")
	d := agent.next()
	b.waitJS(`document.querySelector('#deployment')`, "the deployment page")
	eval[bool](b, "window.__sameDocument = true; true")
	b.waitJS(`document.querySelector('#stream-state').innerText.includes('Following')`, "the page follows the deployment")
	time.Sleep(300 * time.Millisecond) // the stream is open before the first stage
	agent.rollout(d, 150*time.Millisecond)
	b.waitJS(`document.querySelector('#dep-status').innerText === 'succeeded' && document.querySelector('#stages').innerText.includes('succeeded')`, "the deployment succeeds on the page")
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "the stages arrived without a reload")
	stages := b.text("#stages")
	for _, s := range []string{"starting", "probing", "switching", "retiring", "succeeded"} {
		require.Contains(t, stages, s)
	}
	require.Equal(t, "2/2", b.text("#dep-pods"))
	require.Contains(t, b.text("#stream-state"), "ended")
	b.visit("deployment")

	// The service's logs arrive on its page without a reload (htmx
	// refreshes the fragment).
	b.open("/o/acme/p/shop/e/staging/s/api", "#deploy-form")
	b.waitJS(`document.querySelector('#logs .empty')`, "the logs fragment loads")
	eval[bool](b, "window.__sameDocument = true; true")
	require.NoError(t, agent.client.Send(transport.TypeLogs, transport.Logs{EnvironmentID: d.env, Service: "api", Release: 1, Pod: "api-web-1", Container: "web",
		Lines: []transport.LogLine{{Time: time.Now(), Stream: "stdout", Text: "listening on :8080"}}}))
	b.waitJS(`document.querySelector('#logs pre') && document.querySelector('#logs pre').innerText.includes('listening on :8080')`, "the log line on the page")
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "the log line arrived without a reload")

	// A second release, then roll back to the first.
	b.submit("#deploy", "#stages")
	agent.rollout(agent.next(), 0)
	b.waitJS(`document.querySelector('#dep-status').innerText === 'succeeded'`, "release 2 succeeds")
	b.open("/o/acme/p/shop/e/staging/s/api", "#releases")
	b.submit("#rollback-1", "#stages")
	require.Contains(t, b.text("h1"), "(roll back)")
	agent.rollout(agent.next(), 0)
	b.waitJS(`document.querySelector('#dep-status').innerText === 'succeeded'`, "the roll back succeeds")
	b.open("/o/acme/p/shop/e/staging/s/api", "#releases")
	require.Contains(t, b.text("#deploys-paused"), "paused", "a roll back pauses automatic deploys")
	require.True(t, b.has("#resume"))

	// What ran in staging, and what changed since its first revision.
	b.open("/o/acme/p/shop/e/staging?compare=1", "#ran")
	require.Contains(t, b.text("#ran"), "api")
	require.Contains(t, b.text("#revision-diff"), "api: ")
	b.visit("environment")
	b.open("/o/acme/p/shop/e/staging?at=2000-01-01T00:00:00Z", "#what-ran")
	require.Contains(t, b.text("#problem"), "revision")

	// A protected environment: the deploy waits in a change set that its
	// requester cannot approve.
	b.open("/o/acme/p/shop", "#new-env")
	b.fill("#env-name", "production")
	b.do(chromedp.Click(chromedp.CSS("#env-protected")))
	b.submit("#new-env button", `#matrix a[data-cell="api/production"]`)
	b.open("/o/acme/p/shop/e/production/s/api", "#deploy-form")
	b.submit("#deploy", "#diff")
	require.True(t, b.has("#own-changeset"))
	require.Contains(t, b.text("#cs-expires"), "UTC", "the change set says when it expires")
	require.False(t, b.has("#approve"), "no Approve button for the requester")
	csPath := eval[string](b, "location.pathname")
	version := regexp.MustCompile(`\d+`).FindString(eval[string](b, `[...document.querySelectorAll('.facts dt')].find(e => e.innerText === 'Version').nextElementSibling.innerText`))
	require.Equal(t, http.StatusForbidden, b.post(csPath+"/approve", map[string]string{"version": version}, true), "the requester's forged approval is refused")
	b.open(csPath, "#diff")
	require.Equal(t, "open", b.text("#cs-status"))
	b.visit("changeset-requester")
	b.open("/instance", "#auto-upgrade")
	b.visit("instance")
	b.signOut()

	// A second user approves it.
	b.signIn("bob@example.com", csPath, "#approve")
	b.visit("changeset")
	b.submit("#approve", ".notice")
	require.Equal(t, "approved", b.text("#cs-status"))
	agent.rollout(agent.next(), 0)

	// The audit log, filtered (htmx swaps the rows in place).
	b.open("/o/acme/audit", "#audit")
	b.fill("#f-action", "changeset.*")
	b.do(chromedp.Click(chromedp.CSS("#filter")))
	b.waitJS(`[...document.querySelectorAll('#audit tbody tr td:nth-child(3)')].every(td => td.innerText.startsWith('changeset.')) &&
		document.querySelector('#audit').innerText.includes('changeset.approve')`, "only change set entries")
	require.Contains(t, eval[string](b, "location.search"), "action=changeset", "the filter is in the URL")
	b.visit("audit")

	// Servers: the skew, and Upgrade agent.
	b.open("/o/acme/servers", ".servers")
	require.Contains(t, b.text(".servers"), "Behind 1.5.0")
	b.visit("servers")
	b.submit(".servers button.upgrade", ".notice")
	require.Contains(t, b.text(".notice"), "Upgrade requested")

	// An API token: its secret is shown once.
	b.open("/o/acme/settings", "#new-token-form")
	b.fill("#t-name", "ci")
	b.submit("#new-token-form button", "#new-token")
	require.Regexp(t, `\S{20,}`, b.text("#new-token-value"))
	b.open("/o/acme/settings", "#tokens")
	require.False(t, b.has("#new-token"))
	b.visit("settings")

	// Bob's own deploy to production waits for someone else, who rejects it.
	b.open("/o/acme/p/shop/e/production/s/api", "#deploy-form")
	b.submit("#deploy", "#diff")
	require.True(t, b.has("#own-changeset"))
	rejectPath := eval[string](b, "location.pathname")
	b.signOut()
	b.signIn("ada@example.com", rejectPath, "#reject")
	b.fill("#reason", "not during the sale")
	b.submit("#reject", ".notice")
	require.Equal(t, "rejected", b.text("#cs-status"))
	require.False(t, b.has("#approve"), "a decided change set has no buttons")
	b.signOut()

	// A Viewer sees no write button, and a forged POST is refused.
	b.signIn("vic@example.com", "/o/acme/p/shop/e/staging/s/api", "#releases")
	require.False(t, b.has("#deploy-form"))
	require.False(t, b.has(".rollback"))
	require.Equal(t, http.StatusForbidden, b.post("/o/acme/p/shop/e/staging/s/api/deploy", nil, true), "the API refuses the viewer")
	require.Equal(t, http.StatusForbidden, b.post("/o/acme/p/shop/e/staging/s/api/deploy", nil, false), "no CSRF token")
	b.visit("service-viewer")
	b.open("/o/acme", "#projects")
	require.False(t, b.has("#new-project"))
	b.visit("overview")
	b.open("/o/acme/p/shop", "#matrix")
	require.False(t, b.has("#new-service"))

	// 320 CSS pixels wide (a phone, or 1280 pixels at 400 % zoom): every
	// page reflows without scrolling sideways.
	b.do(chromedp.EmulateViewport(320, 800))
	for _, path := range []string{"/o/acme", "/o/acme/p/shop", "/o/acme/p/shop/e/staging/s/api", "/o/acme/p/shop/e/staging", "/o/acme/servers", "/o/acme/settings", "/me"} {
		b.open(path, "main")
		require.True(t, eval[bool](b, "document.documentElement.scrollWidth <= window.innerWidth"),
			"%s scrolls sideways at 320 px: %d > %d, past the edge: %v", path, eval[int](b, "document.documentElement.scrollWidth"), eval[int](b, "window.innerWidth"),
			eval[[]string](b, `[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
				.slice(0, 8).map(e => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))`))
	}
	b.open("/o/acme/p/shop/e/staging/s/api", "main")
	b.visit("service-320px")
	b.do(chromedp.EmulateReset())

	var deps struct{ Items []map[string]any }
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/services/api/deployments", admin, nil, &deps))
	require.Len(t, deps.Items, 3, "the viewer's forged deploys changed nothing")
}
