package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

func TestMain(m *testing.M) {
	// The body of a stream is checked event by event (validateEvents); to
	// the response validator it is a string.
	openapi3filter.RegisterBodyDecoder(api.StreamMediaType, func(r io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		b, err := io.ReadAll(r)
		return string(b), err
	})
	pgtest.Main(m)
}

// client calls a control plane and checks every response against the
// OpenAPI document the server itself serves.
type client struct {
	t      testing.TB
	base   string
	router routers.Router
	doc    *openapi3.T
	// http sends the requests; nil for http.DefaultClient.
	http *http.Client
}

// from returns a client whose connections come from the loopback address
// ip (127.0.0.2, ...): the server sees another client address.
func (c *client) from(ip string) *client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	cp := *c
	cp.http = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	return &cp
}

var docCache sync.Map

func newClient(t testing.TB, s *servertest.Server) *client {
	t.Helper()
	resp, err := http.Get(s.URL + "/api/v1/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "the OpenAPI document must validate")
	doc.Servers = openapi3.Servers{{URL: s.URL}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return &client{t: t, base: s.URL, router: router, doc: doc}
}

type response struct {
	status int
	body   []byte
	header http.Header
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), string(r.body))
}

// items decodes the items of a list's page ({"items": [...], "next"}).
func (r response) items(t testing.TB, v any) {
	t.Helper()
	var page struct {
		Items json.RawMessage `json:"items"`
	}
	r.json(t, &page)
	require.NotNil(t, page.Items, "a list answers a page with items: %s", r.body)
	require.NoError(t, json.Unmarshal(page.Items, v), string(r.body))
}

func (r response) errorCode(t testing.TB) (string, string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	r.json(t, &e)
	return e.Error.Code, e.Error.Message
}

// do sends a request and validates the response against the document.
func (c *client) do(method, path, token string, body any, headers ...string) response {
	c.t.Helper()
	var rd io.Reader
	var raw []byte
	if body != nil {
		switch b := body.(type) {
		case string:
			raw = []byte(b)
		default:
			var err error
			raw, err = json.Marshal(b)
			require.NoError(c.t, err)
		}
		rd = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	require.NoError(c.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	hc := c.http
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	var out []byte
	if isStream(resp) {
		// A stream may not end: read what comes within a moment.
		out = readFor(resp.Body, cancel, 300*time.Millisecond)
	} else {
		out, err = io.ReadAll(resp.Body)
		require.NoError(c.t, err)
	}
	c.validate(req, raw, resp, out)
	return response{status: resp.StatusCode, body: out, header: resp.Header}
}

func (c *client) validate(req *http.Request, reqBody []byte, resp *http.Response, body []byte) {
	c.t.Helper()
	vreq, _ := http.NewRequest(req.Method, req.URL.String(), bytes.NewReader(reqBody))
	vreq.Header = req.Header.Clone()
	route, params, err := c.router.FindRoute(vreq)
	if err != nil {
		// Unknown routes answer 404 or 405 with the error body; nothing to check against.
		require.Contains(c.t, []int{404, 405}, resp.StatusCode, "%s %s is not documented", req.Method, req.URL.Path)
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	})
	require.NoError(c.t, err, "%s %s answered %d %s, which the OpenAPI document does not allow", req.Method, req.URL.Path, resp.StatusCode, body)
	if isStream(resp) {
		c.validateEvents(route.Operation, body)
	}
}

func isStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), api.StreamMediaType)
}

// readFor reads a body for at most d, then cancels the request.
func readFor(body io.Reader, cancel func(), d time.Duration) []byte {
	var buf lockedbuf.Buffer
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(&buf, body)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
		cancel()
		<-done
	}
	return []byte(buf.String())
}

// sseEvent is one server-sent event as a client parses it.
type sseEvent struct {
	id, name string
	data     []byte
}

// parseEvents parses a text/event-stream body (complete events only).
func parseEvents(body []byte) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	var data [][]byte
	for _, line := range strings.SplitAfter(string(body), "\n") {
		if !strings.HasSuffix(line, "\n") {
			break // incomplete
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if data != nil {
				cur.data = bytes.Join(data, []byte("\n"))
				out = append(out, cur)
			}
			cur, data = sseEvent{}, nil
		case strings.HasPrefix(line, ":"):
		default:
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				cur.id = value
			case "event":
				cur.name = value
			case "data":
				data = append(data, []byte(value))
			}
		}
	}
	return out
}

// validateEvents checks every event of a stream against the schema the
// document names for it (the media type's x-events).
func (c *client) validateEvents(op *openapi3.Operation, body []byte) {
	c.t.Helper()
	resp := op.Responses.Status(http.StatusOK)
	require.NotNil(c.t, resp, "a stream documents its 200 answer")
	mt := resp.Value.Content.Get(api.StreamMediaType)
	require.NotNil(c.t, mt, "a stream documents its media type")
	events, ok := mt.Extensions["x-events"].(map[string]any)
	require.True(c.t, ok, "a stream documents its events in x-events")
	for _, e := range parseEvents(body) {
		spec, ok := events[e.name].(map[string]any)
		require.True(c.t, ok, "event %q is not documented", e.name)
		name, _ := spec["schema"].(string)
		raw, err := json.Marshal(spec["payload"])
		require.NoError(c.t, err)
		var schema openapi3.Schema
		require.NoError(c.t, json.Unmarshal(raw, &schema), "payload schema %q of event %q", name, e.name)
		require.NotEmpty(c.t, schema.Properties, "payload schema %q of event %q lists its fields", name, e.name)
		var v any
		require.NoError(c.t, json.Unmarshal(e.data, &v), "event %q: %s", e.name, e.data)
		require.NoError(c.t, schema.VisitJSON(v), "event %q does not match schema %s: %s", e.name, name, e.data)
	}
}

func esc(s string) string { return url.PathEscape(s) }

func join(parts ...string) string { return strings.Join(parts, "/") }

func pgxConnect(url string) (*pgx.Conn, error) { return pgx.Connect(context.Background(), url) }
