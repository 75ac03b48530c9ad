// Package dockertest starts a real Docker engine for a test: Debian's
// dockerd (docker.io) with its own data root, exec root, socket and log in a
// temporary directory, and a docker CLI configuration whose cli-plugins
// holds the Compose v2 plugin that scripts/ensure-docker.sh builds. It is
// started with --iptables=false, --ip-forward=false and --bridge=none, so
// the host's ruleset, sysctls and links are untouched: containers use
// user-defined networks (Compose's) or the host's network, and published
// ports go through docker-proxy. At the end of the test every container and
// network is removed, the daemon is stopped (SIGTERM, then SIGKILL), what it
// left mounted under its directory is unmounted and the directory removed.
//
// A missing part (dockerd, the docker CLI, the Compose plugin, root) fails
// the test: `go tool task docker` installs them.
package dockertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ComposeVersion is the Compose v2 release scripts/ensure-docker.sh builds.
const ComposeVersion = "v2.40.3"

// Engine is a running dockerd.
type Engine struct {
	// Dir holds the daemon's data and exec roots, socket, log and the CLI's
	// configuration.
	Dir string
	// Host is DOCKER_HOST (unix://.../docker.sock).
	Host string
	// Env is what a docker command needs to talk to this engine with
	// Compose v2: DOCKER_HOST and DOCKER_CONFIG.
	Env []string
	// Docker is the docker CLI's path.
	Docker string

	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// ComposeDir is where scripts/ensure-docker.sh puts Compose:
// $NEBULACTRL_COMPOSE_DIR, else ~/.cache/nebulactrl/compose-<version>.
func ComposeDir() string {
	if d := os.Getenv("NEBULACTRL_COMPOSE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "nebulactrl", "compose-"+ComposeVersion)
}

func lookDockerd() (string, error) {
	if p, err := exec.LookPath("dockerd"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/dockerd", "/usr/bin/dockerd"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("dockerd is not installed")
}

// Start starts an engine for t and stops it when t ends.
func Start(t testing.TB) *Engine {
	t.Helper()
	const fix = " (go tool task docker installs Debian's docker.io and builds Compose " + ComposeVersion + ")"
	if os.Geteuid() != 0 {
		t.Fatal("dockertest: dockerd needs root")
	}
	dockerd, err := lookDockerd()
	if err != nil {
		t.Fatal("dockertest: " + err.Error() + fix)
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatal("dockertest: the docker CLI is not installed" + fix)
	}
	plugin := filepath.Join(ComposeDir(), "cli-plugins", "docker-compose")
	if _, err := os.Stat(plugin); err != nil {
		t.Fatalf("dockertest: Docker Compose %s is missing at %s%s", ComposeVersion, plugin, fix)
	}
	// A short path: the daemon's and containerd's sockets live under it.
	dir, err := newEngineDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config")
	if err := os.MkdirAll(filepath.Join(cfg, "cli-plugins"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(plugin, filepath.Join(cfg, "cli-plugins", "docker-compose")); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "docker.sock")
	e := &Engine{Dir: dir, Host: "unix://" + sock, Docker: docker, done: make(chan struct{}), log: filepath.Join(dir, "dockerd.log")}
	e.Env = []string{"DOCKER_HOST=" + e.Host, "DOCKER_CONFIG=" + cfg}
	logf, err := os.Create(e.log)
	if err != nil {
		t.Fatal(err)
	}
	e.cmd = exec.Command(dockerd,
		"--data-root", filepath.Join(dir, "data"),
		"--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "docker.pid"),
		"-H", e.Host,
		// The host's ruleset, ip_forward and links stay as they are.
		"--iptables=false", "--ip6tables=false", "--ip-forward=false", "--bridge=none",
		"--log-level", "warn",
	)
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	// Its own process group: a test's Ctrl-C is for the test.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		t.Fatalf("dockertest: starting dockerd: %v", err)
	}
	go func() { _ = e.cmd.Wait(); logf.Close(); close(e.done) }()
	t.Cleanup(func() { e.stop(t) })

	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}, Timeout: 2 * time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := client.Get("http://docker/_ping")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-e.done:
			t.Fatalf("dockertest: dockerd exited at start:\n%s", e.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockertest: dockerd did not answer on %s within 90s:\n%s", sock, e.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, err := e.Run("compose", "version")
	if err != nil || !strings.Contains(out, ComposeVersion) {
		t.Fatalf("dockertest: docker compose version: %v: %s", err, out)
	}
	return e
}

// Log is the daemon's log.
func (e *Engine) Log() string {
	b, _ := os.ReadFile(e.log)
	return string(b)
}

// Command is a docker command against this engine.
func (e *Engine) Command(args ...string) *exec.Cmd {
	cmd := exec.Command(e.Docker, args...)
	cmd.Env = append(os.Environ(), e.Env...)
	return cmd
}

// Run runs docker with args and returns its combined output.
func (e *Engine) Run(args ...string) (string, error) {
	out, err := e.Command(args...).CombinedOutput()
	return string(out), err
}

// Must runs docker with args, failing t when it fails, and returns its
// standard output, trimmed.
func (e *Engine) Must(t testing.TB, args ...string) string {
	t.Helper()
	cmd := e.Command(args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// Load loads a docker-loadable tarball (docker save's form, or an OCI
// layout with a manifest.json) and returns what docker load printed.
func (e *Engine) Load(t testing.TB, tarball string) string {
	t.Helper()
	return e.Must(t, "load", "--input", tarball)
}

func (e *Engine) stop(t testing.TB) {
	if t.Failed() {
		t.Logf("dockerd's log (%s):\n%s", e.log, tail(e.Log(), 8000))
	}
	running := true
	select {
	case <-e.done:
		running = false
	default:
	}
	var links []string
	if running {
		// Containers first (a restart policy would bring them back at the
		// daemon's next start, and their stop would wait for PID 1), then
		// the networks, whose bridges the daemon does not remove at its stop.
		if ids, err := e.Run("ps", "--all", "--quiet"); err == nil && strings.TrimSpace(ids) != "" {
			_, _ = e.Run(append([]string{"rm", "--force", "--volumes"}, strings.Fields(ids)...)...)
		}
		if ids, err := e.Run("network", "ls", "--quiet", "--no-trunc", "--filter", "type=custom"); err == nil {
			for _, id := range strings.Fields(ids) {
				if len(id) >= 12 {
					links = append(links, "br-"+id[:12])
				}
			}
		}
		_, _ = e.Run("network", "prune", "--force")
		_ = e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
			<-e.done
		}
	}
	// Its containerd, shims and docker-proxy are children of the daemon's
	// process group or gone with it.
	_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	for _, l := range links {
		if _, err := net.InterfaceByName(l); err == nil {
			_ = exec.Command("ip", "link", "delete", l).Run()
		}
	}
	unmountUnder(e.Dir)
	if err := os.RemoveAll(e.Dir); err != nil {
		t.Errorf("dockertest: removing %s: %v", e.Dir, err)
	}
}

// unmountUnder lazily unmounts every mount below dir, deepest first.
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var under []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			under = append(under, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	for _, m := range under {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// String names the engine in messages.
func (e *Engine) String() string { return fmt.Sprintf("dockerd at %s", e.Host) }
