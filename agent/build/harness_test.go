package build_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"

	"github.com/nebulactrl/nebulactrl/agent/build"
)

// The real parts of the script tests and where they come from.
const (
	buildkitVersion = "v0.34.2"
	// installHint says how to get every real part the script tests need.
	installHint = "run `go tool task buildkit` (scripts/build-buildkit.sh) to build BuildKit and install runc, busybox-static, git and OpenSSH"
	busybox     = "/bin/busybox"
	sshd        = "/usr/sbin/sshd"
)

// buildkitBin is the directory of buildkitd and buildctl, as
// scripts/build-buildkit.sh fills it; the test fails, not skips, when a
// real part is missing.
func buildkitBin(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("NEBULACTRL_BUILDKIT_DIR")
	if dir == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		dir = filepath.Join(home, ".cache", "nebulactrl", "buildkit-"+buildkitVersion)
	}
	bin := filepath.Join(dir, "bin")
	var missing []string
	for _, p := range []string{filepath.Join(bin, "buildkitd"), filepath.Join(bin, "buildctl"), filepath.Join(bin, "buildctl-daemonless.sh"), busybox} {
		if _, err := os.Stat(p); err != nil {
			missing = append(missing, p)
		}
	}
	for _, cmd := range []string{"runc", "git"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd+" on PATH")
		}
	}
	if len(missing) > 0 {
		t.Fatalf("missing %s: %s", strings.Join(missing, ", "), installHint)
	}
	out, err := exec.Command(filepath.Join(bin, "buildctl"), "--version").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), " "+buildkitVersion+" ", "buildctl in %s is not %s: %s", bin, buildkitVersion, installHint)
	return bin
}

// buildkitd is a running daemon for the test.
type buildkitd struct {
	addr   string
	bin    string
	logf   string
	buildc string
}

// startBuildkitd runs buildkitd as root with the OCI worker (Debian's runc)
// in a temporary root, on a unix socket, with the build's buildkitd.toml for
// the registry; it is stopped when the test ends.
func startBuildkitd(t *testing.T, bin, registryHost string) *buildkitd {
	t.Helper()
	dir := t.TempDir()
	toml := filepath.Join(dir, "buildkitd.toml")
	require.NoError(t, os.WriteFile(toml, []byte(build.BuildkitdConfig(registryHost)), 0o600))
	// The build script runs as the build container's user, not root: the
	// socket is in a directory that user can reach, and open to it.
	sockDir := sharedDir(t)
	sock := filepath.Join(sockDir, "bk.sock")
	b := &buildkitd{addr: "unix://" + sock, bin: bin, logf: filepath.Join(dir, "buildkitd.log"),
		buildc: filepath.Join(bin, "buildctl")}
	logFile, err := os.Create(b.logf)
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(bin, "buildkitd"), "--config", toml, "--oci-worker=true", "--containerd-worker=false",
		"--root", filepath.Join(dir, "root"), "--addr", b.addr)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			t.Logf("buildkitd's log:\n%s", tailOf(t, b.logf, 40))
		}
	})
	began := time.Now()
	for {
		if err := exec.Command(b.buildc, "--addr", b.addr, "debug", "workers").Run(); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("buildkitd exited at start (%v):\n%s", err, tailOf(t, b.logf, 40))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Since(began) > 30*time.Second {
			t.Fatalf("buildkitd did not answer within 30 s:\n%s", tailOf(t, b.logf, 40))
		}
	}
	t.Logf("buildkitd answered after %v", time.Since(began).Round(time.Millisecond))
	require.NoError(t, os.Chmod(sock, 0o666))
	return b
}

func (b *buildkitd) prune(t *testing.T) {
	t.Helper()
	out, err := exec.Command(b.buildc, "--addr", b.addr, "prune", "--all").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(b.buildc, "--addr", b.addr, "du").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `(?m)^Total:\s+0B$`, string(out), "the local cache is empty after prune --all")
}

