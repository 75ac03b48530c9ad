package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/backup"
)

// An OCI layout holds a docker manifest.json as Docker 20.10's docker load
// needs it: one entry per version, the image of this machine's
// architecture, its config and layers the layout's own blobs; a version
// written again replaces its entry. (The docker test in packaging loads it
// into a real engine.)
func TestLayoutHasADockerManifest(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "layout")
	amd, arm := hello(t, "amd64"), hello(t, "arm64")
	for _, v := range []string{"1.5.0", "1.6.0", "1.5.0"} {
		require.NoError(t, run(context.Background(), []string{"-kind", "nebulactrl-agent", "-version", v,
			"-binary", "linux/amd64=" + amd, "-binary", "linux/arm64=" + arm, "-oci-layout", dir}, io.Discard))
	}
	_, err := layout.FromPath(dir)
	require.NoError(t, err, "still an OCI layout")
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	require.NoError(t, err)
	var entries []DockerManifestEntry
	require.NoError(t, json.Unmarshal(b, &entries))
	require.Len(t, entries, 2)
	require.Equal(t, []string{"ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"}, entries[0].RepoTags)
	require.Equal(t, []string{"ghcr.io/nebulactrl/nebulactrl-agent:1.6.0"}, entries[1].RepoTags)
	for _, e := range entries {
		var cfg struct {
			Architecture string `json:"architecture"`
			RootFS       struct {
				DiffIDs []string `json:"diff_ids"`
			} `json:"rootfs"`
		}
		c, err := os.ReadFile(filepath.Join(dir, e.Config))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(c, &cfg))
		require.Equal(t, runtime.GOARCH, cfg.Architecture)
		require.Len(t, e.Layers, len(cfg.RootFS.DiffIDs))
		for _, l := range e.Layers {
			require.FileExists(t, filepath.Join(dir, l))
		}
	}

	// Another repository for the tags.
	other := filepath.Join(t.TempDir(), "layout")
	require.NoError(t, run(context.Background(), []string{"-kind", "nebulactrl-agent", "-version", "2.0.0",
		"-binary", "linux/" + runtime.GOARCH + "=" + amd, "-oci-layout", other, "-docker-repo", "local/agent"}, io.Discard))
	b, err = os.ReadFile(filepath.Join(other, "manifest.json"))
	require.NoError(t, err)
	require.Contains(t, string(b), `"RepoTags":["local/agent:2.0.0"]`)
}

// The PostgreSQL image of this machine's packages: the server's programs
// and what they need, busybox as the shell, the entrypoint, PostgreSQL's
// user and directories. (The docker test in packaging runs it.)
func TestPostgresImage(t *testing.T) {
	t.Parallel()
	binDir, err := backup.FindBinDir()
	require.NoError(t, err)
	img, err := BuildPostgres(Spec{Kind: Postgres, PGBinDir: binDir, Version: "15"})
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "999:999", cf.Config.User)
	require.Equal(t, []string{Entrypoint}, cf.Config.Entrypoint)
	require.Equal(t, "SIGINT", cf.Config.StopSignal)
	require.Contains(t, cf.Config.Env, "PGDATA="+PGData)
	hs, data := files(t, img)
	for _, tool := range postgresTools {
		require.Contains(t, data, filepath.Join(binDir, tool))
	}
	require.Contains(t, data, Busybox)
	require.Equal(t, "busybox", hs["/bin/sh"].Linkname)
	require.Contains(t, string(data[Entrypoint]), "POSTGRES_PASSWORD")
	require.Contains(t, string(data["/etc/passwd"]), "postgres:x:999:999:")
	require.Equal(t, 999, hs[PGData].Uid)
	require.Equal(t, 999, hs[PGSocketDir].Uid)
	var plpgsql bool
	for p := range data {
		if filepath.Base(p) == "plpgsql.so" {
			plpgsql = true
		}
		require.NotContains(t, p, "llvmjit")
	}
	require.True(t, plpgsql, "the extension libraries initdb needs")

	require.Error(t, run(context.Background(), []string{"-kind", "postgres", "-version", "15", "-binary", "linux/amd64=/bin/sh", "-oci-layout", t.TempDir()}, io.Discard),
		"no -binary for postgres")
}
