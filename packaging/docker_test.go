package packaging_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/dockertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
)

// The versions the docker test installs: release builds of this tree with
// their version set at link time, as `go tool task build VERSION=...` does.
const (
	older = "1.0.0"
	newer = "1.1.0"
)

// release is one version's binaries and images.
type release struct {
	version string
	agent   string // the static agent binary
	nebula  string // the control plane, with that agent embedded
}

// goBuild builds pkg as a static linux binary of this machine's
// architecture with main.version set; overlay (go build -overlay) puts
// the agent binary to embed in place without writing into the tree.
func goBuild(t *testing.T, out, pkg, version, overlay string, tags ...string) {
	t.Helper()
	args := []string{"build", "-trimpath", "-ldflags", "-X main.version=" + version, "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	if overlay != "" {
		args = append(args, "-overlay", overlay)
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build %s (%s): %s", pkg, version, b)
}

// buildRelease builds the agent, then the control plane with it embedded.
func buildRelease(t *testing.T, dir, version string) release {
	t.Helper()
	r := release{version: version, agent: filepath.Join(dir, "agent-"+version), nebula: filepath.Join(dir, "nebula-"+version)}
	goBuild(t, r.agent, "./cmd/nebulactrl-agent", version, "")
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	overlay := filepath.Join(dir, "overlay-"+version+".json")
	// Whatever else `go tool task build` left in dist/ (another version's
	// agents) is left out: "" deletes a file in an overlay.
	dist := filepath.Join(root, "internal", "agentbin", "dist")
	replace := map[string]string{}
	others, err := os.ReadDir(dist)
	require.NoError(t, err)
	for _, f := range others {
		if f.Name() != ".gitignore" {
			replace[filepath.Join(dist, f.Name())] = ""
		}
	}
	replace[filepath.Join(dist, "nebulactrl-agent-linux-"+runtime.GOARCH)] = r.agent
	b, err := json.Marshal(map[string]map[string]string{"Replace": replace})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(overlay, b, 0o644))
	goBuild(t, r.nebula, "./cmd/nebula", version, overlay, "embedagent")
	return r
}

// ociimage runs tools/ociimage (built once into dir).
func ociimage(t *testing.T, tool string, args ...string) {
	t.Helper()
	cmd := exec.Command(tool, args...)
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "ociimage %s: %s", strings.Join(args, " "), b)
}

// tarDir tars a directory (an OCI layout) for docker load.
func tarDir(t *testing.T, dir, out string) {
	t.Helper()
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	tw := tar.NewWriter(f)
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = rel
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			defer src.Close()
			_, err = io.Copy(tw, src)
			return err
		}
		return nil
	}))
	require.NoError(t, tw.Close())
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// world is the docker test's engine, registry, images and installation.
type world struct {
	t        *testing.T
	eng      *dockertest.Engine
	registry string // host:port, plain HTTP on loopback (dockerd's default insecure range)
	layouts  string // the OCI layouts tools/ociimage wrote
	home     string
	backups  string
	port     int
	url      string
	token    string
}

