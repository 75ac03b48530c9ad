package image

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
)

// secret is what a service on the control plane's own network answers; it
// must never reach an error message.
const secret = "INTERNAL-ANSWER-7f3a"

// internalService answers every request with the secret and counts them.
func internalService(t *testing.T) (host string, hits *atomic.Int64) {
	t.Helper()
	hits = new(atomic.Int64)
	srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(secret))
	}))
	return strings.TrimPrefix(srv.URL, "http://"), hits
}

func requireRefused(t *testing.T, err error, ref string) {
	t.Helper()
	require.Error(t, err, ref)
	require.ErrorIs(t, err, ErrAddressRefused, ref)
	require.ErrorIs(t, err, ErrUnreachable, "the API maps refusals like any unreachable registry")
	require.Contains(t, err.Error(), ref)
	require.Contains(t, err.Error(), "NEBULACTRL_ALLOWED_REGISTRIES", "the message says how an operator allows it")
	require.NotContains(t, err.Error(), secret)
}

// The finding: a Member named 127.0.0.1:<port> and read the answer
// back. Unlisted, nothing is even connected to.
func TestUnlistedLoopbackRegistryIsRefused(t *testing.T) {
	t.Parallel()
	host, hits := internalService(t)
	_, port, _ := net.SplitHostPort(host)
	r := newTestResolver() // nothing listed
	for _, ref := range []string{host + "/api:v1", "localhost:" + port + "/api:v1", "[::1]:" + port + "/api:v1"} {
		_, err := r.Resolve(t.Context(), ref)
		requireRefused(t, err, ref)
		require.Contains(t, err.Error(), "loopback")
	}
	require.Zero(t, hits.Load(), "no request reached the loopback service")
}

func TestLinkLocalMetadataAndOtherAddressesAreRefused(t *testing.T) {
	t.Parallel()
	r := newTestResolver()
	for ref, why := range map[string]string{
		"169.254.169.254/latest:v1":         "metadata",
		"169.254.10.20:5000/api:v1":         "link-local",
		"[fe80::1]:5000/api:v1":             "link-local",
		"[fd00:ec2::254]/api:v1":            "metadata",
		"metadata.google.internal/api:v1":   "metadata",
		"metadata.google.internal./api:v1":  "metadata",
		"0.0.0.0:5000/api:v1":               "unspecified",
		"[::]:5000/api:v1":                  "unspecified",
		"224.0.0.1:5000/api:v1":             "multicast",
		"[::ffff:127.0.0.1]:5000/api:v1":    "loopback",
		"[::ffff:169.254.169.254]/x/api:v1": "metadata",
	} {
		start := time.Now()
		_, err := r.Resolve(t.Context(), ref)
		requireRefused(t, err, ref)
		require.Contains(t, err.Error(), why, ref)
		require.Less(t, time.Since(start), 3*time.Second, "refused before any connection attempt: %s", ref)
	}
}

func TestDenyPrivateRefusesPrivateRanges(t *testing.T) {
	t.Parallel()
	r := NewResolver(Config{Keychain: emptyKeychain(), Timeout: 5 * time.Second, DenyPrivate: true})
	for _, ref := range []string{"10.1.2.3:5000/api:v1", "192.168.1.1/api:v1", "172.20.0.1/api:v1", "[fd12::1]:5000/api:v1", "100.64.0.1/api:v1"} {
		_, err := r.Resolve(t.Context(), ref)
		requireRefused(t, err, ref)
		require.Contains(t, err.Error(), "private", ref)
	}
}

func TestAddressPolicy(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1":       "loopback",
		"127.255.0.9":     "loopback",
		"::1":             "loopback",
		"::ffff:7f00:1":   "loopback",
		"0.0.0.0":         "unspecified",
		"0.1.2.3":         "unspecified",
		"::":              "unspecified",
		"169.254.169.254": "metadata",
		"fd00:ec2::254":   "metadata",
		"100.100.100.200": "metadata",
		"169.254.0.1":     "link-local",
		"fe80::abcd":      "link-local",
		"ff02::1":         "multicast",
		"239.1.1.1":       "multicast",
		"255.255.255.255": "broadcast",
		"::169.254.1.1":   "link-local",
		// Allowed by default: public and private networks.
		"93.184.216.34": "",
		"2606:4700::1":  "",
		"10.0.0.5":      "",
		"172.16.3.4":    "",
		"192.168.0.10":  "",
		"fd12:3456::1":  "",
		"100.64.1.1":    "",
	} {
		got := addrRefusal(netip.MustParseAddr(addr), false)
		if want == "" {
			require.Empty(t, got, addr)
		} else {
			require.Contains(t, got, want, addr)
		}
	}
	for _, addr := range []string{"10.0.0.5", "172.31.255.255", "192.168.0.10", "fd12:3456::1", "100.64.1.1"} {
		require.Contains(t, addrRefusal(netip.MustParseAddr(addr), true), "private", addr)
	}
	require.Empty(t, addrRefusal(netip.MustParseAddr("93.184.216.34"), true))

	// The dialer's Control hook, which sees the address actually dialed.
	g := newGuard(newHostList(), false, nil)
	require.ErrorIs(t, g.control("tcp4", "127.0.0.1:443", nil), ErrAddressRefused)
	require.ErrorIs(t, g.control("tcp6", "[::1]:443", nil), ErrAddressRefused)
	require.ErrorIs(t, g.control("tcp4", "169.254.169.254:80", nil), ErrAddressRefused)
	require.NoError(t, g.control("tcp4", "93.184.216.34:443", nil))
}

