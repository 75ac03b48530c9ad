package servertest

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry starts an in-process OCI registry on loopback for t, holding a
// random image at each repository:tag given (api:v1 when none), and
// returns its host:port (plain HTTP: give it to Options.Insecure).
func Registry(t testing.TB, images ...string) string {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	if len(images) == 0 {
		images = []string{"api:v1"}
	}
	for _, repo := range images {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := name.NewTag(host+"/"+repo, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(tag, img, remote.WithContext(t.Context())); err != nil {
			t.Fatalf("servertest: pushing %s: %v", repo, err)
		}
	}
	return host
}
