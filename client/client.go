// Package client is a typed HTTP client of the NebulaCtrl REST API
// (/api/v1), as the nebula command-line client uses it.
//
// Every method sends and receives JSON with the request and response types of
// packages api and query, so the client cannot drift from the server. A call
// the API refuses returns *Error with the API's status, code and message.
// Creating calls carry an Idempotency-Key that is new for each call but the
// same for every attempt of it, so the retries the client makes after a lost
// answer or a 502/503/504 never create twice. Responses are read up to a
// bound (16 MiB by default) and every request has a timeout.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of New.
const (
	// DefaultTimeout bounds one attempt of a call. Deploying waits for the
	// control plane to resolve the image at its registry, which may take
	// that registry's own timeout (20 s), so this is well above it.
	DefaultTimeout = 60 * time.Second
	// DefaultMaxResponseBytes bounds the body of a response that is read.
	DefaultMaxResponseBytes = 16 << 20
	// DefaultRetries is how many times a call that is safe to repeat is
	// repeated after a transport failure or a 502, 503 or 504.
	DefaultRetries = 2
)

// Error is an answer of the API that is not a success. Error() is the API's
// own message, meant for people; Code is for programs ("not_found",
// "validation_failed", ...).
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is the API's error code; "" when the answer was not the API's
	// error body (a proxy's error page, say).
	Code    string
	Message string
	// RequestID is the X-Request-Id of the answer, which the control
	// plane's log and audit log carry too.
	RequestID string
}

func (e *Error) Error() string { return e.Message }

// IsStatus reports whether err is an *Error with the given HTTP status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// Client calls one control plane with one token. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/prefix], no trailing slash
	token     string
	http      *http.Client
	userAgent string
	maxBody   int64
	retries   int
	backoff   time.Duration
	timeout   time.Duration
	// custom is the caller's *http.Client, from WithHTTPClient.
	custom *http.Client
	// pageSize is how many items a list asks for per page.
	pageSize int
}

// Option tunes a Client.
type Option func(*Client)

// WithVersion makes the User-Agent "nebula/<version>" (the default is nebula/dev).
func WithVersion(version string) Option {
	return func(c *Client) { c.userAgent = "nebula/" + version }
}

// WithUserAgent sets the whole User-Agent.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithTimeout bounds each attempt of a call (DefaultTimeout by default).
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithHTTPClient sends the requests through h's transport (its Timeout is
// replaced by the client's).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.custom = h } }

// WithMaxResponseBytes bounds the response bodies read.
func WithMaxResponseBytes(n int64) Option { return func(c *Client) { c.maxBody = n } }

// WithRetries sets how many times a call that is safe to repeat is repeated
// (0 disables retries) and the pause before the first repeat, which doubles
// for each further one.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) { c.retries, c.backoff = n, backoff }
}

// New returns a client of the control plane at baseURL (http or https, with
// or without a path prefix; a trailing /api/v1 is accepted) that presents
// token, which may be "" for the public calls Setup and Login.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	base, err := NormalizeURL(baseURL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		base: base, token: token, userAgent: "nebula/dev", maxBody: DefaultMaxResponseBytes,
		retries: DefaultRetries, backoff: 250 * time.Millisecond, timeout: DefaultTimeout,
	}
	for _, o := range opts {
		o(c)
	}
	h := &http.Client{}
	if c.custom != nil {
		copied := *c.custom
		h = &copied
	}
	h.Timeout = c.timeout
	c.http = h
	return c, nil
}

// NormalizeURL checks a control plane's URL and returns it in the form the
// client uses: no trailing slash, no trailing /api/v1.
func NormalizeURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", errors.New("no control plane URL given")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not a control plane URL: want http(s)://HOST[:PORT]", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not a control plane URL: it may not carry a user, query or fragment", raw)
	}
	p := strings.TrimRight(u.EscapedPath(), "/")
	p = strings.TrimSuffix(p, "/api/v1")
	return u.Scheme + "://" + u.Host + strings.TrimRight(p, "/"), nil
}

// URL is the control plane's URL the client calls.
func (c *Client) URL() string { return c.base }

type bodyKey struct{}