func TestHostList(t *testing.T) {
	t.Parallel()
	l := newHostList([]string{" Registry.Local ", "127.0.0.1:5000", "[::1]:5001", "[fe80::1]"}, nil)
	require.True(t, l.contains("registry.local:443"))
	require.True(t, l.contains("REGISTRY.local:5000"))
	require.True(t, l.contains("127.0.0.1:5000"))
	require.False(t, l.contains("127.0.0.1:5001"))
	require.True(t, l.contains("[::1]:5001"))
	require.True(t, l.contains("[fe80::1]:443"))
	require.False(t, l.contains("other:443"))
}

// Listed as insecure (the development setting the tests use) or as allowed,
// a loopback registry works.
func TestListedLoopbackRegistryWorks(t *testing.T) {
	t.Parallel()
	reg := newTestRegistry(t)
	got, err := newTestResolver(reg.host).Resolve(t.Context(), reg.host+"/api:v1")
	require.NoError(t, err)
	require.Equal(t, reg.host+"/api@"+reg.digest.String(), got)

	// Over TLS, listed only as allowed (by host:port, then by host).
	srv := httptest.NewTLSServer(registrytest.Handler())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "https://")
	base := srv.Client().Transport.(*http.Transport)
	img, err := random.Image(256, 1)
	require.NoError(t, err)
	tag, err := name.NewTag(host + "/api:v1")
	require.NoError(t, err)
	require.NoError(t, remote.Write(tag, img, remote.WithContext(t.Context()), remote.WithTransport(base)))
	digest, err := img.Digest()
	require.NoError(t, err)

	for _, allowed := range []string{host, "127.0.0.1"} {
		r := NewResolver(Config{Allowed: []string{allowed}, Transport: base, Keychain: emptyKeychain(), Timeout: 5 * time.Second})
		got, err := r.Resolve(t.Context(), host+"/api:v1")
		require.NoError(t, err, allowed)
		require.Equal(t, host+"/api@"+digest.String(), got)
	}
	_, err = NewResolver(Config{Transport: base, Keychain: emptyKeychain(), Timeout: 5 * time.Second}).Resolve(t.Context(), host+"/api:v1")
	requireRefused(t, err, host+"/api:v1")
}