// install runs packaging/install.sh VERSION against the engine, as root
// would: the images from the test's registry, the PostgreSQL image of this
// machine's packages.
func (w *world) install(t *testing.T, version string) (int, string) {
	t.Helper()
	began := time.Now()
	cmd := exec.Command("bash", "install.sh", version)
	cmd.Env = append(os.Environ(), w.eng.Env...)
	for k, v := range map[string]string{
		"NEBULACTRL_HOME":            w.home,
		"NEBULACTRL_BACKUP_HOST_DIR": w.backups,
		"NEBULACTRL_IMAGE":           w.registry + "/nebulactrl",
		"POSTGRES_IMAGE":             w.registry + "/postgres:15",
		"NEBULACTRL_PORT":            strconv.Itoa(w.port),
		"NEBULACTRL_PUBLIC_URL":      w.url,
	} {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	t.Logf("install.sh %s: exit %d in %v", version, code, time.Since(began).Round(100*time.Millisecond))
	return code, string(out)
}

// compose runs docker compose in the installation's directory.
func (w *world) compose(t *testing.T, args ...string) string {
	t.Helper()
	cmd := w.eng.Command(append([]string{"compose"}, args...)...)
	cmd.Dir = w.home
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "docker compose %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

// running is the image of the running control-plane container.
func (w *world) running(t *testing.T) string {
	t.Helper()
	id := w.compose(t, "ps", "--status", "running", "--quiet", "nebulactrl")
	require.NotEmpty(t, id, "the control plane is running")
	return w.eng.Must(t, "inspect", "--format", "{{.Config.Image}}", id)
}

func (w *world) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(w.url + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func (w *world) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(w.url, w.token)
	require.NoError(t, err)
	return c
}

// onVolume runs a shell command as root in a throwaway container with the
// installation's data volume at /data (the PostgreSQL image has the shell).
func (w *world) onVolume(t *testing.T, script string) string {
	t.Helper()
	return w.eng.Must(t, "run", "--rm", "--user", "0", "--network", "none", "--entrypoint", "/bin/sh",
		"-v", "nebulactrl_data:/data", w.registry+"/postgres:15", "-c", script)
}

// TestInstallOnDocker runs packaging/install.sh against a real Docker
// engine (Debian's docker.io, started by the test; Compose v2): the images
// are tools/ociimage's, pushed to an in-process registry the engine pulls
// from, and PostgreSQL is an image of this machine's Debian packages.
//
//   - a fresh install serves the API (/readyz, setup, /api/v1/me) and the
//     console (GET / answers the sign-in page);
//   - a re-run with a newer version stops when the backup fails (the old
//     version keeps running, .env unchanged), and once the backup works
//     backs up first (one dump, of the old version's database, reused by the
//     new version's start; the record names both versions) and then
//     runs the new version;
//   - the agent in a container with a restart policy (docker run
//     --restart=always of the agent image, loaded with docker load from the
//     OCI layout) upgrades itself to the control plane's version, and a
//     container recreated from its image starts the image's version and is
//     upgraded again (docs/agent.md, the container rule).
func TestInstallOnDocker(t *testing.T) {
	began := time.Now()
	dir := t.TempDir()
	w := &world{t: t, home: filepath.Join(dir, "opt"), backups: filepath.Join(dir, "backups"), layouts: filepath.Join(dir, "layouts")}
	w.port = freePort(t)
	w.url = fmt.Sprintf("http://127.0.0.1:%d", w.port)

	releases := map[string]release{}
	tool := filepath.Join(dir, "ociimage")
	cmd := exec.Command("go", "build", "-o", tool, "./tools/ociimage")
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	for _, v := range []string{older, newer} {
		releases[v] = buildRelease(t, dir, v)
	}
	t.Logf("binaries built in %v", time.Since(began).Round(100*time.Millisecond))

	w.eng = dockertest.Start(t)
	w.registry = registrytest.Empty(t)
	t.Logf("engine up at %v", time.Since(began).Round(100*time.Millisecond))
	for _, r := range releases {
		ociimage(t, tool, "-kind", "nebulactrl", "-version", r.version, "-binary", "linux/"+runtime.GOARCH+"="+r.nebula,
			"-push", w.registry+"/nebulactrl:"+r.version, "-insecure")
		ociimage(t, tool, "-kind", "nebulactrl-agent", "-version", r.version, "-binary", "linux/"+runtime.GOARCH+"="+r.agent,
			"-oci-layout", filepath.Join(w.layouts, "nebulactrl-agent"))
	}
	ociimage(t, tool, "-kind", "postgres", "-version", "15", "-push", w.registry+"/postgres:15", "-insecure")
	t.Logf("images built at %v", time.Since(began).Round(100*time.Millisecond))

	t.Run("a fresh install serves the API and the console", func(t *testing.T) {
		code, out := w.install(t, older)
		require.Zero(t, code, out)
		require.Equal(t, w.registry+"/nebulactrl:"+older, w.running(t))
		status, body := w.get(t, "/readyz")
		require.Equal(t, 200, status, body)
		setup, err := w.client(t).Setup(context.Background(), api.SetupRequest{Email: "alice@example.com", Password: "correct horse battery staple", Organisation: "acme"})
		require.NoError(t, err)
		w.token = setup.Token
		me, err := w.client(t).Me(context.Background())
		require.NoError(t, err)
		require.Equal(t, "alice@example.com", me.User.Email)
		up, err := w.client(t).InstanceUpgrade(context.Background())
		require.NoError(t, err)
		require.Equal(t, older, up.Version)
		require.Equal(t, []string{runtime.GOARCH}, up.AgentBinaries, "the image serves its agent")
		status, body = w.get(t, "/")
		require.Equal(t, 200, status)
		require.Contains(t, body, `id="signin-form"`, "the console's sign-in page")
	})

	t.Run("a re-run stops when the backup fails, then backs up first and upgrades", func(t *testing.T) {
		require.NotEmpty(t, w.token, "installed")
		// The backups' directory on the data volume is not the control
		// plane's to write (it runs as 65532).
		w.onVolume(t, "mkdir -p /data/backups && chown 0:0 /data/backups && chmod 0555 /data/backups")
		code, out := w.install(t, newer)
		require.Equal(t, 3, code, out)
		require.Contains(t, out, "the pre-upgrade backup failed")
		require.Equal(t, w.registry+"/nebulactrl:"+older, w.running(t), "the old version still runs")
		require.Equal(t, older, (&env{home: w.home}).dotenv(t)["NEBULACTRL_VERSION"])
		up, err := w.client(t).InstanceUpgrade(context.Background())
		require.NoError(t, err)
		require.Equal(t, older, up.Version)

		w.onVolume(t, "chown 65532:65532 /data/backups && chmod 0700 /data/backups")
		code, out = w.install(t, newer)
		require.Zero(t, code, out)
		require.Less(t, strings.Index(out, "backing up the control plane's database"), strings.Index(out, "is running"), out)
		require.Equal(t, w.registry+"/nebulactrl:"+newer, w.running(t))
		require.Equal(t, newer, (&env{home: w.home}).dotenv(t)["NEBULACTRL_VERSION"])
		up, err = w.client(t).InstanceUpgrade(context.Background())
		require.NoError(t, err)
		require.Equal(t, newer, up.Version)
		require.NotNil(t, up.PreUpgradeBackup)
		b := up.PreUpgradeBackup
		require.True(t, b.Succeeded, "%+v", b)
		require.Equal(t, older, b.FromVersion)
		require.Equal(t, newer, b.TargetVersion)
		dumps := strings.Fields(w.onVolume(t, "cd /data/backups && ls *.dump"))
		require.Len(t, dumps, 1, "one backup: the installer's, reused by the new version's start")
		require.Contains(t, dumps[0], older, "taken of the old version's database")
	})

	t.Run("the agent in a container upgrades itself, and again when recreated from its image", func(t *testing.T) {
		require.NotEmpty(t, w.token, "installed")
		tarball := filepath.Join(dir, "agent.tar")
		tarDir(t, filepath.Join(w.layouts, "nebulactrl-agent"), tarball)
		loaded := w.eng.Load(t, tarball)
		image := "ghcr.io/nebulactrl/nebulactrl-agent:" + older
		require.Contains(t, loaded, image)

		k := k8stest.Start(t, k8stest.Options{Nodes: 1})
		kubeconfig := filepath.Join(dir, "kubeconfig")
		kc := clientcmdapi.NewConfig()
		kc.Clusters["k8stest"] = &clientcmdapi.Cluster{Server: k.Admin.Host, CertificateAuthorityData: k.Admin.CAData}
		kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{Token: k.Admin.BearerToken}
		kc.Contexts["k8stest"] = &clientcmdapi.Context{Cluster: "k8stest", AuthInfo: "agent"}
		kc.CurrentContext = "k8stest"
		require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
		require.NoError(t, os.Chmod(kubeconfig, 0o644), "readable by the image's user")
		cluster, err := w.client(t).CreateCluster(context.Background(), "acme", api.CreateClusterRequest{Name: "docker"})
		require.NoError(t, err)

		// As docs/agent.md runs it: the host's network (the control plane's
		// published port and the API server are on its loopback), the state
		// directory on a volume, restarted by the engine.
		run := func() string {
			return w.eng.Must(t, "run", "--detach", "--name", "agent", "--restart=always", "--network=host",
				"-v", "agent-state:/var/lib/nebulactrl-agent", "-v", kubeconfig+":/etc/nebulactrl/kubeconfig:ro",
				image, "--url", w.url, "--insecure-plain-http", "--kubeconfig", "/etc/nebulactrl/kubeconfig",
				"--join-token", cluster.JoinToken.Token, "--name", "docker-1")
		}
		server := func() api.ServerUpgrade {
			up, err := w.client(t).InstanceUpgrade(context.Background())
			require.NoError(t, err)
			for _, s := range up.Servers {
				if s.Name == "docker-1" {
					return s
				}
			}
			return api.ServerUpgrade{}
		}
		logs := func() string { out, _ := w.eng.Run("logs", "agent"); return out }
		// upgraded waits until the agent connected with the control plane's
		// version after an upgrade other than the one before, and the
		// binary in the container is that version.
		upgraded := func(before string) api.ServerUpgrade {
			var s api.ServerUpgrade
			deadline := time.Now().Add(3 * time.Minute)
			for {
				s = server()
				if s.Connected && s.Version == newer && s.LastUpgrade != nil && s.LastUpgrade.UpgradeID != before && s.LastUpgrade.State == "succeeded" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the agent was not upgraded to %s: %+v %+v\n%s", newer, s, s.LastUpgrade, logs())
				}
				time.Sleep(500 * time.Millisecond)
			}
			require.Equal(t, older, s.LastUpgrade.From)
			// Nobody asked for it: the control plane's automatic upgrade of an
			// agent that connects behind it.
			require.Equal(t, newer, w.eng.Must(t, "exec", "agent", "/nebulactrl-agent", "--version"), "the container's binary")
			restarts, err := strconv.Atoi(w.eng.Must(t, "inspect", "--format", "{{.RestartCount}}", "agent"))
			require.NoError(t, err)
			require.GreaterOrEqual(t, restarts, 1, "the restart policy started the new binary")
			return s
		}
		// kept waits until the new binary's probation ended: kept.
		kept := func() {
			deadline := time.Now().Add(2 * time.Minute)
			for {
				// docker cp writes a tar of the one file.
				var rec struct{ State string }
				out, _ := w.eng.Command("cp", "agent:/var/lib/nebulactrl-agent/upgrade.json", "-").Output()
				tr := tar.NewReader(bytes.NewReader(out))
				if _, err := tr.Next(); err == nil {
					_ = json.NewDecoder(tr).Decode(&rec)
				}
				if rec.State == "succeeded" {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("the new binary was not kept: %q\n%s", rec.State, logs())
				}
				time.Sleep(time.Second)
			}
		}

		run()
		first := upgraded("")
		kept()

		w.eng.Must(t, "rm", "--force", "agent")
		run()
		// The recreated container starts the image's version.
		require.Equal(t, older, w.eng.Must(t, "run", "--rm", "--entrypoint", "/nebulactrl-agent", image, "--version"))
		upgraded(first.LastUpgrade.UpgradeID)
	})
	t.Logf("done in %v", time.Since(began).Round(100*time.Millisecond))
}
