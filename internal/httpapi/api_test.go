package httpapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// Every route is in the OpenAPI document and every documented operation is
// a route that the server really answers.
func TestOpenAPIDocumentMatchesRoutes(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	table := routes(t)
	documented := map[string]bool{}
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for _, rt := range table {
		require.True(t, documented[rt.Method+" "+rt.Path], "route %s %s is not documented", rt.Method, rt.Path)
		delete(documented, rt.Method+" "+rt.Path)
	}
	require.Empty(t, documented, "documented operations that are not routes")
	// And the server routes each of them (no "no route" fallback).
	for _, rt := range table {
		req, err := http.NewRequest(rt.Method, s.URL+concrete(rt), nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NotContains(t, string(b), "no route", "%s %s", rt.Method, rt.Path)
	}
	r := c.do("GET", "/api/v1/nope", "", nil)
	require.Equal(t, http.StatusNotFound, r.status)
}

func TestBadBodiesChangeNothing(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	for _, tc := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"name": "shop", "extra": 1}`, 400, "invalid_request"},
		{`{"name": 5}`, 400, "invalid_request"},
		{`{"name": "shop"`, 400, "invalid_request"},
		{`{"name": "shop"} {}`, 400, "invalid_request"},
		{``, 400, "invalid_request"},
		{`{"name": "Not_DNS"}`, 422, "validation_failed"},
		{`{"name": "` + strings.Repeat("a", 2<<20) + `"}`, 413, "body_too_large"},
	} {
		r := c.do("POST", "/api/v1/orgs/acme/projects", root, tc.body)
		require.Equal(t, tc.status, r.status, "%.60s: %s", tc.body, r.body)
		code, msg := r.errorCode(t)
		require.Equal(t, tc.code, code)
		require.NotEmpty(t, msg)
	}
	var projects []api.Project
	c.do("GET", "/api/v1/orgs/acme/projects", root, nil).items(t, &projects)
	require.Empty(t, projects)
	r := c.do("GET", "/api/v1/orgs/acme/audit?limit=0", root, nil)
	require.Equal(t, 400, r.status)
	r = c.do("GET", "/api/v1/orgs/acme/audit?since=yesterday", root, nil)
	require.Equal(t, 400, r.status)
}

func TestIdempotencyKeyCreatesOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{})
	b := servertest.Start(t, servertest.Options{DatabaseURL: a.DatabaseURL, SecretKey: a.SecretKey})
	ca, cb := newClient(t, a), newClient(t, b)
	root := a.Setup(t, "root@example.com", "acme")

	first := ca.do("POST", "/api/v1/orgs/acme/projects", root, map[string]string{"name": "shop"}, "Idempotency-Key", "k1")
	require.Equal(t, 201, first.status)
	again := cb.do("POST", "/api/v1/orgs/acme/projects", root, map[string]string{"name": "shop"}, "Idempotency-Key", "k1")
	require.Equal(t, 201, again.status, "a retry on the other replica gets the first response")
	require.JSONEq(t, string(first.body), string(again.body))
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	other := cb.do("POST", "/api/v1/orgs/acme/projects", root, map[string]string{"name": "web"}, "Idempotency-Key", "k1")
	require.Equal(t, 422, other.status)
	code, _ := other.errorCode(t)
	require.Equal(t, "idempotency_key_reused", code)
	var projects []api.Project
	ca.do("GET", "/api/v1/orgs/acme/projects", root, nil).items(t, &projects)
	require.Len(t, projects, 1)
	// Without a key, the same request is a duplicate name.
	require.Equal(t, 409, ca.do("POST", "/api/v1/orgs/acme/projects", root, map[string]string{"name": "shop"}).status)
}

func TestLoginIsRateLimitedAcrossReplicas(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{})
	b := servertest.Start(t, servertest.Options{DatabaseURL: a.DatabaseURL, SecretKey: a.SecretKey})
	ca, cb := newClient(t, a), newClient(t, b)
	a.Setup(t, "root@example.com", "acme")
	wrong := map[string]string{"email": "root@example.com", "password": "not the password"}
	for i := 0; i < 10; i++ {
		c := ca
		if i%2 == 1 {
			c = cb
		}
		require.Equal(t, http.StatusUnauthorized, c.do("POST", "/api/v1/sessions", "", wrong).status, "attempt %d", i+1)
	}
	r := cb.do("POST", "/api/v1/sessions", "", map[string]string{"email": "root@example.com", "password": "correct horse battery staple"})
	require.Equal(t, http.StatusTooManyRequests, r.status, "the eleventh attempt, on either replica, is refused even with the right password")
	require.NotEmpty(t, r.header.Get("Retry-After"))
}

func TestSetupIsRefusedOnceAnyUserExists(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	body := map[string]string{"email": "a@example.com", "password": "correct horse battery staple", "organisation": "acme"}
	var wg sync.WaitGroup
	statuses := make([]int, 4)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := map[string]string{"email": fmt.Sprintf("u%d@example.com", i), "password": body["password"], "organisation": fmt.Sprintf("org%d", i)}
			statuses[i] = c.do("POST", "/api/v1/setup", "", b).status
		}()
	}
	wg.Wait()
	created := 0
	for _, st := range statuses {
		if st == 201 {
			created++
		} else {
			require.Equal(t, http.StatusConflict, st)
		}
	}
	require.Equal(t, 1, created, "exactly one concurrent setup wins")
	require.Equal(t, http.StatusConflict, c.do("POST", "/api/v1/setup", "", body).status)
}

// Two replicas on one database behave as one control plane: a change
// through one is visible through the other at once, and background jobs run
// on one replica only, with the other taking over when it stops.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{JobInterval: 50 * time.Millisecond})
	b := servertest.Start(t, servertest.Options{DatabaseURL: a.DatabaseURL, SecretKey: a.SecretKey, JobInterval: 50 * time.Millisecond})
	ca, cb := newClient(t, a), newClient(t, b)
	root := a.Setup(t, "root@example.com", "acme")
	for i := 0; i < 5; i++ {
		name := fmt.Sprintf("p%d", i)
		src, dst := ca, cb
		if i%2 == 1 {
			src, dst = cb, ca
		}
		require.Equal(t, 201, src.do("POST", "/api/v1/orgs/acme/projects", root, map[string]string{"name": name}).status)
		require.Equal(t, 200, dst.do("GET", "/api/v1/orgs/acme/projects/"+name, root, nil).status, "a change through one replica is visible through the other at once")
	}
	db, err := pgxConnect(a.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	require.Eventually(t, func() bool {
		var n int
		_ = db.QueryRow(context.Background(), `SELECT count(*) FROM job_runs`).Scan(&n)
		return n >= 20
	}, 20*time.Second, 50*time.Millisecond)
	var replicas int
	var leader string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(DISTINCT replica), min(replica) FROM job_runs`).Scan(&replicas, &leader))
	require.Equal(t, 1, replicas, "jobs run on one replica only")

	// The leader stops; the other replica takes the jobs over.
	stopped, other := a, b
	if strings.HasSuffix(leader, strings.TrimPrefix(b.URL, "http://")) {
		stopped, other = b, a
	}
	stopped.Stop()
	require.Eventually(t, func() bool {
		var n int
		_ = db.QueryRow(context.Background(), `SELECT count(*) FROM job_runs WHERE replica <> $1`, leader).Scan(&n)
		return n > 0
	}, 20*time.Second, 50*time.Millisecond, "the other replica takes over the jobs")
	r := newClient(t, other).do("GET", "/api/v1/orgs/acme/projects", root, nil)
	require.Equal(t, 200, r.status)
}

var _ = api.Error{}
