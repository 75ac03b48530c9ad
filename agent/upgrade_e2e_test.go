package agent_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nebulactrl/nebulactrl/agent/selfupdate"
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

// put sends a PUT to an instance-wide path and returns the status.
func (c cp) put(path string, body any) int {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("PUT", c.url+path, bytes.NewReader(b))
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// buildBinary builds a Go command with its version set at link time, as a
// release build sets it.
func buildBinary(t *testing.T, dir, name, pkg string, ldflags ...string) []byte {
	t.Helper()
	out := filepath.Join(dir, name)
	// The test's own build configuration: its packages are compiled already,
	// so each binary is a link.
	cmd := exec.Command("go", "build", "-o", out, "-ldflags", strings.Join(ldflags, " "), pkg)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building %s: %s", name, b)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	return data
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// served is the control plane's agent binary for this machine's
// architecture, switched by the test.
type served struct {
	mu   sync.Mutex
	data []byte
}

func (s *served) set(b []byte) {
	s.mu.Lock()
	s.data = b
	s.mu.Unlock()
}

func (s *served) Binary(arch string) (agentbin.Binary, error) {
	if !agentbin.Known(arch) {
		return agentbin.Binary{}, agentbin.ErrUnknownArch
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if arch != runtime.GOARCH || s.data == nil {
		return agentbin.Binary{}, agentbin.ErrNoBinary
	}
	return agentbin.Binary{Arch: arch, SHA256: sha(s.data), Data: s.data}, nil
}

// supervisor runs a binary like systemd with Restart=always (or a kubelet
// restarting a container): whenever the process ends, it starts the binary
// at the path again, 200 ms later.
type supervisor struct {
	t    *testing.T
	path string
	args []string
	env  []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	once    []string // extra environment of the next start only
	starts  int
	exits   []string
	log     lockedbuf.Buffer // written by the process too, outside mu
	stopped bool
	done    chan struct{}
}

func supervise(t *testing.T, path string, env []string, once []string, args ...string) *supervisor {
	s := &supervisor{t: t, path: path, args: args, env: env, once: once, done: make(chan struct{})}
	go s.loop()
	t.Cleanup(s.stop)
	return s
}

func (s *supervisor) loop() {
	defer close(s.done)
	for {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		cmd := exec.Command(s.path, s.args...)
		cmd.Env = append(append(os.Environ(), s.env...), s.once...)
		s.once = nil
		cmd.Stdout, cmd.Stderr = &s.log, &s.log
		s.starts++
		fmt.Fprintf(&s.log, "--- supervisor: start %d\n", s.starts)
		err := cmd.Start()
		s.cmd = cmd
		s.mu.Unlock()
		if err == nil {
			err = cmd.Wait()
		}
		s.mu.Lock()
		s.exits = append(s.exits, fmt.Sprint(err))
		fmt.Fprintf(&s.log, "--- supervisor: exited: %v\n", err)
		s.cmd = nil
		s.mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
}

// kill sends SIGKILL to the running process.
func (s *supervisor) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
	}
}

func (s *supervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		s.kill()
		<-s.done
	}
	if s.t.Failed() {
		s.t.Logf("log of %s:\n%s", s.path, s.output())
	}
}

func (s *supervisor) output() string { return s.log.String() }

func (s *supervisor) startCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// upgradeWorld is the control plane, the cluster and the binaries of the
// upgrade tests.
type upgradeWorld struct {
	t          *testing.T
	srv        *servertest.Server
	db         *pgx.Conn
	joinToken  string
	kubeconfig string
	k          *k8stest.Cluster
	serve      *served
	bins       map[string][]byte // v1, v2, crash, silent
	binDir     string

	mu      sync.Mutex
	results map[string]chan transport.AgentUpgradeResult
}

func writeKubeconfig(t *testing.T, path string, cfg *rest.Config) {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["k8stest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["k8stest"] = &clientcmdapi.Context{Cluster: "k8stest", AuthInfo: "agent"}
	kc.CurrentContext = "k8stest"
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
}

// sendUpgrade sends an agent_upgrade through the control plane's link and
// waits for the agent's answer.
func (w *upgradeWorld) sendUpgrade(serverID, version, sum string, force bool) transport.AgentUpgradeResult {
	w.t.Helper()
	id := fmt.Sprintf("up-%d", time.Now().UnixNano())
	ch := make(chan transport.AgentUpgradeResult, 1)
	w.mu.Lock()
	w.results[id] = ch
	w.mu.Unlock()
	require.NoError(w.t, w.srv.Link.SendUpgrade(context.Background(), serverID, transport.AgentUpgrade{ID: id, Version: version, SHA256: sum, Force: force}))
	select {
	case r := <-ch:
		return r
	case <-time.After(2 * time.Minute):
		w.t.Fatalf("no agent_upgrade_result for %s", id)
	}
	return transport.AgentUpgradeResult{}
}

// status is what the control plane knows of a server.
type status struct {
	ID          string
	Version     string
	Connected   bool
	ConnectedAt time.Time
	Upgrade     *transport.UpgradeFacts
}

func (w *upgradeWorld) status(name string) status {
	w.t.Helper()
	var st status
	var facts []byte
	var version *string
	var connected *bool
	var at *time.Time
	err := w.db.QueryRow(context.Background(), `SELECT s.id::text, st.version, st.connected, st.connected_at, st.facts FROM servers s
		LEFT JOIN server_status st ON st.server_id = s.id WHERE s.name = $1`, name).Scan(&st.ID, &version, &connected, &at, &facts)
	if errors.Is(err, pgx.ErrNoRows) {
		return st
	}
	require.NoError(w.t, err)
	if version != nil {
		st.Version = *version
	}
	st.Connected = connected != nil && *connected
	if at != nil {
		st.ConnectedAt = *at
	}
	if len(facts) > 0 {
		var f transport.Facts
		require.NoError(w.t, json.Unmarshal(facts, &f))
		st.Upgrade = f.AgentUpgrade
	}
	return st
}

// waitConnected waits until the server is connected with version.
func (w *upgradeWorld) waitConnected(name, version string, sup *supervisor) status {
	w.t.Helper()
	return w.waitReconnected(name, version, time.Time{}, sup)
}

// waitReconnected waits until the server has connected with version after
// since.
func (w *upgradeWorld) waitReconnected(name, version string, since time.Time, sup *supervisor) status {
	w.t.Helper()
	var st status
	require.Eventually(w.t, func() bool {
		st = w.status(name)
		return st.Connected && st.Version == version && st.ConnectedAt.After(since)
	}, 90*time.Second, 100*time.Millisecond, "%s connected with %s after %v; last %+v; log:\n%s", name, version, since, st, sup.output())
	return st
}

// host is an agent installed on a host: its binary in a directory of its
// own, its state directory, run under the supervisor.
type host struct {
	name, bin, state string
	sup              *supervisor
	id               string
}

func (w *upgradeWorld) startHost(name string, once ...string) *host {
	w.t.Helper()
	dir := w.t.TempDir()
	h := &host{name: name, bin: filepath.Join(dir, "lib", "nebulactrl-agent"), state: filepath.Join(dir, "state")}
	require.NoError(w.t, os.MkdirAll(filepath.Dir(h.bin), 0o755))
	require.NoError(w.t, os.WriteFile(h.bin, w.bins["v1"], 0o755))
	h.sup = supervise(w.t, h.bin, nil, once, "--url", w.srv.URL, "--insecure-plain-http", "--state-dir", h.state,
		"--kubeconfig", w.kubeconfig, "--join-token", w.joinToken, "--name", name, "--log-level", "info")
	h.id = w.waitConnected(name, "1.0.0", h.sup).ID
	return h
}

// holds says the binary at the path is whole: it is one of the built
// binaries byte for byte, and it runs and prints version.
func (w *upgradeWorld) holds(h *host, which, version string) {
	w.t.Helper()
	b, err := os.ReadFile(h.bin)
	require.NoError(w.t, err)
	require.True(w.t, bytes.Equal(b, w.bins[which]), "%s holds %s byte for byte", h.bin, which)
	out, err := exec.Command(h.bin, "--version").Output()
	require.NoError(w.t, err)
	require.Equal(w.t, version, strings.TrimSpace(string(out)))
}

func (w *upgradeWorld) record(h *host) selfupdate.Record {
	w.t.Helper()
	var r selfupdate.Record
	b, err := os.ReadFile(filepath.Join(h.state, selfupdate.StateFile))
	require.NoError(w.t, err)
	require.NoError(w.t, json.Unmarshal(b, &r))
	return r
}

// downloads lists the downloads left beside a binary.
func downloads(t *testing.T, bin string) []string {
	m, err := filepath.Glob(filepath.Join(filepath.Dir(bin), ".*.download-*"))
	require.NoError(t, err)
	return m
}

// TestAgentUpgradesItself runs real agent binaries of two versions, built
// here with their version set at link time, under a supervisor that
// restarts them as systemd's Restart=always would, against a real control
// plane (PostgreSQL) and a real Kubernetes API server. The upgrades are
// sent through the control plane's agent link (Link.SendUpgrade).
//
//   - a successful upgrade: steps 1-6, the restart into 2.0.0, kept after
//     20 s connected;
//   - a hash mismatch, a truncated download (half the binary with the whole
//     one's checksum) and a binary whose --version is wrong each leave 1.0.0
//     in place, the agent connected;
//   - a new binary that crash-loops and one that never connects (both test
//     binaries of this package's testdata that keep the agent's own
//     probation, the second on a clock 100 times faster) are rolled back,
//     the reason reaching the control plane in facts.agentUpgrade, the
//     version refused without force and installed with it;
//   - SIGKILL at every step of the upgrade: the path always holds a whole
//     binary that runs, the agent comes back;
//   - the in-cluster path, as far as it can be real here (see that subtest).
func TestAgentUpgradesItself(t *testing.T) {
	binDir := t.TempDir()
	const agentPkg = "github.com/nebulactrl/nebulactrl/cmd/nebulactrl-agent"
	bins := map[string][]byte{
		"v1":     buildBinary(t, binDir, "agent-1.0.0", agentPkg, "-X main.version=1.0.0"),
		"v2":     buildBinary(t, binDir, "agent-2.0.0", agentPkg, "-X main.version=2.0.0"),
		"crash":  buildBinary(t, binDir, "crash-2.0.0", "./testdata/badagent", "-X main.version=2.0.0 -X main.mode=crash"),
		"silent": buildBinary(t, binDir, "silent-2.0.0", "./testdata/badagent", "-X main.version=2.0.0 -X main.mode=silent"),
	}
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	serve := &served{}
	srv := servertest.Start(t, servertest.Options{Version: "2.0.0", AgentBinaries: serve})
	require.NotNil(t, srv.Link)
	db, err := pgx.Connect(context.Background(), srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close(context.Background()) })
	token := srv.Setup(t, "alice@example.com", "acme")
	rc, err := client.New(srv.URL, token)
	require.NoError(t, err)
	// The control plane's automatic upgrade of a behind agent is turned
	// off: this test sends each upgrade itself, in its own order.
	code := (cp{t: t, url: srv.URL, token: token}).put("/api/v1/instance/settings", map[string]bool{"agentAutoUpgrade": false})
	require.Equal(t, 200, code, "automatic upgrade turned off")
	cluster, err := rc.CreateCluster(context.Background(), "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	w := &upgradeWorld{t: t, srv: srv, db: db, joinToken: cluster.JoinToken.Token, k: k, serve: serve, bins: bins, binDir: binDir,
		results: map[string]chan transport.AgentUpgradeResult{}, kubeconfig: filepath.Join(t.TempDir(), "kubeconfig")}
	writeKubeconfig(t, w.kubeconfig, k.Admin)
	prev := srv.Link.OnUpgradeResult
	srv.Link.OnUpgradeResult = func(ctx context.Context, serverID string, r transport.AgentUpgradeResult) {
		if prev != nil {
			prev(ctx, serverID, r)
		}
		w.mu.Lock()
		ch := w.results[r.ID]
		w.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}

	t.Run("failures leave the old binary, then a successful upgrade", func(t *testing.T) {
		w.t = t
		h := w.startHost("host-1")
		st := w.status("host-1")
		require.Nil(t, st.Upgrade, "no upgrade yet")

		// A hash mismatch: the command's checksum is not the binary's.
		serve.set(bins["v2"])
		r := w.sendUpgrade(h.id, "2.0.0", sha([]byte("another binary")), false)
		require.False(t, r.OK)
		require.Equal(t, transport.UpgradeStepChecksum, r.Step, r.Error)
		w.holds(h, "v1", "1.0.0")
		// A truncated download: half the binary, the whole one's checksum.
		serve.set(bins["v2"][:len(bins["v2"])/2])
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), false)
		require.False(t, r.OK)
		require.Equal(t, transport.UpgradeStepChecksum, r.Step, r.Error)
		w.holds(h, "v1", "1.0.0")
		// A binary that says another version (1.0.0's, served as 2.0.0).
		serve.set(bins["v1"])
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v1"]), false)
		require.False(t, r.OK)
		require.Equal(t, transport.UpgradeStepVersion, r.Step, r.Error)
		require.Contains(t, r.Error, `says it is version "1.0.0"`)
		w.holds(h, "v1", "1.0.0")
		require.Empty(t, downloads(t, h.bin), "no download left behind")
		_, err := os.Stat(h.bin + ".prev")
		require.ErrorIs(t, err, os.ErrNotExist, "nothing was kept: nothing changed")
		require.Equal(t, 1, h.sup.startCount(), "the agent never restarted")
		require.True(t, w.status("host-1").Connected)

		// The real thing.
		serve.set(bins["v2"])
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), false)
		require.True(t, r.OK, r.Error)
		require.Equal(t, transport.UpgradeStepReplace, r.Step)
		st = w.waitConnected("host-1", "2.0.0", h.sup)
		require.Equal(t, 2, h.sup.startCount(), "one restart")
		w.holds(h, "v2", "2.0.0")
		prevBin, err := os.ReadFile(h.bin + ".prev")
		require.NoError(t, err)
		require.Equal(t, bins["v1"], prevBin, "the old binary is kept as .prev")
		require.NotNil(t, st.Upgrade)
		require.Equal(t, transport.UpgradeFacts{From: "1.0.0", To: "2.0.0", State: transport.UpgradeProbation, At: st.Upgrade.At}, *st.Upgrade)
		require.Eventually(t, func() bool { return w.record(h).State == transport.UpgradeSucceeded }, 60*time.Second, 200*time.Millisecond,
			"kept after 20 s connected")
		require.Equal(t, 2, h.sup.startCount())
	})

	t.Run("a crash loop is rolled back and refused, then forced", func(t *testing.T) {
		w.t = t
		h := w.startHost("host-2")
		serve.set(bins["crash"])
		r := w.sendUpgrade(h.id, "2.0.0", sha(bins["crash"]), false)
		require.True(t, r.OK, r.Error)
		// Three starts that crash, the fourth rolls back, the fifth is 1.0.0.
		var st status
		require.Eventually(t, func() bool {
			st = w.status("host-2")
			return st.Connected && st.Version == "1.0.0" && st.Upgrade != nil && st.Upgrade.State == transport.UpgradeRolledBack
		}, 90*time.Second, 100*time.Millisecond, "rolled back; log:\n%s", h.sup.output())
		require.Contains(t, st.Upgrade.Reason, "started 3 times without staying connected")
		require.Equal(t, "2.0.0", st.Upgrade.To)
		require.Equal(t, 6, h.sup.startCount(), "1.0.0, three crashes, the rollback, 1.0.0 again")
		w.holds(h, "v1", "1.0.0")

		// Not again for 24 hours...
		serve.set(bins["v2"])
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), false)
		require.False(t, r.OK)
		require.Contains(t, r.Error, "rolled back")
		w.holds(h, "v1", "1.0.0")
		// ... unless forced.
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), true)
		require.True(t, r.OK, r.Error)
		w.waitConnected("host-2", "2.0.0", h.sup)
		w.holds(h, "v2", "2.0.0")
	})

	t.Run("a binary that never connects is rolled back", func(t *testing.T) {
		w.t = t
		h := w.startHost("host-3")
		serve.set(bins["silent"])
		r := w.sendUpgrade(h.id, "2.0.0", sha(bins["silent"]), false)
		require.True(t, r.OK, r.Error)
		var st status
		require.Eventually(t, func() bool {
			st = w.status("host-3")
			return st.Connected && st.Version == "1.0.0" && st.Upgrade != nil && st.Upgrade.State == transport.UpgradeRolledBack
		}, 90*time.Second, 100*time.Millisecond, "rolled back; log:\n%s", h.sup.output())
		require.Contains(t, st.Upgrade.Reason, "did not stay connected to the control plane for 20s within 5m0s")
		require.Equal(t, 3, h.sup.startCount(), "1.0.0, the silent one (rolls back), 1.0.0 again")
		w.holds(h, "v1", "1.0.0")
		serve.set(bins["v2"])
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), false)
		require.False(t, r.OK, "refused for 24 h")
		r = w.sendUpgrade(h.id, "2.0.0", sha(bins["v2"]), true)
		require.True(t, r.OK, r.Error)
		w.waitConnected("host-3", "2.0.0", h.sup)
	})

	t.Run("SIGKILL at every step leaves a whole binary that runs", func(t *testing.T) {
		w.t = t
		serve.set(bins["v2"])
		for _, step := range []struct {
			failpoint, which, version string
		}{
			{"download", "v1", "1.0.0"},
			{"checksum", "v1", "1.0.0"},
			{"version", "v1", "1.0.0"},
			{"keep", "v1", "1.0.0"},
			{"replace", "v2", "2.0.0"},
			{"report", "v2", "2.0.0"},
		} {
			name := "kill-" + step.failpoint
			h := w.startHost(name, selfupdate.FailpointEnv+"="+step.failpoint)
			require.NoError(t, srv.Link.SendUpgrade(context.Background(), h.id,
				transport.AgentUpgrade{ID: name, Version: "2.0.0", SHA256: sha(bins["v2"])}))
			require.Eventually(t, func() bool { return strings.Contains(h.sup.output(), "stopped at failpoint "+step.failpoint) },
				60*time.Second, 20*time.Millisecond, "%s reached; log:\n%s", step.failpoint, h.sup.output())
			killed := time.Now()
			h.sup.kill()
			w.waitReconnected(name, step.version, killed, h.sup)
			require.Equal(t, 2, h.sup.startCount(), step.failpoint)
			w.holds(h, step.which, step.version)
			require.Empty(t, downloads(t, h.bin), "%s: the next start removed the download left behind", step.failpoint)
			switch step.failpoint {
			case "download", "checksum", "version":
				// upgrade.json is written only at step 4.
				_, err := os.Stat(filepath.Join(h.state, selfupdate.StateFile))
				require.ErrorIs(t, err, os.ErrNotExist, "%s: no record before step 4", step.failpoint)
			case "keep":
				rec := w.record(h)
				require.Equal(t, transport.UpgradeFailed, rec.State)
				require.Contains(t, rec.Reason, "interrupted before the binary was replaced")
			default:
				rec := w.record(h)
				require.Equal(t, transport.UpgradeProbation, rec.State)
				require.Equal(t, 1, rec.Starts)
			}
			h.sup.stop()
		}
	})

	t.Run("through the API: audited as upgraded, and as failed when rolled back", func(t *testing.T) {
		w.t = t
		ctx := context.Background()
		audited := func(action, server string) bool {
			page, err := rc.Audit(ctx, client.AuditQuery{Org: "acme", Action: action, Limit: 1000})
			require.NoError(t, err)
			for _, e := range page.Items {
				if strings.Contains(e.Target.Name, server) || strings.Contains(e.Detail, server) {
					return true
				}
			}
			return false
		}
		good := w.startHost("api-good")
		serve.set(bins["v2"])
		acc, err := rc.UpgradeServer(ctx, good.id, false)
		require.NoError(t, err)
		require.Equal(t, "1.0.0", acc.From)
		require.Equal(t, "2.0.0", acc.To)
		w.waitConnected("api-good", "2.0.0", good.sup)
		w.holds(good, "v2", "2.0.0")
		require.Eventually(t, func() bool { return audited("server.agent.upgraded", "api-good") }, 60*time.Second, 200*time.Millisecond,
			"server.agent.upgraded in the audit log")
		require.True(t, audited("server.agent.upgrade", "api-good"), "the person's request is audited")

		bad := w.startHost("api-bad")
		serve.set(bins["crash"])
		_, err = rc.UpgradeServer(ctx, bad.id, false)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return audited("server.agent.upgrade.failed", "api-bad") }, 90*time.Second, 200*time.Millisecond,
			"the rollback ends the upgrade as failed; log:\n%s", bad.sup.output())
		st := w.waitConnected("api-bad", "1.0.0", bad.sup)
		require.NotNil(t, st.Upgrade)
		require.Equal(t, transport.UpgradeRolledBack, st.Upgrade.State)
		w.holds(bad, "v1", "1.0.0")
	})

	t.Run("in a cluster: the pod volume keeps an upgrade, a recreated pod starts from the image", func(t *testing.T) {
		w.t = t
		inCluster(t, w)
	})
}

