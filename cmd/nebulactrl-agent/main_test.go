package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func runAgent(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBECONFIG", "")
	var out, errb bytes.Buffer
	err := run(context.Background(), append([]string{"nebulactrl-agent"}, args...), &out, &errb)
	return out.String() + errb.String(), err
}

// The agent sends its join token and credential over plain HTTP only to
// loopback, unless the operator says otherwise in so many words; the URL is
// checked before anything is read or sent.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	state := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--url", "http://nebula.example.com"}, "not loopback"},
		{[]string{"--url", "http://nebula.example.com", "--insecure-plain-http"}, "not loopback"},
		{[]string{"--url", "http://10.0.0.1:8080", "--insecure-plain-http"}, "--insecure-plain-http-remote"},
		{[]string{"--url", "http://127.0.0.1:8080"}, "--insecure-plain-http only for loopback"},
		// Past the check, the next thing missing is the cluster.
		{[]string{"--url", "http://127.0.0.1:8080", "--insecure-plain-http"}, "in-cluster"},
		{[]string{"--url", "http://nebula.example.com", "--insecure-plain-http-remote"}, "in-cluster"},
		{[]string{"--url", "https://nebula.example.com"}, "in-cluster"},
	} {
		_, err := runAgent(t, append(tc.args, "--state-dir", state, "--join-token", "nbl_x")...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

func TestHealthCommand(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "health")
	_, err := runAgent(t, "health", "--file", path)
	require.ErrorContains(t, err, "no health file")

	h := newHealthFile(path)
	require.NoError(t, h.write(false, false))
	out, err := runAgent(t, "health", "--file", path)
	require.NoError(t, err, "alive")
	require.Contains(t, out, "not connected")
	_, err = runAgent(t, "health", "--file", path, "--connected")
	require.ErrorContains(t, err, "not connected", "not ready while the link is down")

	require.NoError(t, h.write(true, true))
	out, err = runAgent(t, "health", "--file", path, "--connected")
	require.NoError(t, err)
	require.Contains(t, out, "connected, leading")

	_, err = checkHealth(path, false, healthMaxAge, time.Now().Add(time.Minute))
	require.ErrorContains(t, err, "stuck", "a file not rewritten fails the liveness probe")

	// The agent keeps it fresh with what the link says, and removes it when
	// it stops.
	require.NoError(t, os.Remove(path))
	h.connected.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.keep(ctx, func() bool { return false }, nil); close(done) }()
	require.Eventually(t, func() bool {
		msg, err := checkHealth(path, true, healthMaxAge, time.Now())
		return err == nil && msg == "healthy: connected, standing by"
	}, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// seed copies the binary in a stream (the init container's memory limit is
// well below the binary's size).
func TestSeedCopiesTheBinary(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "nebulactrl-agent")
	_, err := runAgent(t, "seed", dest)
	require.NoError(t, err)
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.ReadFile(self)
	require.NoError(t, err)
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	require.Equal(t, want, got)
	st, err := os.Stat(dest)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm())
}
