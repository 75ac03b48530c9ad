// Package console is the control plane's web console, served by `nebula
// serve` at /: server-rendered pages (html/template, embedded), htmx for
// partial updates (the npm package htmx.org 2.0.11, vendored into static/)
// and server-sent events for the live parts.
//
// The console adds no behaviour of its own. Every read and every action is a
// request to the API's own handler, in process, with the session's token:
// the same route table, scopes, commands, validation and audit log (with the
// request's id) as `curl` or the CLI. The live parts are the API's own
// event-stream routes, answered straight to the browser.
//
// Security: the session token lives in an HttpOnly, SameSite=Lax cookie
// (Secure over TLS or when the public URL is https); every form and htmx
// request carries a CSRF token derived from the session and checked in
// constant time; the Content-Security-Policy allows no inline script or
// style; pages hide what the caller's role cannot do, and the API refuses
// it anyway.
package console

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
)

//go:embed static/*.js static/*.css
var staticFS embed.FS

//go:embed templates/*.html
var templateFS embed.FS

// Cookie names.
const (
	sessionCookie = "nebulactrl_session"
	// loginCSRFCookie guards the sign-in form, before there is a session
	// (double submit: the form's field must equal the cookie).
	loginCSRFCookie = "nebulactrl_signin"
	csrfField       = "csrf"
	csrfHeader      = "X-CSRF-Token"
)

// ContentSecurityPolicy is sent with every console answer: nothing inline,
// nothing from elsewhere.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

// Config is what the console needs.
type Config struct {
	// API is the API's handler (api.API.Handler()): the console's only way
	// to the control plane's data and commands.
	API http.Handler
	// Secure marks the session cookie Secure (the control plane serves TLS
	// or its public URL is https); requests that came over TLS get it anyway.
	Secure bool
	// PublicURL is where browsers and agents reach the control plane (shown
	// in the first cluster's install command).
	PublicURL string
	Version   string
	// ApprovalTTL is how long a change set stays open (NEBULACTRL_APPROVAL_TTL;
	// default 72 h): the change set page shows when it expires.
	ApprovalTTL time.Duration
	Logger      *slog.Logger
	Now         func() time.Time
}

// Console serves the web console.
type Console struct {
	cfg    Config
	mux    *http.ServeMux
	pages  map[string]*template.Template
	assets map[string]asset
	log    *slog.Logger
	// patterns are the routes registered on mux.
	patterns []string
}

type asset struct {
	hash, ctype string
	body        []byte
}

// New returns the console.
func New(cfg Config) (*Console, error) {
	if cfg.API == nil {
		return nil, errors.New("console: no API handler")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = 72 * time.Hour
	}
	c := &Console{cfg: cfg, mux: http.NewServeMux(), assets: map[string]asset{}, log: cfg.Logger}
	entries, err := fs.ReadDir(staticFS, "static")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		b, err := staticFS.ReadFile("static/" + e.Name())
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(e.Name()))
		if strings.HasSuffix(e.Name(), ".js") {
			ct = "text/javascript; charset=utf-8"
		}
		c.assets[e.Name()] = asset{hash: hex.EncodeToString(sum[:])[:16], ctype: ct, body: b}
	}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Handler serves the console; mount it at /.
func (c *Console) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		c.mux.ServeHTTP(w, r)
	})
}

// assetURL is the URL of a static file, named by its content's hash so that
// it can be cached for a year and still change with a new version.
func (c *Console) assetURL(name string) string {
	a, ok := c.assets[name]
	if !ok {
		panic("console: no static file " + name)
	}
	return "/static/" + a.hash + "/" + name
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	a, ok := c.assets[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	if r.PathValue("hash") == a.hash {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		// An older or newer replica's page asked: answer what we have,
		// without letting it be cached under the other hash.
		w.Header().Set("Cache-Control", "no-cache")
	}
	w.Header().Set("ETag", `"`+a.hash+`"`)
	if r.Header.Get("If-None-Match") == `"`+a.hash+`"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(a.body)
}

// secure says whether cookies set in answer to r are Secure.
func (c *Console) secure(r *http.Request) bool {
	return c.cfg.Secure || r.TLS != nil
}

// csrfToken is the session's CSRF token: derived from the session token
// (which only the browser's HttpOnly cookie holds), so it needs no storage,
// is the same on every replica and dies with the session.
func csrfToken(session string) string {
	sum := sha256.Sum256([]byte("nebulactrl console csrf\x00" + session))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// checkCSRF checks a state-changing request's CSRF token (form field or
// header) against the session's, in constant time, and refuses a request
// whose Origin names another site.
func checkCSRF(r *http.Request, session string) bool {
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		if !sameOrigin(o, r) {
			return false
		}
	}
	got := r.Header.Get(csrfHeader)
	if got == "" {
		got = r.PostFormValue(csrfField)
	}
	want := csrfToken(session)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func sameOrigin(origin string, r *http.Request) bool {
	o := strings.TrimPrefix(strings.TrimPrefix(origin, "https://"), "http://")
	return o == r.Host
}

// apiResult is the answer of an in-process API request.
type apiResult struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (a *apiResult) Header() http.Header { return a.header }
func (a *apiResult) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}
func (a *apiResult) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
}

// apiError is the API's error answer, shown to the user as it is.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func asAPIError(err error) (*apiError, bool) {
	var ae *apiError
	ok := errors.As(err, &ae)
	return ae, ok
}

// call sends a request to the API's handler in process, as the session's
// user, from the browser's address (the sign-in throttling counts it), with
// the browser request's id. out receives the JSON answer.
func (c *Console) call(r *http.Request, token, method, p string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(r.Context(), method, p, rd)
	if err != nil {
		return 0, err
	}
	req.RemoteAddr = r.RemoteAddr
	req.TLS = r.TLS
	req.Host = r.Host
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if id := r.Header.Get("X-Request-Id"); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	res := &apiResult{header: http.Header{}}
	c.cfg.API.ServeHTTP(res, req)
	if res.status == 0 {
		res.status = http.StatusOK
	}
	if res.status >= 400 {
		var eb api.Error
		_ = json.Unmarshal(res.body.Bytes(), &eb)
		msg := eb.Error.Message
		if msg == "" {
			msg = http.StatusText(res.status)
		}
		return res.status, &apiError{Status: res.status, Code: eb.Error.Code, Message: msg}
	}
	if out != nil && res.body.Len() > 0 {
		if err := json.Unmarshal(res.body.Bytes(), out); err != nil {
			return res.status, fmt.Errorf("console: reading the API's answer to %s %s: %w", method, p, err)
		}
	}
	return res.status, nil
}

// stream answers r with an API event stream, in process: the API's own
// route writes straight to the browser (Last-Event-ID passed on).
func (c *Console) stream(w http.ResponseWriter, r *http.Request, token, p string) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, p, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.RemoteAddr, req.TLS, req.Host = r.RemoteAddr, r.TLS, r.Host
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	c.cfg.API.ServeHTTP(w, req)
}

// constantTimeEqual compares two secrets in constant time.
func constantTimeEqual(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}
