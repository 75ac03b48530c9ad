package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// hello builds a small static program for arch that prints its name and
// arguments, standing in for the real binaries (whose own tests are theirs).
func hello(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(`package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() { fmt.Println(filepath.Base(os.Args[0]), strings.Join(os.Args[1:], " "), os.Getuid()) }
`), 0o644))
	out := filepath.Join(dir, "hello")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=-mod=mod", "GOWORK=off")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	return out
}

// files reads an image's filesystem: every header, and the regular files'
// contents.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	hs, data := map[string]*tar.Header{}, map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		p := "/" + strings.TrimSuffix(h.Name, "/")
		hs[p] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			data[p] = b
		}
	}
	return hs, data
}

// unpack writes the image's filesystem into dir (owners kept when root).
func unpack(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
		p := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(p, 0o755))
			require.NoError(t, os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)))
		case tar.TypeSymlink:
			require.NoError(t, os.Symlink(h.Linkname, p))
			continue
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			require.NoError(t, err)
			_, err = io.Copy(f, tr)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
		if os.Geteuid() == 0 {
			require.NoError(t, os.Lchown(p, h.Uid, h.Gid))
		}
	}
}

func modeBits(m int64) os.FileMode {
	if m&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func platformImage(t *testing.T, idx v1.ImageIndex, arch string) v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			require.NoError(t, err)
			return img
		}
	}
	t.Fatalf("no image for %s in the index", arch)
	return nil
}

// The control-plane image, pushed to an in-process registry and pulled back:
// non-root, labelled, the binary answering as nebulactrl-server, CA
// certificates from this machine, and pg_dump with every library it needs
// (run in the unpacked image as user 65532 when the test may chroot).
func TestControlPlaneImage(t *testing.T) {
	t.Parallel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	bin := hello(t, runtime.GOARCH)
	ref := host + "/nebulactrl:1.5.0"
	layoutDir := filepath.Join(t.TempDir(), "layout")
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-kind", "nebulactrl", "-version", "1.5.0",
		"-binary", "linux/" + runtime.GOARCH + "=" + bin, "-push", ref, "-insecure", "-oci-layout", layoutDir}, &out))
	require.Contains(t, out.String(), "pushed to "+ref)

	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	idx, err := remote.Index(r)
	require.NoError(t, err)
	img := platformImage(t, idx, runtime.GOARCH)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "65532:65532", cf.Config.User)
	require.Equal(t, "1.5.0", cf.Config.Labels[LabelVersion])
	require.Equal(t, "https://github.com/nebulactrl/nebulactrl", cf.Config.Labels[LabelSource])
	require.Equal(t, []string{ServerAlias}, cf.Config.Entrypoint)
	require.Equal(t, []string{"serve"}, cf.Config.Cmd)
	require.Equal(t, "linux", cf.OS)
	require.Contains(t, cf.Config.Env, "NEBULACTRL_DATA_DIR="+DataDir)

	hs, data := files(t, img)
	require.Contains(t, string(data["/etc/passwd"]), "nonroot:x:65532:65532:")
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	require.NoError(t, err)
	require.Equal(t, ca, data[CAFile])
	require.Equal(t, int64(0o755), hs[ServerBinary].Mode)
	require.Equal(t, byte(tar.TypeSymlink), hs[ServerAlias].Typeflag)
	require.Equal(t, "nebula", hs[ServerAlias].Linkname)
	require.Equal(t, NonRoot, hs[DataDir].Uid)
	pgDir, err := backup.FindBinDir()
	require.NoError(t, err)
	require.Contains(t, hs, pgDir+"/pg_dump")
	require.Contains(t, hs, pgDir+"/pg_restore")
	for p, h := range hs {
		require.False(t, strings.Contains(p, "nebulactrl") && h.Typeflag == tar.TypeReg && p != ServerBinary, "unexpected file %s", p)
	}

	// The OCI layout holds the same index.
	lp, err := layout.FromPath(layoutDir)
	require.NoError(t, err)
	lidx, err := lp.ImageIndex()
	require.NoError(t, err)
	lm, err := lidx.IndexManifest()
	require.NoError(t, err)
	require.Len(t, lm.Manifests, 1)
	require.Equal(t, "1.5.0", lm.Manifests[0].Annotations["org.opencontainers.image.ref.name"])
	want, err := idx.Digest()
	require.NoError(t, err)
	require.Equal(t, want, lm.Manifests[0].Digest)

	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("running the unpacked image needs root (chroot)")
		}
		t.Log("not root: the unpacked image is not run (CI=true requires it)")
		return
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	require.NoError(t, os.MkdirAll(root, 0o755))
	unpack(t, img, root)
	asNonRoot := &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: NonRoot, Gid: NonRoot}}
	cmd := exec.Command(ServerAlias, "pre-upgrade-backup")
	cmd.SysProcAttr, cmd.Dir, cmd.Env = asNonRoot, "/", cf.Config.Env
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	require.Equal(t, "nebulactrl-server pre-upgrade-backup 65532\n", string(b), "the alias runs the binary under its own name, as the non-root user")
	cmd = exec.Command(pgDir+"/pg_dump", "--version")
	cmd.SysProcAttr, cmd.Dir, cmd.Env = asNonRoot, "/", cf.Config.Env
	b, err = cmd.CombinedOutput()
	require.NoError(t, err, "pg_dump runs inside the image with only its files: %s", b)
	require.Contains(t, string(b), "pg_dump (PostgreSQL)")
	// And dumps a real database from there, over TCP, as the non-root user.
	cmd = exec.Command(pgDir+"/pg_dump", "--format=custom", "--dbname="+pgtest.URL(t))
	cmd.SysProcAttr, cmd.Dir, cmd.Env, cmd.Stdin = asNonRoot, "/", cf.Config.Env, strings.NewReader("")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dump, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	require.True(t, bytes.HasPrefix(dump, []byte("PGDMP")), "a custom-format dump")
}