func tailOf(t *testing.T, path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// pushBaseImage pushes host/base:1, an image of one layer with Debian's
// static BusyBox as /bin/sh and a few applets, /etc/passwd and /tmp: enough
// for RUN steps, made with go-containerregistry, offline.
func pushBaseImage(t *testing.T, host string) string {
	t.Helper()
	bb, err := os.ReadFile(busybox)
	require.NoError(t, err, installHint)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	add := func(h *tar.Header, body []byte) {
		h.ModTime, h.Uid, h.Gid, h.Format = epoch, 0, 0, tar.FormatPAX
		h.Size = int64(len(body))
		require.NoError(t, tw.WriteHeader(h))
		if len(body) > 0 {
			_, err := tw.Write(body)
			require.NoError(t, err)
		}
	}
	add(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755}, bb)
	for _, applet := range []string{"sh", "cat", "echo", "ls"} {
		add(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777}, nil)
	}
	add(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:\n"))
	add(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil)
	require.NoError(t, tw.Close())
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Cmd = []string{"/bin/sh"}
	img, err = mutate.ConfigFile(img, cfg)
	require.NoError(t, err)
	ref := host + "/base:1"
	require.NoError(t, remote.Write(mustRef(t, ref), img))
	return ref
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	ref, err := name.ParseReference(s, name.Insecure)
	require.NoError(t, err)
	return ref
}

// manifestDigest is the registry's digest of the manifest a tag names.
func manifestDigest(t *testing.T, ref string) v1.Hash {
	t.Helper()
	d, err := remote.Head(mustRef(t, ref))
	require.NoError(t, err, "the registry has %s", ref)
	return d.Digest
}

// gitRepo is a repository the tests commit to, with fixed dates, so that its
// commits (and the images' timestamps) are the same on every run.
type gitRepo struct {
	t   *testing.T
	dir string
	n   int
}

func newGitRepo(t *testing.T) *gitRepo {
	r := &gitRepo{t: t, dir: filepath.Join(t.TempDir(), "work")}
	r.git("init", "-q", "-b", "main", r.dir)
	return r
}

