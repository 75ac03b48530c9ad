package docs_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/serveproc"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// readmeURL is the control plane's address in the README; the test's
// control plane listens elsewhere (8080 may be taken on a shared machine).
const readmeURL = "http://127.0.0.1:8080"

// quickStart returns the command lines of the README's quick start: the
// ```sh blocks of its "## Quick start" section before the section's first
// "###" subsection. A line ending in a comment keeps it (bash drops it).
func quickStart(t *testing.T, readme string) []string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## Quick start\n")
	require.True(t, ok, "README.md has no '## Quick start' section")
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	if i := strings.Index(section, "\n### "); i >= 0 {
		section = section[:i]
	}
	var lines []string
	in := false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(l, "```sh"):
			in = true
		case strings.HasPrefix(l, "```"):
			in = false
		case in && strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#"):
			lines = append(lines, l)
		}
	}
	require.NotEmpty(t, lines, "the quick start has no ```sh block")
	return lines
}

// TestReadmeQuickStart runs the README's quick start as written, line by
// line in bash, with the nebula binary built from this tree, against `nebula
// serve` (the binary) on a real PostgreSQL, and kubectl against a real
// Kubernetes API server (k8stest: kube-apiserver, etcd, controller manager,
// scheduler, kwok as the nodes). Replaced: the registry host (an in-process
// OCI registry; postgres:16, Docker Hub's, is served from it too) and the
// control plane's address. Since kwok runs no containers, the test runs the
// agent's container as its pod would: the nebulactrl-agent binary with the
// StatefulSet's own arguments, the join token from the Secret the manifest
// created, as the pod's ServiceAccount. Passwords are typed on a terminal
// (a pseudo-terminal) when asked for. It checks that deploy --wait exits 0
// with the deployment succeeded, that the Kubernetes Deployment exists, and
// what the operator sees: the first-user hint (and not after a restart),
// the metrics listener, the access log.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := quickStart(t, string(readme))
	// The kubectl of the Kubernetes test binaries (go tool task k8s builds
	// it), not whatever the machine has on PATH.
	kubectl, err := k8stest.Kubectl()
	require.NoError(t, err)

	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build(t, bin, "nebula", "nebulactrl-agent")

	host := registrytest.Start(t, "api:1", "worker:1", "postgres:16")

	addr, metricsAddr := freeAddr(t), freeAddr(t)
	url := "http://" + addr
	serveEnv := []string{
		"NEBULACTRL_DATABASE_URL=" + pgtest.URL(t),
		"NEBULACTRL_LISTEN=" + addr,
		"NEBULACTRL_METRICS_LISTEN=" + metricsAddr,
		"NEBULACTRL_INSECURE_REGISTRIES=" + host,
		"NEBULACTRL_DATA_DIR=" + filepath.Join(dir, "data"),
	}
	envFile := filepath.Join(dir, "server.env")
	srv := startServe(t, bin, envFile, serveEnv)
	require.Contains(t, srv.waitFor(t, "NebulaCtrl is running at"), "NebulaCtrl is running at "+url)
	require.Contains(t, srv.waitFor(t, "First time?"), "nebula setup --url "+url, "the first-user hint, with no user yet")
	key, err := os.ReadFile(envFile)
	require.NoError(t, err)
	require.Contains(t, string(key), "NEBULACTRL_SECRET_KEY=", "the first start writes a master key to the .env file")

	// The user's shell: the built binaries and kubectl on PATH, a home of
	// its own (the CLI's stored login), kubectl pointed at the test cluster.
	home := filepath.Join(dir, "home")
	require.NoError(t, os.MkdirAll(home, 0o700))
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	writeKubeconfig(t, kubeconfig, k.Admin)
	shellEnv := []string{"PATH=" + bin + ":" + filepath.Dir(kubectl) + ":/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "KUBECONFIG=" + kubeconfig, "LANG=C.UTF-8"}

	replace := strings.NewReplacer(readmeURL, url, "registry.example.com/", host+"/", " postgres:16", " "+host+"/postgres:16")
	agentStarted := false
	for _, line := range lines {
		cmdline := replace.Replace(line)
		t.Logf("$ %s", cmdline)
		out, err := runLine(t, cmdline, shellEnv, "correct horse battery staple")
		t.Logf("%s", out)
		require.NoError(t, err, "the quick start's line failed: %s\n%s", line, out)
		if strings.Contains(line, "kubectl apply") {
			startAgentAsItsPod(t, k, bin, dir)
			agentStarted = true
		}
		if strings.Contains(line, "nebula cluster list") {
			require.Regexp(t, `(?m)^NAME\s+STATE\s+LAST HEARTBEAT\s+SERVERS\s+VERSIONS`, out, "the columns the README names")
			require.Regexp(t, `(?m)^eu-1\s`, out)
		}
		if strings.Contains(line, "nebula deploy") {
			require.Contains(t, strings.ToLower(out), "succeeded", "deploy --wait follows the deployment until it succeeds")
		}
	}
	require.True(t, agentStarted, "the quick start connects a cluster (kubectl apply of the manifest)")

	// What the quick start promises is there: the service runs in the
	// cluster, from the digest the control plane resolved.
	ns := desiredstate.Namespace("acme", "shop", "staging")
	dep, err := k.Client(t).AppsV1().Deployments(ns).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var images []string
	for _, d := range dep.Items {
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
	}
	require.NotEmpty(t, images, "the api service's Deployment is in %s", ns)
	require.Regexp(t, regexp.QuoteMeta(host+"/api@sha256:"), strings.Join(images, " "), "deployed by digest, resolved at the test registry")

	// The operator's view: the metrics listener without a token, the agent
	// connected, the deployment counted; one access-log line per request.
	metrics := httpGet(t, "http://"+metricsAddr+"/metrics")
	require.Contains(t, metrics, "nebulactrl_agents_connected 1")
	require.Regexp(t, `nebulactrl_deployments\{status="succeeded"\} [1-9]`, metrics)
	require.Regexp(t, `nebulactrl_commands_total\{command="[A-Za-z]+",outcome="ok"\} [1-9]`, metrics)
	resp, err := http.Get(url + "/metrics")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "with a metrics listener, /metrics is not on the public one")
	require.Regexp(t, `msg=request method=POST route="POST /api/v1/orgs/\{org\}/projects/\{project\}/[^"]*/deployments" status=20[0-9] duration_ms=[0-9.]+ request_id=\S+ principal=[0-9a-f-]{36}`, srv.output(),
		"the deploy's access-log line")
	require.NotContains(t, srv.output(), "correct horse battery staple", "no password in the server's log")

	// A restart: the hint is gone now that a user exists.
	srv.stop(t)
	require.Regexp(t, `msg=request method=GET route="GET /agent/v1/connect" status=101 duration_ms=[0-9.]+ request_id=\S+ principal=[0-9a-f-]{36}`, srv.output(),
		"the agent's connection has its access-log line, naming its server")
	srv = startServe(t, bin, envFile, serveEnv)
	srv.waitFor(t, "NebulaCtrl is running at")
	time.Sleep(200 * time.Millisecond)
	require.NotContains(t, srv.output(), "First time?", "no first-user hint once a user exists")
	srv.stop(t)
}

