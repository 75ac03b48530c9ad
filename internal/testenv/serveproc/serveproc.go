// Package serveproc runs `nebula serve`, built from this tree, as a process
// of its own: what a test kills with SIGKILL (a replica that dies, a crash
// between an event and what follows it).
package serveproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
)

// Binary builds nebula from this tree into the test's temporary directory
// (the build cache makes it quick after the first) and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nebula")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebula").CombinedOutput()
	require.NoError(t, err, "go build nebula: %s", out)
	return bin
}

// Process is a running `nebula serve`.
type Process struct {
	// URL is where it answers (plain HTTP on loopback).
	URL  string
	cmd  *exec.Cmd
	out  *lockedbuf.Buffer
	done chan error
}

// Start runs bin (Binary) as `nebula serve` on the database and secret key given, with
// the extra environment (NAME=value), on a free loopback address, and
// returns once it answers. It is killed when the test ends.
func Start(t testing.TB, bin, databaseURL, secretKey string, env ...string) *Process {
	t.Helper()
	dir := t.TempDir()
	addr := FreeAddr(t)
	cmd := exec.Command(bin, "--env-file", filepath.Join(dir, "server.env"), "serve")
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir,
		"NEBULACTRL_DATABASE_URL=" + databaseURL, "NEBULACTRL_SECRET_KEY=" + secretKey,
		"NEBULACTRL_LISTEN=" + addr, "NEBULACTRL_METRICS_LISTEN=" + FreeAddr(t), "NEBULACTRL_PUBLIC_URL=http://" + addr,
		"NEBULACTRL_DATA_DIR=" + filepath.Join(dir, "data"), "NEBULACTRL_LOG_LEVEL=warn"}, env...)
	p := &Process{URL: "http://" + addr, cmd: cmd, out: &lockedbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(t, cmd.Start())
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		err := <-p.done
		p.done <- err
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		if resp, err := http.Get(p.URL + "/api/v1/openapi.json"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("nebula serve exited (%v):\n%s", err, p.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nebula serve did not answer within 90 s:\n%s", p.out.String())
		}
	}
}

// Output is what the process wrote so far.
func (p *Process) Output() string { return p.out.String() }

// Kill kills the process with SIGKILL and waits for it to be gone.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("nebula serve did not die of SIGKILL within 30 s")
	}
}

// FreeAddr is a free loopback address for a server to listen on. The port
// is below Linux's ephemeral range (32768-60999): a port the kernel handed
// out for :0 and that the test closed again can be taken by any outgoing
// connection before the server binds it (seen in CI, with the other
// packages' tests running alongside); one outside that range only by an
// explicit bind.
func FreeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return ""
}