func (r *gitRepo) git(args ...string) string {
	r.t.Helper()
	date := fmt.Sprintf("2026-01-02T03:04:%02dZ", r.n)
	cmd := exec.Command("git", args...)
	if len(args) == 0 || args[0] != "init" {
		cmd.Dir = r.dir
	}
	cmd.Env = []string{"HOME=" + r.dir, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com", "GIT_AUTHOR_DATE=" + date,
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com", "GIT_COMMITTER_DATE=" + date}
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// commit writes files (path: content) and commits them, returning the id.
func (r *gitRepo) commit(files map[string]string) string {
	r.t.Helper()
	for p, content := range files {
		full := filepath.Join(r.dir, p)
		require.NoError(r.t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(r.t, os.WriteFile(full, []byte(content), 0o644))
	}
	r.n++
	r.git("add", "-A")
	r.git("commit", "-q", "-m", fmt.Sprintf("commit %d", r.n))
	return r.git("rev-parse", "HEAD")
}

// serveGit serves a bare copy of the repository over smart HTTP (git
// http-backend behind net/http/cgi) that answers only basic auth with user
// and token, as a forge does for a private repository; it returns the
// clone URL. With v0Only the server ignores the client's request for Git's
// protocol v2, as an old server does: it then refuses a commit by id that is
// no branch tip.
func serveGit(t *testing.T, r *gitRepo, user, token string, v0Only bool) string {
	t.Helper()
	root := t.TempDir()
	out, err := exec.Command("git", "clone", "-q", "--bare", r.dir, filepath.Join(root, "shop.git")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	execPath, err := exec.Command("git", "--exec-path").Output()
	require.NoError(t, err)
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != user || p != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="shop"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		if v0Only {
			req.Header.Del("Git-Protocol")
		}
		backend.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/shop.git"
}

// allowedOverrides are the only variables a test sets differently from the
// container: where things are on this machine, and the daemon to use
// (BUILDKIT_HOST, or the flags of the one buildctl-daemonless.sh starts).
var allowedOverrides = map[string]bool{"WORKSPACE": true, "HOME": true, "TMPDIR": true, "TERMINATION_LOG": true, "BUILDKIT_HOST": true,
	"BUILDKITD_FLAGS": true}

// runContainer runs a container's command as its container would: its
// script with BusyBox sh (the shell of both images), as its securityContext's
// user and group (root with asRoot), with its environment, the Secret's
// values for its secret references, and overrides (only allowedOverrides)
// for the paths. PATH puts bin (holding buildctl) first. It returns the
// combined output and the exit code.
func runContainer(t *testing.T, ctx context.Context, c corev1.Container, secret *corev1.Secret, bin string, asRoot bool, overrides map[string]string) (string, int) {
	t.Helper()
	require.Len(t, c.Command, 3)
	require.Equal(t, []string{"/bin/sh", "-c"}, c.Command[:2])
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
	set := map[string]bool{}
	for k := range overrides {
		require.True(t, allowedOverrides[k], "the test may not change %s", k)
	}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			require.NotNil(t, ref, "%s: only Secret references", e.Name)
			require.NotNil(t, secret, "%s refers to a Secret", e.Name)
			require.Equal(t, secret.Name, ref.Name)
			v = string(secret.Data[ref.Key])
		}
		if o, ok := overrides[e.Name]; ok {
			v = o
		}
		set[e.Name] = true
		env = append(env, e.Name+"="+v)
	}
	for k, v := range overrides {
		if !set[k] {
			env = append(env, k+"="+v)
		}
	}
	cmd := exec.CommandContext(ctx, busybox, "sh", "-c", c.Command[2])
	cmd.Env = env
	cmd.Dir = "/"
	if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil && !asRoot {
		gid := uint32(*sc.RunAsUser)
		if sc.RunAsGroup != nil {
			gid = uint32(*sc.RunAsGroup)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: gid, Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		require.NoError(t, err)
	}
	return string(out), 0
}

// sharedDir is a directory every user may enter (t.TempDir's are root's
// alone), removed when the test ends.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nebula-build-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ownedDir makes dir/name owned by uid, as a pod's emptyDir is writable by
// its containers' user.
func ownedDir(t *testing.T, dir, name string, uid int64) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(p, 0o755))
	require.NoError(t, os.Chown(p, int(uid), int(uid)))
	return p
}

// sharedBin copies buildctl where the containers' users can run it
// (the build cache is under root's home).
func sharedBin(t *testing.T, bin string) string {
	t.Helper()
	dir := sharedDir(t)
	b, err := os.ReadFile(filepath.Join(bin, "buildctl"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "buildctl"), b, 0o755))
	return dir
}

// serveGitSSH serves a bare copy of the repository over SSH with a real
// sshd on 127.0.0.1 that lets in only the given public key (as a forge's
// deploy key), and returns the clone URL.
func serveGitSSH(t *testing.T, r *gitRepo, authorized ssh.PublicKey) string {
	t.Helper()
	if _, err := os.Stat(sshd); err != nil {
		t.Fatalf("missing %s: %s", sshd, installHint)
	}
	dir := t.TempDir()
	out, err := exec.Command("git", "clone", "-q", "--bare", r.dir, filepath.Join(dir, "shop.git")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, hostKey, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	pemKey, err := ssh.MarshalPrivateKey(hostKey, "")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "host_key"), pem.EncodeToMemory(pemKey), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "authorized_keys"), ssh.MarshalAuthorizedKey(authorized), 0o600))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	config := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
`, port, dir, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(config), 0o600))
	// sshd insists on its privilege separation directory.
	require.NoError(t, os.MkdirAll("/run/sshd", 0o755))
	logFile := filepath.Join(dir, "sshd.log")
	cmd := exec.Command(sshd, "-D", "-f", filepath.Join(dir, "sshd_config"), "-E", logFile)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("sshd's log:\n%s", tailOf(t, logFile, 20))
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "sshd listens on %s", addr)
	return "ssh://root@" + addr + filepath.Join(dir, "shop.git")
}

// deployKey is a new ed25519 key: its private half in OpenSSH format, as a
// forge's deploy key is pasted, and its public half.
func deployKey(t *testing.T) (string, ssh.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "deploy")
	require.NoError(t, err)
	sshPub, err := ssh.NewPublicKey(pub)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(block)), sshPub
}