// build compiles this tree's commands into dir.
func build(t *testing.T, dir string, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, c), "github.com/nebulactrl/nebulactrl/cmd/"+c).CombinedOutput()
		require.NoError(t, err, "go build %s: %s", c, out)
	}
}

// freeAddr returns a free loopback address for nebula serve to listen on,
// below Linux's ephemeral range (serveproc.FreeAddr says why).
func freeAddr(t *testing.T) string { return serveproc.FreeAddr(t) }

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return string(b)
}

type serveProcess struct {
	cmd  *exec.Cmd
	out  *lockedbuf.Buffer
	done chan error
	once sync.Once
}

func (s *serveProcess) output() string { return s.out.String() }

// waitFor waits for a line of the server's output holding text and returns it.
func (s *serveProcess) waitFor(t *testing.T, text string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range strings.Split(s.output(), "\n") {
			if strings.Contains(l, text) {
				return l
			}
		}
		select {
		case err := <-s.done:
			t.Fatalf("nebula serve exited (%v) before printing %q:\n%s", err, text, s.output())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("nebula serve did not print %q within 60 s:\n%s", text, s.output())
	return ""
}

// stop sends SIGTERM, as a service manager does, and expects a clean exit.
func (s *serveProcess) stop(t *testing.T) {
	t.Helper()
	s.once.Do(func() {
		require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
		select {
		case err := <-s.done:
			require.NoError(t, err, "nebula serve exits 0 on SIGTERM:\n%s", s.output())
		case <-time.After(60 * time.Second):
			_ = s.cmd.Process.Kill()
			t.Fatalf("nebula serve did not stop within 60 s")
		}
	})
}

func startServe(t *testing.T, bin, envFile string, env []string) *serveProcess {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "nebula"), "--env-file", envFile, "serve")
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + filepath.Dir(envFile)}, env...)
	s := &serveProcess{cmd: cmd, out: &lockedbuf.Buffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	require.NoError(t, cmd.Start())
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		s.once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-s.done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
			}
		})
	})
	return s
}