// The agent image is an index of amd64 and arm64, each with the binary at
// /nebulactrl-agent (where the init container seeds the pod volume from) and
// nothing of PostgreSQL.
func TestAgentImage(t *testing.T) {
	t.Parallel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	amd, arm := hello(t, "amd64"), hello(t, "arm64")
	ref := host + "/nebulactrl-agent:1.5.0"
	require.NoError(t, run(context.Background(), []string{"-kind", "nebulactrl-agent", "-version", "1.5.0",
		"-binary", "linux/amd64=" + amd, "-binary", "linux/arm64=" + arm, "-push", ref, "-insecure"}, io.Discard))
	r, err := name.ParseReference(ref, name.Insecure)
	require.NoError(t, err)
	idx, err := remote.Index(r)
	require.NoError(t, err)
	for arch, bin := range map[string]string{"amd64": amd, "arm64": arm} {
		img := platformImage(t, idx, arch)
		cf, err := img.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, arch, cf.Architecture)
		require.Equal(t, "65532:65532", cf.Config.User)
		require.Equal(t, "1.5.0", cf.Config.Labels[LabelVersion])
		require.Equal(t, []string{AgentBinary}, cf.Config.Entrypoint)
		hs, data := files(t, img)
		want, err := os.ReadFile(bin)
		require.NoError(t, err)
		require.Equal(t, want, data[AgentRealBinary])
		// The entrypoint links to a binary the agent may replace when it
		// upgrades itself in a container, and its state directory is its own.
		require.Equal(t, strings.TrimPrefix(AgentRealBinary, "/"), hs[AgentBinary].Linkname)
		for _, p := range []string{filepath.Dir(AgentRealBinary), AgentRealBinary, AgentStateDir} {
			require.Equal(t, NonRoot, hs[p].Uid, p)
			require.Equal(t, NonRoot, hs[p].Gid, p)
		}
		require.Contains(t, string(data["/etc/passwd"]), "nonroot:x:65532:65532:")
		require.NotContains(t, data, CAFile+"x")
		require.Contains(t, data, CAFile)
		for p := range hs {
			require.NotContains(t, p, "postgresql")
		}
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := hello(t, runtime.GOARCH)
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	for name, args := range map[string][]string{
		"dynamically linked": {"-kind", "nebulactrl-agent", "-version", "1", "-binary", "linux/" + runtime.GOARCH + "=/bin/sh", "-oci-layout", dir},
		"wrong architecture": {"-kind", "nebulactrl-agent", "-version", "1", "-binary", "linux/" + other + "=" + bin, "-oci-layout", dir},
		"no pg_dump there":   {"-kind", "nebulactrl", "-version", "1", "-binary", "linux/" + other + "=" + bin, "-oci-layout", dir},
		"unknown kind":       {"-kind", "nebula", "-version", "1", "-binary", "linux/amd64=" + bin, "-oci-layout", dir},
		"no output":          {"-kind", "nebulactrl-agent", "-version", "1", "-binary", "linux/amd64=" + bin},
		"not linux":          {"-kind", "nebulactrl-agent", "-version", "1", "-binary", "darwin/amd64=" + bin, "-oci-layout", dir},
	} {
		require.Error(t, run(context.Background(), args, io.Discard), name)
	}
	_, err := os.Stat(filepath.Join(dir, "index.json"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing was written")
}