// A listed registry cannot hand the control plane on to an unlisted loopback
// or metadata address: not by a redirect, not by its token service.
func TestRedirectAndTokenRealmToRefusedAddresses(t *testing.T) {
	t.Parallel()
	internal, hits := internalService(t)
	_, internalPort, _ := net.SplitHostPort(internal)
	for name, handler := range map[string]http.HandlerFunc{
		"redirect to loopback": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Redirect(w, r, "https://"+internal+"/v2/api/manifests/v1", http.StatusTemporaryRedirect)
		},
		"redirect to metadata address": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		},
		"redirect to metadata name": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Redirect(w, r, "https://metadata.google.internal/computeMetadata/v1/", http.StatusFound)
		},
		"redirect to localhost": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				w.WriteHeader(http.StatusOK)
				return
			}
			http.Redirect(w, r, "https://localhost:"+internalPort+"/v2/api/manifests/v1", http.StatusFound)
		},
		"token realm on loopback": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+internal+`/token",service="x"`)
			w.WriteHeader(http.StatusUnauthorized)
		},
		"token realm on localhost": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="https://localhost:`+internalPort+`/token",service="x"`)
			w.WriteHeader(http.StatusUnauthorized)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := registrytest.Serve(t, handler)
			host := strings.TrimPrefix(srv.URL, "http://")
			ref := host + "/api:v1"
			start := time.Now()
			_, err := newTestResolver(host).Resolve(t.Context(), ref)
			requireRefused(t, err, ref)
			require.Contains(t, err.Error(), "sent the request on to a")
			require.Less(t, time.Since(start), 4*time.Second)
		})
	}
	require.Zero(t, hits.Load(), "no request reached the loopback service")
}

// Plain HTTP only to registries listed as insecure: not by
// go-containerregistry's own fallback for private and loopback addresses, not
// by a redirect.
func TestPlainHTTPOnlyToInsecureRegistries(t *testing.T) {
	t.Parallel()
	internal, hits := internalService(t)
	// Allowed (any address) but not insecure: HTTPS only.
	_, err := NewResolver(Config{Allowed: []string{internal}, Keychain: emptyKeychain(), Timeout: 5 * time.Second}).
		Resolve(t.Context(), internal+"/api:v1")
	require.ErrorIs(t, err, ErrUnreachable)
	require.NotErrorIs(t, err, ErrAddressRefused)
	require.NotContains(t, err.Error(), secret)
	require.Contains(t, err.Error(), "NEBULACTRL_INSECURE_REGISTRIES")

	// A listed insecure registry redirecting to plain HTTP elsewhere.
	srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK)
			return
		}
		http.Redirect(w, r, "http://registry.example.com/v2/api/manifests/v1", http.StatusFound)
	}))
	host := strings.TrimPrefix(srv.URL, "http://")
	_, err = newTestResolver(host, internal).Resolve(t.Context(), host+"/api:v1")
	require.ErrorIs(t, err, ErrUnreachable)
	require.Contains(t, err.Error(), "sent the request on to a plain-HTTP address")
	require.Zero(t, hits.Load())
}

// Whatever a registry answers, the error names the registry and the status
// and never repeats the body.
func TestErrorsNeverEchoTheRemoteBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status      int
		contentType string
		body        string
		want        string
	}{
		{http.StatusInternalServerError, "text/plain", secret, "HTTP 500"},
		{http.StatusBadRequest, "text/html", "<h1>" + secret + "</h1>", "HTTP 400"},
		{http.StatusUnauthorized, "application/json", `{"errors":[{"code":"UNAUTHORIZED","message":"` + secret + `"}]}`, "HTTP 401"},
		{http.StatusForbidden, "application/json", `{"errors":[{"code":"DENIED","message":"` + secret + `"}]}`, "HTTP 403"},
		{http.StatusNotFound, "application/json", `{"errors":[{"code":"MANIFEST_UNKNOWN","message":"` + secret + `"}]}`, "not found"},
		{http.StatusTeapot, "application/json", `{"errors":[{"code":"` + secret + `","message":"` + secret + `"}]}`, "HTTP 418"},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			t.Parallel()
			errorBodyCase(t, tc.status, tc.contentType, tc.body, tc.want)
		})
	}
}

func errorBodyCase(t *testing.T, status int, contentType, body, want string) {
	{
		srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.Header().Set("Content-Type", contentType)
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(body))
			}
		}))
		host := strings.TrimPrefix(srv.URL, "http://")
		ref := host + "/api:v1"
		_, err := newTestResolver(host).Resolve(t.Context(), ref)
		require.Error(t, err)
		require.Contains(t, err.Error(), want, "%d %s", status, body)
		require.Contains(t, err.Error(), ref)
		require.NotContains(t, err.Error(), secret, "%d %s: %s", status, body, err)
	}
}

// A request through a proxy is checked before it is handed to the proxy.
func TestProxiedRequestsAreChecked(t *testing.T) {
	t.Parallel()
	proxyHits := new(atomic.Int64)
	proxy := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		proxyHits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	pu, _ := url.Parse(proxy.URL)
	base := remote.DefaultTransport.(*http.Transport).Clone()
	base.Proxy = http.ProxyURL(pu)
	r := NewResolver(Config{Transport: base, Keychain: emptyKeychain(), Timeout: 5 * time.Second})
	for _, ref := range []string{"127.0.0.1:5000/api:v1", "169.254.169.254/api:v1", "metadata.google.internal/api:v1"} {
		_, err := r.Resolve(t.Context(), ref)
		requireRefused(t, err, ref)
	}
	require.Zero(t, proxyHits.Load())

	// The proxy itself may be on loopback (an operator's choice): a public
	// registry name goes to it.
	_, err := r.Resolve(t.Context(), "registry.example.com/api:v1")
	require.NotErrorIs(t, err, ErrAddressRefused)
	require.Positive(t, proxyHits.Load())
}

// basicAuthRegistry is the in-process registry behind HTTP basic auth.
func basicAuthRegistry(t *testing.T, user, pass string) testRegistry {
	t.Helper()
	reg := registrytest.Handler()
	open := registrytest.Serve(t, reg)
	locked := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"` + secret + `"}]}`))
			return
		}
		reg.ServeHTTP(w, r)
	}))
	// Both servers share one store: push through the open one.
	d := registrytest.Push(t, strings.TrimPrefix(open.URL, "http://"), "private/api:v1")
	return testRegistry{host: strings.TrimPrefix(locked.URL, "http://"), digest: d}
}