// inCluster tests the in-cluster path as far as it is real here. The
// Kubernetes test cluster's nodes are kwok's: pods are scheduled but no
// container runs. What is real: the install manifest applied to the real
// API server (admitted, its pods created under Pod Security restricted),
// and the StatefulSet read back from it. The container runtime is
// simulated: a directory is the pod volume, another the image's root
// filesystem, and the supervisor restarts the container's command as the
// kubelet's restart policy would. The init container's and the agent
// container's commands and arguments are the ones the API server returned,
// their paths mapped onto those directories.
func inCluster(t *testing.T, w *upgradeWorld) {
	ctx := context.Background()
	admin := w.k.Client(t)
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: w.srv.URL, JoinToken: w.joinToken, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, m, nil)
	sts, err := admin.AppsV1().StatefulSets(agentinstall.AgentNamespace).Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pods, err := admin.CoreV1().Pods(agentinstall.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + agentinstall.AgentName})
		return err == nil && len(pods.Items) == 2
	}, 60*time.Second, 200*time.Millisecond, "the StatefulSet's pods are created under restricted")
	spec := sts.Spec.Template.Spec
	require.Len(t, spec.InitContainers, 1)
	initC, agentC := spec.InitContainers[0], spec.Containers[0]
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.EmptyDir != nil {
			volumes[v.Name] = true
		}
	}
	require.True(t, volumes["agent-bin"], "the binary's volume is an emptyDir: it lives as long as the pod")

	image := t.TempDir() // the image's root filesystem: /nebulactrl-agent is 1.0.0
	require.NoError(t, os.WriteFile(filepath.Join(image, "nebulactrl-agent"), w.bins["v1"], 0o755))
	podName := agentinstall.AgentName + "-0"
	env := map[string]string{"POD_NAME": podName, "POD_NAMESPACE": agentinstall.AgentNamespace, "SERVICE_ACCOUNT": spec.ServiceAccountName}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, kubeconfig, w.k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))

	// pod makes a pod's volumes (fresh directories) and returns the path
	// mapping of its containers.
	pod := func() (mapPath func(string) string, binary, state string) {
		dirs := map[string]string{}
		for _, v := range spec.Volumes {
			dirs[v.Name] = t.TempDir()
		}
		// The join token Secret's volume.
		require.NoError(t, os.WriteFile(filepath.Join(dirs["join"], agentinstall.JoinSecretKey), []byte(w.joinToken), 0o400))
		mounts := map[string]string{}
		for _, c := range []corev1.Container{initC, agentC} {
			for _, vm := range c.VolumeMounts {
				mounts[vm.MountPath] = dirs[vm.Name]
			}
		}
		mapPath = func(p string) string {
			for mp, dir := range mounts {
				if p == mp || strings.HasPrefix(p, mp+"/") {
					return dir + strings.TrimPrefix(p, mp)
				}
			}
			return filepath.Join(image, p)
		}
		return mapPath, mapPath(agentinstall.PodBinary), mapPath(agentinstall.PodStateDir)
	}
	expand := func(s string) string {
		for k, v := range env {
			s = strings.ReplaceAll(s, "$("+k+")", v)
		}
		return s
	}
	mapArgs := func(mapPath func(string) string, args []string) []string {
		var out []string
		for _, a := range args {
			a = expand(a)
			if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(val, "/") {
				a = name + "=" + mapPath(val)
			} else if strings.HasPrefix(a, "/") {
				a = mapPath(a)
			}
			out = append(out, a)
		}
		return out
	}
	var procEnv []string
	for k, v := range env {
		procEnv = append(procEnv, k+"="+v)
	}
	procEnv = append(procEnv, "KUBECONFIG="+kubeconfig)
	// start runs the pod: the init container once, then the agent
	// container under the restart policy.
	start := func() (*supervisor, string, string) {
		mapPath, binary, state := pod()
		seed := exec.Command(mapPath(initC.Command[0]), mapArgs(mapPath, initC.Command[1:])...)
		out, err := seed.CombinedOutput()
		require.NoError(t, err, "the init container: %s", out)
		sup := supervise(t, mapPath(agentC.Command[0]), procEnv, nil, append(mapArgs(mapPath, agentC.Args), "--log-level=info")...)
		return sup, binary, state
	}
	holds := func(binary, which string) {
		b, err := os.ReadFile(binary)
		require.NoError(t, err)
		require.True(t, bytes.Equal(b, w.bins[which]), "the pod volume holds %s", which)
	}

	sup, binary, state := start()
	require.Equal(t, agentinstall.PodBinary, agentC.Command[0])
	holds(binary, "v1")
	st := w.waitConnected(podName, "1.0.0", sup)
	w.serve.set(w.bins["v2"])
	r := w.sendUpgrade(st.ID, "2.0.0", sha(w.bins["v2"]), false)
	require.True(t, r.OK, r.Error)
	w.waitConnected(podName, "2.0.0", sup)
	holds(binary, "v2")
	// A container restart (the process ends; the kubelet starts the
	// container's command again) keeps the upgrade: the volume holds it.
	starts := sup.startCount()
	killed := time.Now()
	sup.kill()
	require.Eventually(t, func() bool { return sup.startCount() > starts }, 30*time.Second, 50*time.Millisecond)
	w.waitReconnected(podName, "2.0.0", killed, sup)
	holds(binary, "v2")
	b, err := os.ReadFile(filepath.Join(state, selfupdate.StateFile))
	require.NoError(t, err)
	require.Contains(t, string(b), `"to": "2.0.0"`)
	sup.stop()

	// A recreated pod: new volumes, the init container seeds the image's
	// 1.0.0 again; the credential is in its Secret, so it is the same
	// server, behind again, and upgraded again.
	recreated := time.Now()
	sup, binary, _ = start()
	holds(binary, "v1")
	again := w.waitReconnected(podName, "1.0.0", recreated, sup)
	require.Equal(t, st.ID, again.ID, "the same server")
	require.Nil(t, again.Upgrade, "a fresh volume has no upgrade record")
	r = w.sendUpgrade(st.ID, "2.0.0", sha(w.bins["v2"]), false)
	require.True(t, r.OK, r.Error)
	w.waitConnected(podName, "2.0.0", sup)
	holds(binary, "v2")
}
