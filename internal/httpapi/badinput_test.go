package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/projections"
)

// leaf is a value a request body can carry: a string, number or boolean,
// with the path that reaches it (keys, and 0 for an array's first element).
type leaf struct {
	steps []any
	kind  reflect.Kind
	// element is set for the elements of an array of strings.
	element bool
}

// name is the JSON path the API names the leaf by: processes[0].command[0].
func (l leaf) name() string {
	var b strings.Builder
	for _, s := range l.steps {
		switch s := s.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s)
		case int:
			b.WriteString("[" + strconv.Itoa(s) + "]")
		}
	}
	return b.String()
}

// leaves lists, by reflection over a request type, every string, number and
// boolean it holds, however deep.
func leaves(t reflect.Type, prefix []any, seen map[reflect.Type]bool) []leaf {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []leaf
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Int32:
		return []leaf{{steps: prefix, kind: t.Kind()}}
	case reflect.Slice:
		elem := t.Elem()
		for elem.Kind() == reflect.Pointer {
			elem = elem.Elem()
		}
		if elem.Kind() == reflect.String {
			return []leaf{{steps: append(append([]any{}, prefix...), 0), kind: reflect.String, element: true}}
		}
		return leaves(elem, append(append([]any{}, prefix...), 0), seen)
	case reflect.Struct:
		if seen[t] {
			return nil
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if f.Anonymous && name == "" {
				out = append(out, leaves(f.Type, prefix, seen)...)
				continue
			}
			if name == "" {
				name = f.Name
			}
			out = append(out, leaves(f.Type, append(append([]any{}, prefix...), name), seen)...)
		}
	}
	return out
}

const placeholder = "\x01BAD\x01"

