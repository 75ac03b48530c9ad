package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestAgainstControlPlane(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	ctx := t.Context()

	anon, err := client.New(srv.URL+"/api/v1/", "")
	require.NoError(t, err)
	require.Equal(t, srv.URL, anon.URL(), "a trailing /api/v1/ is accepted")
	setup, err := anon.Setup(ctx, api.SetupRequest{Email: "ada@example.com", Password: "correct horse battery staple", Organisation: "acme"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(setup.Token, "nbl_"))
	require.Equal(t, "acme", setup.Organisation.Name)

	// A call that needs a token, without one.
	_, err = anon.Me(ctx)
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusUnauthorized, ae.Status)
	require.Equal(t, "unauthorized", ae.Code)
	require.Equal(t, ae.Message, err.Error(), "Error() is the API's message")
	require.NotEmpty(t, ae.RequestID)

	c, err := client.New(srv.URL, setup.Token)
	require.NoError(t, err)
	me, err := c.Me(ctx)
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", me.User.Email)

	p, err := c.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	require.Equal(t, "shop", p.Name)
	ps, err := c.Projects(ctx, "acme")
	require.NoError(t, err)
	require.Len(t, ps, 1)

	// The API's errors come back as *Error with its status, code and message.
	_, err = c.Projects(ctx, "nope")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusNotFound, ae.Status)
	require.Equal(t, "not_found", ae.Code)
	require.Equal(t, "organisation nope not found", err.Error())
	require.True(t, client.IsStatus(err, http.StatusNotFound))

	// Names are escaped as one path segment each: a slash in a name reaches
	// the API as part of the name instead of changing the route.
	_, err = c.Project(ctx, "acme", "a/b")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "not_found", ae.Code, "the API answered, not the router: %v", err)
	require.Equal(t, "project acme/a/b not found", err.Error())
	_, err = c.Project(ctx, "acme", "../../../me")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "not_found", ae.Code, "%v", err)

	// Validation errors carry the API's sentence.
	_, err = c.CreateProject(ctx, "acme", "Not A Label")
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusUnprocessableEntity, ae.Status)
	require.Contains(t, ae.Message, "must be a DNS label")

	// Capturing the body gives the API's JSON as sent.
	var raw []byte
	_, err = c.Projects(client.CaptureBody(ctx, &raw), "acme")
	require.NoError(t, err)
	require.Contains(t, string(raw), `"name":"shop"`)
}

// A creating call whose answer is lost is retried with the same
// Idempotency-Key, and the control plane replays its first answer instead of
// creating a second time.
func TestRetriedCreateIsIdempotent(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.Setup(t, "ada@example.com", "acme")
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var (
		mu   sync.Mutex
		keys []string
		lost atomic.Bool
	)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			mu.Lock()
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			mu.Unlock()
			if !lost.Swap(true) {
				// Forward, then lose the answer.
				rec := httptest.NewRecorder()
				proxy.ServeHTTP(rec, r)
				if rec.Code != http.StatusCreated {
					t.Errorf("the first attempt got %d: %s", rec.Code, rec.Body)
				}
				w.WriteHeader(http.StatusBadGateway)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	c, err := client.New(front.URL, token, client.WithRetries(2, 10*time.Millisecond))
	require.NoError(t, err)
	p, err := c.CreateProject(t.Context(), "acme", "shop")
	require.NoError(t, err)
	require.Equal(t, "shop", p.Name)
	mu.Lock()
	require.Len(t, keys, 2)
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1], "every attempt of a call carries the same key")
	mu.Unlock()
	ps, err := c.Projects(t.Context(), "acme")
	require.NoError(t, err)
	require.Len(t, ps, 1, "the retry did not create a second project")

	// The next creating call gets a new key.
	_, err = c.CreateProject(t.Context(), "acme", "blog")
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, keys, 3)
	require.NotEqual(t, keys[0], keys[2])
	mu.Unlock()
}