// CaptureBody returns a context with which a successful call also stores
// the response body, exactly as the API sent it, in *dst: for printing the
// API's own JSON. For a list, which the API sends in pages, it is the JSON
// array of every item read.
func CaptureBody(ctx context.Context, dst *[]byte) context.Context {
	return context.WithValue(ctx, bodyKey{}, dst)
}

// path joins an API path; every argument is one escaped path segment.
func path(format string, segments ...string) string {
	args := make([]any, len(segments))
	for i, s := range segments {
		args[i] = url.PathEscape(s)
	}
	return fmt.Sprintf(format, args...)
}

// request is one call.
type request struct {
	method string
	path   string // escaped, from path()
	query  url.Values
	in     any
	// creating calls get an Idempotency-Key.
	creating bool
	public   bool
}

// call sends a request and decodes a successful answer into out (unless out
// is nil or the answer has no body); it returns the status.
func (c *Client) call(ctx context.Context, r request, out any) (int, error) {
	var body []byte
	if r.in != nil {
		var err error
		if body, err = json.Marshal(r.in); err != nil {
			return 0, err
		}
	}
	target := c.base + r.path
	if len(r.query) > 0 {
		target += "?" + r.query.Encode()
	}
	key := ""
	if r.creating {
		key = newKey()
	}
	// GET is safe to repeat; a creating POST is because of its key. Other
	// writes (a PUT to a protected environment opens a change set each
	// time) are not repeated.
	retryable := r.method == http.MethodGet || key != ""
	attempts := 1
	if retryable {
		attempts += max(c.retries, 0)
	}
	var lastErr error
	for i := 0; i < attempts; i++ {
		if i > 0 {
			pause := c.backoff << (i - 1)
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(pause):
			}
		}
		status, again, err := c.attempt(ctx, r, target, body, key, out)
		if err == nil || !again {
			return status, err
		}
		lastErr = err
	}
	return 0, lastErr
}

// attempt makes one round trip. again says whether the failure may pass on
// a repeat.
func (c *Client) attempt(ctx context.Context, r request, target string, body []byte, key string, out any) (int, bool, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, target, rd)
	if err != nil {
		return 0, false, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" && !r.public {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, true, c.transportError(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		if ctx.Err() != nil {
			return 0, false, ctx.Err()
		}
		return 0, true, c.transportError(err)
	}
	if int64(len(raw)) > c.maxBody {
		return 0, false, fmt.Errorf("the answer of %s %s is larger than %d bytes", r.method, r.path, c.maxBody)
	}
	if resp.StatusCode >= 400 {
		e := apiError(resp, raw)
		// projections_behind and projections_parked: the change was
		// recorded, a repeat would be refused (or made twice).
		recorded := e.Code == "projections_behind" || e.Code == "projections_parked"
		again := (resp.StatusCode == http.StatusBadGateway || resp.StatusCode == http.StatusServiceUnavailable && !recorded ||
			resp.StatusCode == http.StatusGatewayTimeout) ||
			// The first attempt, whose answer was lost, is still running.
			key != "" && (e.Code == "request_in_progress" || e.Code == "idempotency_conflict")
		return resp.StatusCode, again, e
	}
	if dst, ok := ctx.Value(bodyKey{}).(*[]byte); ok && dst != nil {
		*dst = raw
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, false, fmt.Errorf("the answer of %s %s is not the JSON the API sends (is %s a NebulaCtrl control plane?): %v",
				r.method, r.path, c.base, err)
		}
	}
	return resp.StatusCode, false, nil
}

func (c *Client) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("the control plane at %s did not answer in time: %w", c.base, err)
	}
	return fmt.Errorf("cannot reach the control plane at %s: %w", c.base, err)
}

// apiError turns a failed answer into *Error.
func apiError(resp *http.Response, raw []byte) *Error {
	e := &Error{Status: resp.StatusCode, RequestID: resp.Header.Get("X-Request-Id")}
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error != nil && body.Error.Message != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	e.Message = fmt.Sprintf("the server answered %s", resp.Status)
	if snippet := strings.Join(strings.Fields(string(raw)), " "); snippet != "" && len(snippet) <= 200 {
		e.Message += ": " + snippet
	}
	if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
		e.Message += " (is the URL that of a NebulaCtrl control plane of this version?)"
	}
	return e
}

// newKey returns a fresh Idempotency-Key.
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return "nebula-" + hex.EncodeToString(b)
}
