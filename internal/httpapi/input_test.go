package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// eventCount counts the events of a control plane's database.
func eventCount(t testing.TB, databaseURL string) int {
	t.Helper()
	db, err := pgxConnect(databaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n))
	return n
}

// refused checks that a request was refused with status and code, and that
// the message names what it should.
func refused(t *testing.T, r response, status int, code, names string) {
	t.Helper()
	require.Equal(t, status, r.status, string(r.body))
	gotCode, msg := r.errorCode(t)
	require.Equal(t, code, gotCode, msg)
	require.Contains(t, msg, names)
}

// A string that a projection cannot store (U+0000, bytes that are not
// UTF-8) never becomes an event: the request is refused with 422 naming the
// field, and everything else keeps working. Before, one token named "x\0"
// stopped the projections, and with them every write and sign-in.
func TestStringsNoProjectionCanStoreAreRefused(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"})
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}).status)
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", root, map[string]any{"name": "prod", "cluster": "eu-1", "protected": true}).status)
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects/shop/services", root, map[string]any{"name": "api", "image": "nginx:1"}).status)
	vars := "/api/v1/orgs/acme/projects/shop/environments/prod/services/api/variables"
	r := c.do("PUT", vars, root, map[string]any{"variables": []map[string]any{{"name": "A", "value": "1"}}})
	require.Equal(t, 202, r.status, string(r.body))
	var held api.VariablesResponse
	r.json(t, &held)
	require.NotNil(t, held.ChangeSet)
	before := eventCount(t, s.DatabaseURL)

	for _, tc := range []struct {
		method, path, body string
		names              string
	}{
		{"POST", "/api/v1/tokens", `{"name": "x\u0000", "scopes": ["projects:read"]}`, "field name"},
		{"POST", "/api/v1/tokens", "{\"name\": \"x\xff\", \"scopes\": [\"projects:read\"]}", "field name"},
		{"POST", "/api/v1/tokens", `{"name": "x\ud800", "scopes": ["projects:read"]}`, "field name"},
		{"POST", "/api/v1/tokens", `{"name": "ok", "scopes": ["projects:read\u0000"]}`, "field scopes[0]"},
		{"PUT", vars, `{"variables": [{"name": "A", "value": "1"}, {"name": "B", "value": "a\u0000b"}]}`, "field variables[1].value"},
		{"PUT", vars, "{\"variables\": [{\"name\": \"B\", \"value\": \"\xc3\"}]}", "field variables[0].value"},
		{"POST", "/api/v1/orgs/acme/projects/shop/environments/prod/changesets/" + held.ChangeSet.ID + "/reject", `{"reason": "no\u0000"}`, "field reason"},
		{"POST", "/api/v1/users", `{"email": "a@example.com", "password": "correct horse battery staple", "name": "A\u202eB"}`, "field name"},
		{"POST", "/api/v1/orgs/acme/projects/shop/services", `{"name": "web", "image": "nginx:1", "processes": [{"name": "web", "replicas": 1, "command": ["sh", "-c", "x\u0000"]}]}`, "field processes[0].command[2]"},
		{"POST", "/api/v1/orgs/acme/projects/shop/services", `{"name": "web", "gitUrl": "` + strings.Repeat("a", 3000) + `", "gitBranch": "main"}`, "field gitUrl"},
		{"GET", "/api/v1/orgs/acme%00/projects", "", "path parameter org"},
		{"GET", "/api/v1/orgs/acme/projects/sh%FFop", "", "path parameter project"},
		{"DELETE", "/api/v1/orgs/acme/projects/shop/environments/prod/variables/A%E2%80%AE", "", "path parameter name"},
		{"GET", "/api/v1/orgs/acme/audit?action=x%00", "", "query parameter action"},
		{"GET", "/api/v1/orgs/acme/audit?target=%C3", "", "query parameter target"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := c.do(tc.method, tc.path, root, body)
		refused(t, r, 422, "validation_failed", tc.names)
	}
	require.Equal(t, before, eventCount(t, s.DatabaseURL), "nothing refused became an event")

	// Bidirectional formatting is valid text: a variable value or a
	// reason may hold it; a name may not.
	refused(t, c.do("POST", "/api/v1/tokens", root, `{"name": "evil\u202eexe.txt", "scopes": ["projects:read"]}`), 422, "validation_failed", "bidirectional")
	r = c.do("PUT", vars, root, `{"variables": [{"name": "B", "value": "\u202eabc\nline two\u0001"}]}`)
	require.Equal(t, 202, r.status, string(r.body))
}

// Malformed bodies: a key given twice is 400 like any other malformed JSON,
// a body that is not JSON by its Content-Type is 415, a path that exists
// with another method is 405 with Allow.
func TestBodiesMediaTypesAndMethods(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	before := eventCount(t, s.DatabaseURL)
	refused(t, c.do("POST", "/api/v1/orgs/acme/projects", root, `{"name": "shop", "name": "web"}`), 400, "invalid_request", "field name twice")
	refused(t, c.do("POST", "/api/v1/orgs/acme/projects", root, `{"name": "shop", "Name": "web"}`), 400, "invalid_request", "twice")
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1", "nonsense"} {
		r := c.do("POST", "/api/v1/orgs/acme/projects", root, `{"name": "shop"}`, "Content-Type", ct)
		refused(t, r, http.StatusUnsupportedMediaType, "unsupported_media_type", "application/json")
	}
	require.Equal(t, before, eventCount(t, s.DatabaseURL))
	for i, ct := range []string{"application/json", "application/json; charset=utf-8", "application/merge-patch+json"} {
		r := c.do("POST", "/api/v1/orgs/acme/projects", root, fmt.Sprintf(`{"name": "p%d"}`, i), "Content-Type", ct)
		require.Equal(t, 201, r.status, "%s: %s", ct, r.body)
	}

	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/api/v1/orgs/acme/projects", "GET, HEAD, POST"},
		{"POST", "/api/v1/me", "GET, HEAD"},
		{"PATCH", "/api/v1/tokens/" + "3f0b6a0e-0000-4000-8000-000000000000", "GET, HEAD, DELETE"},
		{"DELETE", "/api/v1/setup", "POST"},
	} {
		r := c.do(tc.method, tc.path, root, nil)
		require.Equal(t, http.StatusMethodNotAllowed, r.status, "%s %s: %s", tc.method, tc.path, r.body)
		require.Equal(t, tc.allow, r.header.Get("Allow"))
		code, _ := r.errorCode(t)
		require.Equal(t, "method_not_allowed", code)
	}
	r := c.do("GET", "/api/v1/nothing/here", root, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Empty(t, r.header.Get("Allow"))

	// An Idempotency-Key is printable ASCII: anything else would not fit
	// the table it is kept in.
	r = c.do("POST", "/api/v1/orgs/acme/projects", root, `{"name": "idem"}`, "Idempotency-Key", "k\xff")
	refused(t, r, 400, "invalid_request", "Idempotency-Key")
}

// Every API response, errors included, tells browsers not to sniff it and
// caches not to keep it.
func TestAPIResponsesAreNotSniffedNorStored(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	for _, r := range []response{
		c.do("GET", "/api/v1/me", root, nil),
		c.do("GET", "/api/v1/me", "", nil),
		c.do("GET", "/api/v1/nothing", root, nil),
		c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "ci", "scopes": []string{"projects:read"}}),
	} {
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		require.Equal(t, "no-store", r.header.Get("Cache-Control"))
		require.Empty(t, r.header.Get("Strict-Transport-Security"), "no HSTS over plain HTTP")
	}
	resp, err := http.Get(s.URL + "/api/v1/openapi.json")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
}