func TestTransport(t *testing.T) {
	t.Parallel()
	var (
		hits atomic.Int32
		ua   atomic.Value
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/me", func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.Header.Get("User-Agent"))
		if got := r.Header.Get("Authorization"); got != "Bearer nbl_x" {
			t.Errorf("Authorization: %q", got)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"user":{"email":"ada@example.com"},"organisations":[]}`)
	})
	mux.HandleFunc("GET /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(500 * time.Millisecond)
	})
	mux.HandleFunc("GET /api/v1/users", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(bytes.Repeat([]byte(" "), 2<<20))
	})
	mux.HandleFunc("GET /api/v1/orgs", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "<html>upstream down</html>", http.StatusBadGateway)
	})
	mux.HandleFunc("POST /api/v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()

	c, err := client.New(srv.URL, "nbl_x", client.WithVersion("1.2.3"), client.WithTimeout(200*time.Millisecond),
		client.WithMaxResponseBytes(1<<20), client.WithRetries(2, time.Millisecond))
	require.NoError(t, err)
	me, err := c.Me(ctx)
	require.NoError(t, err)
	require.Equal(t, "ada@example.com", me.User.Email)
	require.Equal(t, "nebula/1.2.3", ua.Load())

	_, err = c.Tokens(ctx)
	require.ErrorContains(t, err, "did not answer in time")

	_, err = c.Users(ctx)
	require.ErrorContains(t, err, "larger than 1048576 bytes")

	// A GET is repeated after a 502; the proxy's page is not the API's error body.
	_, err = c.Organisations(ctx)
	var ae *client.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadGateway, ae.Status)
	require.Empty(t, ae.Code)
	require.Contains(t, ae.Message, "502 Bad Gateway")
	require.Equal(t, int32(3), hits.Swap(0))

	// A POST without a key (login) is not repeated.
	_, err = c.Login(ctx, "ada@example.com", "pw")
	require.True(t, client.IsStatus(err, http.StatusServiceUnavailable), "%v", err)
	require.Equal(t, int32(1), hits.Load())

	// Nothing listens here.
	dead, err := client.New("http://127.0.0.1:1", "nbl_x", client.WithRetries(0, 0))
	require.NoError(t, err)
	_, err = dead.Me(ctx)
	require.ErrorContains(t, err, "cannot reach the control plane at http://127.0.0.1:1")
	require.False(t, errors.As(err, &ae))

	for _, bad := range []string{"", "example.com", "ftp://example.com", "http://", "http://u:p@example.com"} {
		_, err := client.New(bad, "")
		require.Error(t, err, bad)
	}
}

// countingTransport counts the requests it sends.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// A list the API sends in pages comes back whole: the client follows next,
// page after page, and a captured body is the array of every item.
func TestListsFollowEveryPage(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.Setup(t, "ada@example.com", "acme")
	ctx := t.Context()
	full, err := client.New(srv.URL, token)
	require.NoError(t, err)
	var want []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		_, err := full.CreateProject(ctx, "acme", name)
		require.NoError(t, err)
		want = append(want, name)
	}
	rt := &countingTransport{}
	c, err := client.New(srv.URL, token, client.WithPageSize(2), client.WithHTTPClient(&http.Client{Transport: rt}))
	require.NoError(t, err)
	var raw []byte
	ps, err := c.Projects(client.CaptureBody(ctx, &raw), "acme")
	require.NoError(t, err)
	var got []string
	for _, p := range ps {
		got = append(got, p.Name)
	}
	require.Equal(t, want, got)
	require.EqualValues(t, 3, rt.n.Load(), "three pages of two")
	var printed []map[string]any
	require.NoError(t, json.Unmarshal(raw, &printed), "the captured body is an array: %s", raw)
	require.Len(t, printed, 5)
	require.Equal(t, "e", printed[4]["name"])

	// An empty list is an empty array, not null.
	raw = nil
	cl, err := c.Clusters(client.CaptureBody(ctx, &raw), "acme")
	require.NoError(t, err)
	require.Empty(t, cl)
	require.Equal(t, "[]", string(raw))
}

// A server whose pages do not advance (the same cursor again, or an empty
// page with a next) gives an error, not a loop that never ends.
func TestAListThatDoesNotAdvanceFails(t *testing.T) {
	t.Parallel()
	for name, page := range map[string]string{
		"same cursor": `{"items":[{"name":"a"}],"next":"c1"}`,
		"empty page":  `{"items":[],"next":"c2"}`,
	} {
		t.Run(name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) > 10 {
					http.Error(w, "read for ever", http.StatusTeapot)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(page))
			}))
			defer srv.Close()
			c, err := client.New(srv.URL, "token")
			require.NoError(t, err)
			_, err = c.Projects(t.Context(), "acme")
			require.ErrorContains(t, err, "does not advance")
			require.LessOrEqual(t, n.Load(), int32(2))
		})
	}
}
