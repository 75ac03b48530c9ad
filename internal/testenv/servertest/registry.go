package servertest

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
)

// Registry is registrytest.Start (an in-process OCI registry on loopback
// holding a random image at each repository:tag given, api:v1 when none;
// give its host:port to Options.Insecure). It stays here for the tests that
// call servertest.Registry; new code calls registrytest.Start.
func Registry(t testing.TB, images ...string) string {
	t.Helper()
	return registrytest.Start(t, images...)
}
