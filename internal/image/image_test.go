package image

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
)

// emptyKeychain keeps the tests hermetic: authn.DefaultKeychain would read the
// Docker config of whoever runs them.
func emptyKeychain() authn.Keychain { return authn.NewMultiKeychain() }

// testRegistry is go-containerregistry's in-process registry holding one
// random image pushed as <host>/api:v1.
type testRegistry struct {
	host   string // 127.0.0.1:PORT
	digest v1.Hash
}

func newTestRegistry(t *testing.T) testRegistry {
	t.Helper()
	host := registrytest.Empty(t)
	return testRegistry{host: host, digest: registrytest.Push(t, host, "api:v1")}
}

// setup is what most resolver tests start from: a registry holding a
// random api:v1, and a resolver that reaches it over plain HTTP.
func setup(t *testing.T) (testRegistry, *Resolver) {
	t.Helper()
	reg := newTestRegistry(t)
	return reg, newTestResolver(reg.host)
}

func newTestResolver(hosts ...string) *Resolver {
	return NewResolver(Config{Insecure: hosts, Keychain: emptyKeychain(), Timeout: 5 * time.Second})
}

func TestNewResolverDefaults(t *testing.T) {
	t.Parallel()
	r := NewResolver(Config{})
	require.Equal(t, DefaultTimeout, r.cfg.Timeout)
	require.Equal(t, 20*time.Second, r.cfg.Timeout)
	require.Equal(t, authn.DefaultKeychain, r.cfg.Keychain)
	require.Equal(t, "nebulactrl", r.cfg.UserAgent)
	require.Nil(t, r.cfg.Transport)

	hosts := []string{" LocalHost:5000 "}
	r = NewResolver(Config{Insecure: hosts, Timeout: time.Second, UserAgent: "x"})
	hosts[0] = "changed:1"
	require.Equal(t, time.Second, r.cfg.Timeout)
	require.Equal(t, "x", r.cfg.UserAgent)
	require.True(t, r.insecure["localhost:5000"], "hosts are matched case-insensitively")
	require.False(t, r.insecure["changed:1"], "the resolver must not share the caller's slice")
}

func TestResolveTag(t *testing.T) {
	t.Parallel()
	reg, r := setup(t)

	got, err := r.Resolve(t.Context(), reg.host+"/api:v1")
	require.NoError(t, err)
	require.Contains(t, got, "@sha256:")
	require.Equal(t, reg.host+"/api@"+reg.digest.String(), got)
	require.True(t, IsPinned(got))

	d, err := name.NewDigest(got)
	require.NoError(t, err)
	require.Equal(t, reg.digest.String(), d.DigestStr())
}

func TestResolveDigestForms(t *testing.T) {
	t.Parallel()
	reg, r := setup(t)
	want := reg.host + "/api@" + reg.digest.String()

	for _, ref := range []string{
		want,
		reg.host + "/api:v1@" + reg.digest.String(),
		// The tag is ignored when a digest is present, as Docker does: the
		// digest alone decides what runs.
		reg.host + "/api:does-not-exist@" + reg.digest.String(),
	} {
		got, err := r.Resolve(t.Context(), ref)
		require.NoError(t, err, ref)
		require.Equal(t, want, got, ref)
	}
}

func TestResolveLocalhostName(t *testing.T) {
	t.Parallel()
	reg := newTestRegistry(t)
	_, port, err := net.SplitHostPort(reg.host)
	require.NoError(t, err)
	host := "localhost:" + port
	r := newTestResolver(host)

	got, err := r.Resolve(t.Context(), host+"/api:v1")
	require.NoError(t, err)
	require.Equal(t, host+"/api@"+reg.digest.String(), got)
}

func TestResolveNotFound(t *testing.T) {
	t.Parallel()
	reg, r := setup(t)

	ref := reg.host + "/api:v2"
	_, err := r.Resolve(t.Context(), ref)
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), `"`+ref+`"`)
	require.Contains(t, err.Error(), "no manifest for tag v2")

	ref = reg.host + "/nope:v1"
	_, err = r.Resolve(t.Context(), ref)
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), ref)
	require.Contains(t, err.Error(), "repository "+reg.host+"/nope does not exist")

	missing := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	ref = reg.host + "/api@" + missing.String()
	_, err = r.Resolve(t.Context(), ref)
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), ref)
	require.Contains(t, err.Error(), "no manifest with digest "+missing.String())
}