// openPTY opens a pseudo-terminal: the command reads the slave as its
// stdin, as a shell's commands read the user's terminal.
func openPTY() (master, slave *os.File, err error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, nil, err
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, nil, err
	}
	return m, s, nil
}

// runLine runs one line in bash (pipefail: a pipe fails when any command in
// it does), its stdin a terminal on which the password is typed whenever a
// command asks for one on stderr.
func runLine(t *testing.T, line string, env []string, password string) (string, error) {
	t.Helper()
	master, slave, err := openPTY()
	require.NoError(t, err)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Env = env
	cmd.Stdin = slave
	var stdout lockedbuf.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	slave.Close()
	go func() { _, _ = io.Copy(io.Discard, master) }() // the terminal's echo
	var errOut strings.Builder
	r := bufio.NewReader(stderr)
	var pending strings.Builder
	for {
		b, err := r.ReadByte()
		if err != nil {
			break
		}
		errOut.WriteByte(b)
		pending.WriteByte(b)
		if b == '\n' {
			pending.Reset()
			continue
		}
		if p := pending.String(); strings.HasSuffix(p, ": ") && strings.Contains(strings.ToLower(p), "password") {
			_, _ = master.WriteString(password + "\n")
			pending.Reset()
		}
	}
	err = cmd.Wait()
	return stdout.String() + errOut.String(), err
}

// writeKubeconfig writes a kubeconfig for kubectl from a rest.Config that
// authenticates with a bearer token.
func writeKubeconfig(t *testing.T, path string, c *rest.Config) {
	t.Helper()
	require.NotEmpty(t, c.BearerToken, "k8stest's admin authenticates with a token")
	doc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: test
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, c.Host, base64.StdEncoding.EncodeToString(c.TLSClientConfig.CAData), c.BearerToken)
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
}

// startAgentAsItsPod runs the agent container of the StatefulSet that
// kubectl applied, as its first pod would run it: its own arguments and
// environment, the join token from the manifest's Secret (the pod mounts
// it), the pod's ServiceAccount for the API server (instead of the
// in-cluster configuration, since kwok runs no containers).
func startAgentAsItsPod(t *testing.T, k *k8stest.Cluster, bin, dir string) {
	t.Helper()
	ctx := context.Background()
	cs := k.Client(t)
	st, err := cs.AppsV1().StatefulSets(agentinstall.AgentNamespace).Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
	require.NoError(t, err, "kubectl applied the agent's StatefulSet")
	secret, err := cs.CoreV1().Secrets(agentinstall.AgentNamespace).Get(ctx, agentinstall.JoinSecret, metav1.GetOptions{})
	require.NoError(t, err, "kubectl applied the join token's Secret")
	pod := agentinstall.AgentName + "-0"
	agentDir := filepath.Join(dir, "agent")
	require.NoError(t, os.MkdirAll(filepath.Join(agentDir, "state"), 0o700))
	tokenFile := filepath.Join(agentDir, "join-token")
	require.NoError(t, os.WriteFile(tokenFile, secret.Data[agentinstall.JoinSecretKey], 0o600))
	kubeconfig := filepath.Join(agentDir, "kubeconfig")
	writeKubeconfig(t, kubeconfig, k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))

	var args []string
	found := false
	for _, c := range st.Spec.Template.Spec.Containers {
		if c.Name != "agent" {
			continue
		}
		found = true
		for _, a := range c.Args {
			a = strings.ReplaceAll(a, "$(POD_NAME)", pod)
			switch {
			case strings.HasPrefix(a, "--join-token-file="):
				a = "--join-token-file=" + tokenFile
			case strings.HasPrefix(a, "--health-file="):
				a = "--health-file=" + filepath.Join(agentDir, "health")
			case strings.HasPrefix(a, "--state-dir="):
				a = "--state-dir=" + filepath.Join(agentDir, "state")
			}
			args = append(args, a)
		}
	}
	require.True(t, found, "the StatefulSet has the agent container")
	args = append(args, "--kubeconfig="+kubeconfig, "--lease-duration=3s", "--renew-deadline=2s", "--retry-period=500ms")
	cmd := exec.Command(filepath.Join(bin, "nebulactrl-agent"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + agentDir, "POD_NAME=" + pod, "POD_NAMESPACE=" + agentinstall.AgentNamespace,
		"SERVICE_ACCOUNT=" + agentinstall.AgentName}
	out := &lockedbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("agent's output:\n%s", out.String())
		}
	})
}
