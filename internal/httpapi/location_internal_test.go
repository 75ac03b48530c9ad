package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every Location a 201 can carry names a path that a GET route of the table
// answers: no Location points at a collection item with nothing to read it.
func TestEveryLocationHasAGetRoute(t *testing.T) {
	t.Parallel()
	routes := (&API{}).routeTable()
	gets := http.NewServeMux()
	for _, rt := range routes {
		if rt.method == http.MethodGet {
			gets.HandleFunc("GET "+rt.path, func(http.ResponseWriter, *http.Request) {})
		}
	}
	// A created thing with every key a location can be made of.
	keys := []byte(`{"id":"5b1c7c8e-1d2a-4e3f-9a0b-1c2d3e4f5a6b","userId":"5b1c7c8e-1d2a-4e3f-9a0b-1c2d3e4f5a6b",
		"name":"thing","host":"www.example.com","dump":"nebulactrl-1.dump","organisation":{"name":"acme"}}`)
	n := 0
	for _, rt := range routes {
		if rt.status != http.StatusCreated {
			continue
		}
		n++
		body := reflect.New(reflect.TypeOf(rt.response))
		require.NoError(t, json.Unmarshal(keys, body.Interface()))
		path := pathParam.ReplaceAllString(rt.path, "p")
		loc := location(httptest.NewRequest(rt.method, path, nil), body.Elem().Interface())
		require.NotEmpty(t, loc, "%s %s: a 201 without Location", rt.method, rt.path)
		require.True(t, strings.HasPrefix(loc, "/api/v1/"), loc)
		_, pattern := gets.Handler(httptest.NewRequest(http.MethodGet, loc, nil))
		require.NotEmpty(t, pattern, "%s %s: its Location %s has no GET route", rt.method, rt.path, loc)
		require.NotEqual(t, "GET "+rt.path, pattern, "%s %s: its Location %s is the collection, not the item", rt.method, rt.path, loc)
	}
	require.GreaterOrEqual(t, n, 12, "the routes that create")
}

// Every list's items have a key the cursor can find them again by: an id,
// a name or the like, or a PageKey for the items with none (workloads,
// Kubernetes events, replica counts; variables, whose names repeat across
// scopes). Without one a page would start at an offset, and rows added or
// removed between pages would be skipped or repeated.
func TestEveryListItemHasACursorKey(t *testing.T) {
	t.Parallel()
	n := 0
	for _, rt := range (&API{}).routeTable() {
		if !isList(rt) {
			continue
		}
		n++
		elem := reflect.TypeOf(rt.response).Elem()
		item := reflect.New(elem)
		require.NoError(t, json.Unmarshal([]byte(`{"id":"k","userId":"k","host":"k","name":"k","number":1,"seq":1,"serverId":"k","dump":"k"}`), item.Interface()))
		_, keyed := item.Elem().Interface().(interface{ PageKey() string })
		require.True(t, keyed || itemKey(item.Elem()) != "", "%s %s: the items (%s) have no key for the cursor", rt.method, rt.path, elem)
	}
	require.GreaterOrEqual(t, n, 20, "the lists")
}

// Every PATCH, PUT and DELETE of a resource honours If-Match (signing out
// changes no resource): a route added without its stream in
// resourceStreams would overwrite silently.
func TestEveryChangeHonoursIfMatch(t *testing.T) {
	t.Parallel()
	for _, rt := range (&API{}).routeTable() {
		switch rt.method {
		case http.MethodPatch, http.MethodPut, http.MethodDelete:
			if rt.path == "/api/v1/sessions/current" {
				continue
			}
			require.True(t, honoursIfMatch(rt), "%s %s does not honour If-Match: name its stream in resourceStreams", rt.method, rt.path)
		}
	}
}

// named passes nil through (it panicked on it) and names a not-found error.
func TestNamed(t *testing.T) {
	t.Parallel()
	require.NoError(t, named(nil, "member x"))
	require.ErrorContains(t, named(notFound("member"), "member x"), "member x not found")
	other := errorf(http.StatusConflict, "conflict", "taken")
	require.Equal(t, other, named(other, "member x"))
}