func TestRegistryCredentials(t *testing.T) {
	t.Parallel()
	reg := basicAuthRegistry(t, "ci", "s3cr3t-pass")
	ref := reg.host + "/private/api:v1"
	want := reg.host + "/private/api@" + reg.digest.String()
	resolve := func(cfg Config) (string, error) {
		cfg.Insecure = []string{reg.host}
		cfg.Timeout = 5 * time.Second
		if cfg.Keychain == nil {
			cfg.Keychain = emptyKeychain()
		}
		return NewResolver(cfg).Resolve(t.Context(), ref)
	}

	_, err := resolve(Config{})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Contains(t, err.Error(), "HTTP 401")
	require.NotContains(t, err.Error(), secret)

	// From the environment variable's JSON.
	auth, err := ParseAuth(`{"` + reg.host + `": {"username": "ci", "password": "s3cr3t-pass"}}`)
	require.NoError(t, err)
	got, err := resolve(Config{Auth: auth})
	require.NoError(t, err)
	require.Equal(t, want, got)

	wrong, err := ParseAuth(`{"` + reg.host + `": {"username": "ci", "password": "nope"}}`)
	require.NoError(t, err)
	_, err = resolve(Config{Auth: wrong})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.NotContains(t, err.Error(), "nope", "a password never reaches an error")

	// From a Docker config file, as `docker login` writes it.
	file := filepath.Join(t.TempDir(), "config.json")
	cfgJSON, _ := json.Marshal(map[string]any{"auths": map[string]any{
		reg.host: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte("ci:s3cr3t-pass"))},
	}})
	require.NoError(t, os.WriteFile(file, cfgJSON, 0o600))
	got, err = resolve(Config{AuthFile: file})
	require.NoError(t, err)
	require.Equal(t, want, got)

	// The environment's credentials come first; the file is read at every
	// resolve, so a fixed file is picked up without a restart.
	got, err = resolve(Config{AuthFile: file, Auth: wrong})
	require.ErrorIs(t, err, ErrUnauthorized, "the environment's credentials are asked first: %s", got)

	missing := filepath.Join(t.TempDir(), "missing.json")
	_, err = resolve(Config{AuthFile: missing})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Contains(t, err.Error(), missing)
	require.Contains(t, err.Error(), "does not exist")

	require.NoError(t, os.WriteFile(missing, []byte(`{"auths": nope s3cr3t-pass`), 0o600))
	_, err = resolve(Config{AuthFile: missing})
	require.Contains(t, err.Error(), "not a Docker config file")
	require.NotContains(t, err.Error(), "s3cr3t-pass")

	// The default keychain (the user's Docker config) is used without a file.
	got, err = resolve(Config{Keychain: staticKeychain{reg.host: authn.AuthConfig{Username: "ci", Password: "s3cr3t-pass"}}})
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestParseAuth(t *testing.T) {
	t.Parallel()
	got, err := ParseAuth("")
	require.NoError(t, err)
	require.Empty(t, got)

	got, err = ParseAuth(`{"Registry.Example.com:5000": {"username": "u", "password": "p"},
		"https://index.docker.io/v1/": {"auth": "dTpw"}, "ghcr.io": {"identitytoken": "tok"}}`)
	require.NoError(t, err)
	require.Equal(t, map[string]authn.AuthConfig{
		"registry.example.com:5000": {Username: "u", Password: "p"},
		name.DefaultRegistry:        {Auth: "dTpw"},
		"ghcr.io":                   {IdentityToken: "tok"},
	}, got)

	got, err = ParseAuth(`{"auths": {"docker.io": {"username": "u", "password": "p"}}}`)
	require.NoError(t, err)
	require.Equal(t, map[string]authn.AuthConfig{name.DefaultRegistry: {Username: "u", Password: "p"}}, got)

	for _, bad := range []string{
		`hunter2-secret`,
		`["hunter2-secret"]`,
		`{"r.example.com": "hunter2-secret"}`,
		`{"r.example.com": {"username": "u"}}`,
		`{"r.example.com": {"password": "hunter2-secret"}}`,
		`{"r.example.com": {}}`,
		`{"": {"username": "u", "password": "hunter2-secret"}}`,
	} {
		_, err := ParseAuth(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "hunter2-secret", "an error never quotes a password")
	}
}
