package registrytest_test

import (
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
)

func digestOf(t *testing.T, ref string) (string, error) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	desc, err := remote.Head(r, remote.WithContext(t.Context()))
	if err != nil {
		return "", err
	}
	return desc.Digest.String(), nil
}

// Start holds api:v1 by default, or the images asked for, and Push adds one
// whose digest it returns.
func TestStartAndPush(t *testing.T) {
	t.Parallel()
	host := registrytest.Start(t)
	_, err := digestOf(t, host+"/api:v1")
	require.NoError(t, err, "api:v1 when no image is named")

	host = registrytest.Start(t, "worker:v2", "db:v3")
	for _, ref := range []string{"worker:v2", "db:v3"} {
		_, err := digestOf(t, host+"/"+ref)
		require.NoError(t, err, ref)
	}
	_, err = digestOf(t, host+"/api:v1")
	require.Error(t, err, "only the images named")

	pushed := registrytest.Push(t, host, "extra:1")
	got, err := digestOf(t, host+"/extra:1")
	require.NoError(t, err)
	require.Equal(t, pushed.String(), got)
	require.NotEqual(t, pushed, registrytest.Push(t, host, "extra:2"), "each image is random")
}

// An empty registry answers the API and holds nothing; Serve serves any
// handler.
func TestEmptyAndServe(t *testing.T) {
	t.Parallel()
	host := registrytest.Empty(t)
	resp, err := http.Get("http://" + host + "/v2/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, err = digestOf(t, host+"/api:v1")
	require.Error(t, err)

	srv := registrytest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	resp, err = http.Get(srv.URL + "/v2/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTeapot, resp.StatusCode)
}