// bodyWith is a JSON body that holds only the leaf, set to raw JSON.
func bodyWith(l leaf, raw string) string {
	var v any = placeholder
	for i := len(l.steps) - 1; i >= 0; i-- {
		switch s := l.steps[i].(type) {
		case string:
			v = map[string]any{s: v}
		case int:
			v = []any{v}
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	quoted, _ := json.Marshal(placeholder)
	return strings.Replace(string(b), string(quoted), raw, 1)
}

// badCase is one bad request and what must come of it.
type badCase struct {
	what   string
	method string
	path   string
	body   *string
	ctype  string
	// status, when set, is the status wanted; otherwise any 4xx.
	status int
	code   string
	// names is what the error message must name.
	names string
	// headers are sent besides Content-Type (name, value, ...).
	headers []string
	// ifMatch cases want 412 precondition_failed, or 404 where the
	// concrete path names nothing.
	ifMatch bool
}

// badIfMatch is, for a route that honours If-Match, tags that cannot be
// the resource's current one: 412 precondition_failed before anything else.
func badIfMatch(rt httpapi.RouteInfo) []badCase {
	if !rt.IfMatch {
		return nil
	}
	var out []badCase
	for _, tag := range []string{"garbage", `W/"project-x.1"`, `"org-00000000-0000-0000-0000-000000000000.1"`, `"instance.0"`, `"instance.-1"`,
		`"project-x.99999999999999999999"`, `""`, strings.Repeat("x", 2000)} {
		out = append(out, badCase{what: "If-Match " + tag[:min(len(tag), 40)], method: rt.Method, path: concrete(rt),
			headers: []string{"If-Match", tag}, ifMatch: true})
	}
	return out
}

func strp(s string) *string { return &s }

// badBodies are the bad bodies of a route with a request type.
func badBodies(rt httpapi.RouteInfo, path string) []badCase {
	var out []badCase
	add := func(what string, body string, status int, code, names string) {
		out = append(out, badCase{what: what, method: rt.Method, path: path, body: strp(body), status: status, code: code, names: names})
	}
	for _, l := range leaves(reflect.TypeOf(rt.Request), nil, map[reflect.Type]bool{}) {
		field := "field " + l.name()
		switch l.kind {
		case reflect.String:
			add(field+" with U+0000", bodyWith(l, `"x\u0000"`), 422, "validation_failed", field)
			add(field+" not UTF-8", bodyWith(l, "\"x\xff\xfe\""), 422, "validation_failed", field)
			add(field+" with an unpaired surrogate", bodyWith(l, `"\ud800x"`), 422, "validation_failed", field)
			add(field+" with U+202E", bodyWith(l, `"a\u202eb"`), 0, "", "")
			add(field+" of 70,000 bytes", bodyWith(l, `"`+strings.Repeat("a", 70_000)+`"`), 422, "validation_failed", field)
			add(field+" of 1 MiB", bodyWith(l, `"`+strings.Repeat("a", 1<<20)+`"`), 413, "body_too_large", "")
			add(field+" as a number", bodyWith(l, `5`), 400, "invalid_request", "")
			add(field+" as an object", bodyWith(l, `{"a": "b"}`), 400, "invalid_request", "")
		case reflect.Int, reflect.Int64, reflect.Int32:
			for _, n := range []string{`1e400`, `9223372036854775808`, `-9223372036854775809`, `1.5`, `"7"`, `true`, `[1]`} {
				add(field+" = "+n, bodyWith(l, n), 400, "invalid_request", "")
			}
			add(field+" = -1", bodyWith(l, `-1`), 0, "", "")
		case reflect.Bool:
			for _, v := range []string{`"true"`, `1`, `{}`} {
				add(field+" = "+v, bodyWith(l, v), 400, "invalid_request", "")
			}
		}
		if !l.element {
			key, _ := json.Marshal(l.steps[len(l.steps)-1])
			add(field+" twice", bodyWith(l, `null, `+string(key)+`: null`), 400, "invalid_request", "twice")
		}
	}
	for _, b := range []string{`[]`, `"x"`, `5`, `{"a": 1`, `{} {}`, `{"unknown": 1}`, "{\"\xff\": 1}", `{"a\u0000": 1}`} {
		add(fmt.Sprintf("body %q", b), b, 0, "", "")
	}
	out = append(out, badCase{what: "text/plain", method: rt.Method, path: path, body: strp(`{}`), ctype: "text/plain", status: 415, code: "unsupported_media_type"})
	return out
}

var badSegments = []struct{ what, raw, names string }{
	{"U+0000", "x%00", ""},
	{"bytes that are not UTF-8", "x%FF%FE", ""},
	{"U+202E", "a%E2%80%AEb", "bidirectional"},
	{"300 bytes", strings.Repeat("a", 300), ""},
}

// badPaths are the route's path with each parameter bad in turn.
func badPaths(rt httpapi.RouteInfo) []badCase {
	var out []badCase
	good := concrete(rt)
	goodParts := strings.Split(good, "/")
	for i, part := range strings.Split(rt.Path, "/") {
		if !strings.HasPrefix(part, "{") {
			continue
		}
		param := strings.Trim(part, "{}")
		for _, bad := range badSegments {
			parts := append([]string{}, goodParts...)
			parts[i] = bad.raw
			c := badCase{what: "path parameter " + param + " with " + bad.what, method: rt.Method, path: strings.Join(parts, "/"),
				status: 422, code: "validation_failed", names: "path parameter " + param}
			if rt.Request != nil {
				c.body = strp(`{}`)
			}
			out = append(out, c)
		}
	}
	return out
}

// badQueries are the route with each query parameter bad in turn.
func badQueries(rt httpapi.RouteInfo) []badCase {
	var out []badCase
	for name, typ := range rt.Query {
		for _, bad := range badSegments[:3] {
			out = append(out, badCase{what: "query parameter " + name + " with " + bad.what, method: rt.Method, path: concrete(rt) + "?" + name + "=" + bad.raw,
				status: 422, code: "validation_failed", names: "query parameter " + name})
		}
		out = append(out, badCase{what: "query parameter " + name + " of 2,000 bytes", method: rt.Method, path: concrete(rt) + "?" + name + "=" + strings.Repeat("1", 2000),
			status: 0, names: name})
		if typ != "integer" {
			continue
		}
		for _, v := range []string{"99999999999999999999", "-1", "1.5", "abc", "1e3", "0x10"} {
			out = append(out, badCase{what: "query parameter " + name + "=" + v, method: rt.Method, path: concrete(rt) + "?" + name + "=" + v})
		}
	}
	return out
}

// For every route of the route table, every string, number and boolean of
// its body, every path parameter and every query parameter: U+0000, bytes
// that are not UTF-8, U+202E, 70,000 bytes and 1 MiB, numbers out of range,
// wrong types, a key given twice, a body that is not JSON. Each gets a clear
// 4xx in the documented shape (never a 5xx) and changes nothing; afterwards
// a write and a sign-in in another organisation succeed and the
// projections replay equal to live.
func TestBadInputOverTheWholeRouteTable(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	must := func(r response, status int) {
		t.Helper()
		require.Equal(t, status, r.status, string(r.body))
	}
	must(c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", root, map[string]any{"name": "staging", "cluster": "eu-1"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects/shop/services", root, map[string]any{"name": "api", "image": "nginx:1", "port": 8080}), 201)
	must(c.do("POST", "/api/v1/users", root, map[string]any{"email": "beta@example.com", "password": "correct horse battery staple"}), 201)
	beta := login(t, c, "beta@example.com")
	must(c.do("POST", "/api/v1/orgs", beta, map[string]any{"name": "beta"}), 201)

	pool, err := pgxpool.New(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	defer pool.Close()
	events := func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM events`).Scan(&n))
		return n
	}

	start, requests, preconditionFailed := time.Now(), 0, 0
	for _, rt := range routes(t) {
		var cases []badCase
		if rt.Request != nil {
			cases = append(cases, badBodies(rt, concrete(rt))...)
		}
		cases = append(cases, badPaths(rt)...)
		cases = append(cases, badQueries(rt)...)
		cases = append(cases, badIfMatch(rt)...)
		before := events()
		for _, bc := range cases {
			var body any
			var headers []string
			if bc.body != nil {
				body = *bc.body
			}
			if bc.ctype != "" {
				headers = []string{"Content-Type", bc.ctype}
			}
			headers = append(headers, bc.headers...)
			r := c.do(bc.method, bc.path, root, body, headers...)
			requests++
			what := fmt.Sprintf("%s %s, %s: %d %.300s", rt.Method, rt.Path, bc.what, r.status, r.body)
			require.True(t, r.status >= 400 && r.status < 500, "a clear 4xx: "+what)
			code, msg := r.errorCode(t)
			require.NotEmpty(t, code, what)
			require.NotEmpty(t, msg, what)
			if bc.status != 0 {
				require.Equal(t, bc.status, r.status, what)
				require.Equal(t, bc.code, code, what)
			}
			if bc.names != "" {
				require.Contains(t, msg, bc.names, what)
			}
			if bc.ifMatch && r.status != 404 {
				require.Equal(t, 412, r.status, what)
				require.Equal(t, "precondition_failed", code, what)
				preconditionFailed++
			}
		}
		require.Equal(t, before, events(), "bad input to %s %s changed something", rt.Method, rt.Path)
	}
	t.Logf("%d bad requests in %s", requests, time.Since(start).Round(time.Millisecond))
	require.Greater(t, preconditionFailed, 40, "routes that honour If-Match refused stale tags")
	require.Greater(t, requests, 1000)

	// The control plane still works, for another organisation too.
	must(c.do("POST", "/api/v1/orgs/beta/projects", beta, map[string]any{"name": "after"}), 201)
	login(t, c, "beta@example.com")
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "after"}), 201)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := projections.Replay(ctx, pool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "audit replay equals live: %+v", rep)
}
