package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/pgtest"
	"github.com/nebulactrl/nebulactrl/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// client calls a control plane and checks every response against the
// OpenAPI document the server itself serves.
type client struct {
	t      testing.TB
	base   string
	router routers.Router
	doc    *openapi3.T
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
	req, err := http.NewRequest(method, c.base+path, rd)
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
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
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
}

func esc(s string) string { return url.PathEscape(s) }

func join(parts ...string) string { return strings.Join(parts, "/") }

func pgxConnect(url string) (*pgx.Conn, error) { return pgx.Connect(context.Background(), url) }