func TestResolveInvalidReference(t *testing.T) {
	t.Parallel()
	r := newTestResolver()
	for _, ref := range []string{
		"",
		" ",
		"UPPER/case:tag",
		"a b",
		"api:v1\n",
		"\tapi:v1",
		"::",
		"api:",
		"api@sha256:short",
		"http://localhost:5000/api:v1",
		"localhost:5000/api:" + strings.Repeat("t", 200),
		"localhost:5000/" + strings.Repeat("a", MaxReferenceLength),
	} {
		_, err := r.Resolve(t.Context(), ref)
		require.ErrorIs(t, err, ErrInvalidReference, "%q", ref)
		require.False(t, IsPinned(ref), "%q", ref)
	}
}

func TestIsPinned(t *testing.T) {
	t.Parallel()
	sha := "sha256:" + strings.Repeat("0", 64)
	for ref, want := range map[string]bool{
		"localhost:5000/api@" + sha:    true,
		"localhost:5000/api:v1@" + sha: true,
		"nginx@" + sha:                 true,
		"localhost:5000/api:v1":        false,
		"nginx":                        false,
		"nginx@sha256:abc":             false,
		"":                             false,
	} {
		require.Equal(t, want, IsPinned(ref), ref)
	}
}

func TestResolveUnauthorized(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code, challenge string
		status                int
	}{
		{"basic challenge", "UNAUTHORIZED", `Basic realm="test"`, http.StatusUnauthorized},
		{"no challenge", "UNAUTHORIZED", "", http.StatusUnauthorized},
		{"denied", "DENIED", "", http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if tc.challenge != "" {
					w.Header().Set("WWW-Authenticate", tc.challenge)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(`{"errors":[{"code":"` + tc.code + `","message":"authentication required"}]}`))
			}))
			host := strings.TrimPrefix(srv.URL, "http://")
			ref := host + "/private:v1"

			_, err := newTestResolver(host).Resolve(t.Context(), ref)
			require.ErrorIs(t, err, ErrUnauthorized)
			require.NotErrorIs(t, err, ErrNotFound)
			require.Contains(t, err.Error(), ref)
		})
	}
}

// A registry whose HEAD answers lack Docker-Content-Digest (some proxies
// strip it) must still resolve, through GET.
func TestResolveHeadWithoutDigest(t *testing.T) {
	t.Parallel()
	regHandler := registrytest.Handler()
	srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodHead {
			w = stripDigest{w}
		}
		regHandler.ServeHTTP(w, req)
	}))
	host := strings.TrimPrefix(srv.URL, "http://")
	digest := registrytest.Push(t, host, "api:v1")

	got, err := newTestResolver(host).Resolve(t.Context(), host+"/api:v1")
	require.NoError(t, err)
	require.Equal(t, host+"/api@"+digest.String(), got)
}

type stripDigest struct{ http.ResponseWriter }

func (s stripDigest) WriteHeader(code int) {
	s.Header().Del("Docker-Content-Digest")
	s.ResponseWriter.WriteHeader(code)
}

func TestResolveUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host := ln.Addr().String()
	require.NoError(t, ln.Close())

	r := NewResolver(Config{Insecure: []string{host}, Keychain: emptyKeychain(), Timeout: 2 * time.Second})
	ref := host + "/api:v1"
	_, err = r.Resolve(t.Context(), ref)
	require.ErrorIs(t, err, ErrUnreachable)
	require.Contains(t, err.Error(), ref)
	require.Contains(t, err.Error(), "unreachable")
}

// hangingRegistry accepts connections and never answers until the test ends.
func hangingRegistry(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	srv := registrytest.Serve(t, http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		select {
		case <-req.Context().Done():
		case <-release:
		}
	}))
	// Cleanups run last-in first-out: release the handlers before srv.Close
	// waits for them.
	t.Cleanup(func() { close(release) })
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestResolveTimeout(t *testing.T) {
	t.Parallel()
	host := hangingRegistry(t)
	r := NewResolver(Config{Insecure: []string{host}, Keychain: emptyKeychain(), Timeout: 300 * time.Millisecond})

	start := time.Now()
	_, err := r.Resolve(t.Context(), host+"/api:v1")
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "did not answer within 300ms")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestResolveContextCanceled(t *testing.T) {
	t.Parallel()
	host := hangingRegistry(t)
	r := newTestResolver(host)

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	_, err := r.Resolve(ctx, host+"/api:v1")
	require.ErrorIs(t, err, context.Canceled)
	require.False(t, errors.Is(err, ErrUnreachable), "the caller's cancellation is not a registry fault")
	require.Contains(t, err.Error(), host+"/api:v1")
	require.Less(t, time.Since(start), 3*time.Second)

	// Already cancelled: no request is attempted to completion.
	_, err = r.Resolve(ctx, host+"/api:v1")
	require.ErrorIs(t, err, context.Canceled)
}
