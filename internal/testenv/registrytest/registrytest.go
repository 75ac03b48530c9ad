// Package registrytest is the tests' OCI registry: go-containerregistry's
// in-process registry on loopback (plain HTTP), with random images pushed
// to it. It imports nothing of nebulactrl, so that any package's tests
// (internal/image's own among them) may use it.
package registrytest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Handler is a new, empty in-memory registry, quiet (no request log).
func Handler() http.Handler {
	return registry.New(registry.Logger(log.New(io.Discard, "", 0)))
}

// Serve serves handler on loopback until t ends: a registry, or a
// registry's stand-in that misbehaves on purpose.
func Serve(t testing.TB, handler http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// Empty starts an empty registry for t and returns its host:port.
func Empty(t testing.TB) string {
	t.Helper()
	return strings.TrimPrefix(Serve(t, Handler()).URL, "http://")
}

// Start starts a registry for t holding a random image at each
// repository:tag given (api:v1 when none) and returns its host:port.
func Start(t testing.TB, images ...string) string {
	t.Helper()
	host := Empty(t)
	if len(images) == 0 {
		images = []string{"api:v1"}
	}
	for _, repo := range images {
		Push(t, host, repo)
	}
	return host
}

// Push pushes a random image of one layer to host/repoTag (plain HTTP) and
// returns its digest.
func Push(t testing.TB, host, repoTag string) v1.Hash {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("registrytest: pushing %s: %v", repoTag, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
