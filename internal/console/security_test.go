package console_test

import (
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/console"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// webClient is a browser without JavaScript: a cookie jar, redirects not
// followed, so that each answer can be looked at.
type webClient struct {
	t    *testing.T
	base string
	http *http.Client
}

func newWebClient(t *testing.T, base string) *webClient {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &webClient{t: t, base: base, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (w *webClient) get(path string) (*http.Response, string) {
	w.t.Helper()
	resp, err := w.http.Get(w.base + path)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func (w *webClient) post(path string, form url.Values, header map[string]string) (*http.Response, string) {
	w.t.Helper()
	req, err := http.NewRequest("POST", w.base+path, strings.NewReader(form.Encode()))
	require.NoError(w.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := w.http.Do(req)
	require.NoError(w.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// signIn signs in through the form and returns the session cookie's Set-Cookie.
func (w *webClient) signIn(email, pw string) (*http.Response, string) {
	w.t.Helper()
	_, page := w.get("/signin")
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(w.t, m, "the sign-in form carries a CSRF token")
	return w.post("/signin", url.Values{"csrf": {m[1]}, "email": {email}, "password": {pw}, "next": {"/o/acme"}}, nil)
}

func (w *webClient) csrf(path string) string {
	w.t.Helper()
	_, page := w.get(path)
	m := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)">`).FindStringSubmatch(page)
	require.NotNil(w.t, m, "the page carries the session's CSRF token")
	return m[1]
}

func sessionCookie(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == "nebulactrl_session" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", resp.Header.Values("Set-Cookie"))
	return nil
}

// TestConsoleSecurity checks the console's defences against a real control
// plane: cookie flags, headers, cache-busted static files, CSRF on every
// state change, Origin, secrets never sent, sign-out revoking the session,
// and sign-in throttled like the API's.
func TestConsoleSecurity(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	admin := srv.Setup(t, "ada@example.com", "acme")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", admin, map[string]any{"email": "vic@example.com", "password": password}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", admin, map[string]any{"email": "vic@example.com", "role": "viewer"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", admin, map[string]any{"name": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/services", admin, map[string]any{"name": "api", "image": "registry.example.com/api@sha256:" + strings.Repeat("a", 64)}, nil))
	const secret = "hunter2-the-database-password"
	require.Equal(t, http.StatusOK, apiCall(t, "PUT", srv.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/services/api/variables", admin,
		map[string]any{"variables": []map[string]any{{"name": "DB_PASSWORD", "value": secret, "secret": true}, {"name": "MODE", "value": "plain-value"}}}, nil))

	ada := newWebClient(t, srv.URL)
	// Without a session, a page sends to the sign-in form.
	resp, _ := ada.get("/o/acme")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/signin?next=%2Fo%2Facme", resp.Header.Get("Location"))

	// A sign-in form posted without its token (login CSRF) is refused.
	resp, _ = ada.post("/signin", url.Values{"email": {"ada@example.com"}, "password": {password}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	resp, _ = ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/o/acme", resp.Header.Get("Location"))
	ck := sessionCookie(t, resp)
	require.True(t, ck.HttpOnly)
	require.Equal(t, http.SameSiteLaxMode, ck.SameSite)
	require.False(t, ck.Secure, "plain HTTP on loopback: not Secure")
	require.Equal(t, "/", ck.Path)

	resp, page := ada.get("/o/acme/p/shop/e/staging/s/api")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, console.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"))
	require.Contains(t, console.ContentSecurityPolicy, "script-src 'self'")
	require.NotContains(t, console.ContentSecurityPolicy, "unsafe-inline")
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	require.NotContains(t, page, secret, "a secret's value never reaches the browser")
	require.Contains(t, page, "DB_PASSWORD")
	require.Contains(t, page, "plain-value")

	// Static files: named by their content's hash, cached for a year.
	m := regexp.MustCompile(`src="(/static/([0-9a-f]{16})/app\.js)"`).FindStringSubmatch(page)
	require.NotNil(t, m)
	resp, body := ada.get(m[1])
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "public, max-age=31536000, immutable", resp.Header.Get("Cache-Control"))
	require.Contains(t, resp.Header.Get("Content-Type"), "javascript")
	want, err := os.ReadFile(filepath.Join("static", "app.js"))
	require.NoError(t, err)
	require.Equal(t, string(want), body)
	resp, _ = ada.get("/static/0000000000000000/app.js")
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), "another hash is not cached under its name")
	resp, _ = ada.get("/static/" + m[2] + "/nothing.js")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	// CSRF: a state change without the session's token, with another
	// session's, or from another origin changes nothing.
	token := ada.csrf("/o/acme")
	vic := newWebClient(t, srv.URL)
	resp, _ = vic.signIn("vic@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	vicToken := vic.csrf("/o/acme")
	require.NotEqual(t, token, vicToken)
	for name, try := range map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"no token":              {url.Values{"name": {"evil"}}, nil},
		"another session's":     {url.Values{"name": {"evil"}, "csrf": {vicToken}}, nil},
		"wrong header token":    {url.Values{"name": {"evil"}}, map[string]string{"X-CSRF-Token": vicToken}},
		"from another origin":   {url.Values{"name": {"evil"}, "csrf": {token}}, map[string]string{"Origin": "https://evil.example"}},
		"header from elsewhere": {url.Values{"name": {"evil"}}, map[string]string{"X-CSRF-Token": token, "Origin": "http://evil.example"}},
	} {
		resp, _ := ada.post("/o/acme/projects", try.form, try.header)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
	}
	var projects struct{ Items []struct{ Name string } }
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/projects", admin, nil, &projects))
	require.Len(t, projects.Items, 1, "no refused request created a project")
	// The right token in the form, or in htmx's header, is accepted.
	resp, _ = ada.post("/o/acme/projects", url.Values{"name": {"web"}, "csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = ada.post("/o/acme/projects", url.Values{"name": {"docs"}}, map[string]string{"X-CSRF-Token": token, "Origin": srv.URL})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/projects", admin, nil, &projects))
	require.Len(t, projects.Items, 3)

	// A Viewer's valid form is refused by the API's scopes: 403, nothing made.
	resp, page = vic.post("/o/acme/projects", url.Values{"name": {"viewer-made"}, "csrf": {vicToken}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, page, "projects:write")
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/projects", admin, nil, &projects))
	require.Len(t, projects.Items, 3)

	// The project matrix shows 50 services at a time, following the API's
	// pages.
	for i := range 50 {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/services", admin,
			map[string]any{"name": fmt.Sprintf("svc-%02d", i), "image": "registry.example.com/api@sha256:" + strings.Repeat("b", 64)}, nil))
	}
	resp, page = ada.get("/o/acme/p/shop")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 50, strings.Count(page, "<th scope=\"row\">"))
	next := regexp.MustCompile(`href="(/o/acme/p/shop\?cursor=[^"]+)" id="next-services"`).FindStringSubmatch(page)
	require.NotNil(t, next, "a link to the next services")
	resp, page = ada.get(html.UnescapeString(next[1]))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 1, strings.Count(page, "<th scope=\"row\">"))
	require.NotContains(t, page, `id="next-services"`)

	// A notice comes only from the console's own redirect (a cookie read
	// once), never from the address.
	_, page = ada.get("/o/acme?notice=Your+session+expired%2C+sign+in+at+evil.example")
	require.NotContains(t, page, "evil.example")

	// An API token made and revoked in Settings; a member's role changed.
	resp, page = ada.post("/o/acme/settings/tokens", url.Values{"name": {"ci"}, "scope": {"projects:read"}, "csrf": {token}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, `id="new-token-value">nbl_`, page, "the secret, once")
	var toks struct {
		Items []struct {
			ID, Name  string
			RevokedAt *string
		}
	}
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/tokens", ck.Value, nil, &toks))
	id := ""
	for _, tk := range toks.Items {
		if tk.Name == "ci" {
			id = tk.ID
		}
	}
	require.NotEmpty(t, id)
	resp, _ = ada.post("/o/acme/settings/tokens/"+id+"/revoke", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/tokens", ck.Value, nil, &toks))
	for _, tk := range toks.Items {
		if tk.ID == id {
			require.NotNil(t, tk.RevokedAt, "the token is revoked")
		}
	}
	var members struct {
		Items []struct{ UserID, Email, Role string }
	}
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/members", admin, nil, &members))
	vicID := ""
	for _, m := range members.Items {
		if m.Email == "vic@example.com" {
			vicID = m.UserID
		}
	}
	resp, _ = vic.post("/o/acme/settings/members/"+vicID+"/role", url.Values{"role": {"owner"}, "csrf": {vicToken}}, nil)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "a viewer cannot promote themselves")
	resp, _ = ada.post("/o/acme/settings/members/"+vicID+"/role", url.Values{"role": {"member"}, "csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/members", admin, nil, &members))
	for _, m := range members.Items {
		if m.Email == "vic@example.com" {
			require.Equal(t, "member", m.Role)
		}
	}

	// Switching organisation: the header lists them once there are two.
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs", admin, map[string]any{"name": "beta"}, nil))
	_, page = ada.get("/me")
	require.Contains(t, page, `<option value="beta"`)
	resp, _ = ada.get("/switch?org=beta")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/o/beta", resp.Header.Get("Location"))
	resp, _ = ada.get("/switch?org=nope")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = vic.get("/switch?org=beta")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "not a member of beta")

	// Signing out revokes the session: its cookie no longer works.
	resp, _ = ada.post("/signout", url.Values{"csrf": {token}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, http.StatusUnauthorized, apiCall(t, "GET", srv.URL+"/api/v1/me", ck.Value, nil, nil), "the session token is revoked")
	replay := newWebClient(t, srv.URL)
	u, _ := url.Parse(srv.URL)
	replay.http.Jar.SetCookies(u, []*http.Cookie{{Name: "nebulactrl_session", Value: ck.Value}})
	resp, _ = replay.get("/o/acme")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/signin"))

	// Sign-in is throttled as the API's is (10 failures per address and
	// client address): the eleventh attempt is 429, even with the password.
	mallory := newWebClient(t, srv.URL)
	for range 10 {
		resp, _ := mallory.signIn("vic@example.com", "not the password at all")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	resp, page = mallory.signIn("vic@example.com", password)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Contains(t, page, "too many failed sign-in attempts")

	// Served over TLS (or an https public URL), the cookie is Secure.
	proxy := httputil.NewSingleHostReverseProxy(u)
	con, err := console.New(console.Config{API: proxy, Secure: true})
	require.NoError(t, err)
	ts := httptest.NewTLSServer(con.Handler())
	t.Cleanup(ts.Close)
	tlsClient := newWebClient(t, ts.URL)
	tlsClient.http.Transport = ts.Client().Transport
	resp, _ = tlsClient.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, sessionCookie(t, resp).Secure)
}

// TestTemplatesHaveNothingInline keeps the templates within the CSP: no
// inline script, style or event handler, no javascript: URL.
func TestTemplatesHaveNothingInline(t *testing.T) {
	files, err := filepath.Glob("templates/*.html")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	bad := regexp.MustCompile(`(?i)<script(\s[^>]*)?>[^<]|<script>|<style|\sstyle=|\son[a-z]+=|javascript:|hx-on`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Empty(t, bad.FindAllString(string(b), -1), f)
		for _, s := range regexp.MustCompile(`<script[^>]*>`).FindAllString(string(b), -1) {
			require.Contains(t, s, `src="{{asset`, "%s: scripts come from the static files", f)
		}
	}
}
