package docs_test

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

var envName = regexp.MustCompile(`NEBULACTRL_[A-Z0-9_]*[A-Z0-9]`)

// section returns a Markdown document's section under heading (a whole
// "## ..." line), up to the next heading of the same level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	_, s, ok := strings.Cut(doc, "\n"+heading+"\n")
	require.True(t, ok, "no section %q", heading)
	level := strings.SplitN(heading, " ", 2)[0] + " "
	if i := strings.Index(s, "\n"+level); i >= 0 {
		s = s[:i]
	}
	return s
}

// shBlocks returns the ```sh blocks of a piece of Markdown.
func shBlocks(md string) []string {
	var out []string
	for _, part := range strings.Split(md, "```sh\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, block)
	}
	return out
}

// The NEBULACTRL_* names the documentation mentions exist: each is a
// setting of the control plane (config.Names) or a name the code reads as
// a string literal (the CLI's and the agent's, and the tests' own, such as
// NEBULACTRL_TEST_DATABASE_URL); and every setting of the control plane is
// in the README's configuration table.
func TestDocumentedSettingsExist(t *testing.T) {
	known := map[string]bool{}
	for _, n := range config.Names {
		known[n] = true
	}
	lit := regexp.MustCompile(`"(NEBULACTRL_[A-Z0-9_]*[A-Z0-9])"`)
	require.NoError(t, filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "quickstart") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			known[m[1]] = true
		}
		return nil
	}))

	docs, err := filepath.Glob("*.md")
	require.NoError(t, err)
	docs = append(docs, "../README.md")
	var unknown []string
	for _, path := range docs {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, n := range envName.FindAllString(string(b), -1) {
			if !known[n] {
				unknown = append(unknown, filepath.Base(path)+": "+n)
			}
		}
	}
	sort.Strings(unknown)
	require.Empty(t, unknown, "the documentation names settings that nothing reads")

	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	table := section(t, string(readme), "## Configuration")
	for _, n := range config.Names {
		require.Contains(t, table, "`"+n+"`", "the README's configuration table lacks %s", n)
	}
}

// The commands of docs/operations.md that can run here do, and say what the
// document says: the master key made by hand is one the control plane
// accepts; the token made for Prometheus reads /metrics on the public
// listener; every metric the document lists is served. (The Caddy and
// Traefik files cannot run here: neither is installed.)
func TestOperationsDocCommands(t *testing.T) {
	b, err := os.ReadFile("operations.md")
	require.NoError(t, err)
	ops := string(b)

	keyBlocks := shBlocks(section(t, ops, "## The master key"))
	require.Len(t, keyBlocks, 1)
	out, err := exec.Command("bash", "-e", "-o", "pipefail", "-c", keyBlocks[0]).Output()
	require.NoError(t, err)
	_, err = seal.ParseMasterKey(strings.TrimSpace(string(out)))
	require.NoError(t, err, "the documented command makes a master key the control plane accepts")

	metricsDoc := section(t, ops, "## Logs and metrics")
	blocks := shBlocks(metricsDoc)
	require.Len(t, blocks, 1)
	require.Contains(t, blocks[0], "nebula token create")

	bin := filepath.Join(t.TempDir(), "bin")
	build(t, bin, "nebula")
	// A release, as operators run (a build from source needs --image on
	// nebula cluster manifest: the README's quick start says so).
	s := servertest.Start(t, servertest.Options{PublicMetrics: true, Version: "1.0.0"})
	root := s.Setup(t, "root@example.com", "acme")
	pool, err := pgxpool.New(context.Background(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// A deployment as the read model holds it, so that the gauge by status
	// has a series.
	_, err = pool.Exec(context.Background(), `INSERT INTO deployments (id, org_id, project_id, environment_id, service_id, release_id, status, reason, requested_at, updated_at, requested_by)
		VALUES (gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), gen_random_uuid(), 'succeeded', '', now(), now(), 'test')`)
	require.NoError(t, err)

	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", blocks[0])
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "NEBULACTRL_URL=" + s.URL, "NEBULACTRL_TOKEN=" + root}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	token := regexp.MustCompile(`nbl_[A-Za-z0-9_-]+`).FindString(string(out))
	require.NotEmpty(t, token, "the command prints the token: %s", out)

	req, _ := http.NewRequest("GET", s.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)

	served := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			name, _, _ = strings.Cut(name, "{")
			served[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
		}
	}
	documented := regexp.MustCompile("`(nebulactrl_[a-z_]+)").FindAllStringSubmatch(metricsDoc, -1)
	require.NotEmpty(t, documented)
	for _, m := range documented {
		require.True(t, served[m[1]], "docs/operations.md lists %s, which /metrics does not serve", m[1])
	}

	// Connecting a cluster over the internet: the manifest names the public
	// URL, over TLS, with nothing insecure in it. kubectl is a stand-in
	// here that keeps what it is given (the quick-start test applies the
	// manifest with the real kubectl).
	connect := shBlocks(section(t, ops, "## Connecting a cluster over the internet"))
	require.Len(t, connect, 1)
	applied := filepath.Join(t.TempDir(), "applied.yaml")
	require.NoError(t, os.WriteFile(filepath.Join(bin, "kubectl"), []byte("#!/bin/sh\ncat > "+applied+"\n"), 0o755))
	cmd = exec.Command("bash", "-e", "-o", "pipefail", "-c", connect[0])
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + t.TempDir(), "NEBULACTRL_URL=" + s.URL, "NEBULACTRL_TOKEN=" + root}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	manifest, err := os.ReadFile(applied)
	require.NoError(t, err)
	require.Contains(t, string(manifest), "--url=https://nebula.example.com")
	require.NotContains(t, string(manifest), "insecure")
	require.Regexp(t, `(?m)^eu-1\s+Disconnected`, string(out), "cluster list shows the new cluster, not connected yet")
}
