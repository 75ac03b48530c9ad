package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// The build commands against a real control plane (no agent: builds stay
// running until cancelled): a Git service with a sealed token, the webhook
// and its deliveries, tracking, a deploy that builds, and cancel.
func TestBuildCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	srv := servertest.Start(t, servertest.Options{})
	c := cliRun{t: t}
	c.okIn(password+"\n", "setup", "--url", srv.URL, "--email", "ada@example.com", "--org", "acme", "--password-stdin")
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/staging", "--cluster", "eu-1")

	const token = "glpat-very-secret-token-value"
	out := c.okIn(token+"\n", "service", "create", "acme/shop/web", "--git", "https://github.com/acme/web.git", "--branch", "main",
		"--dockerfile", "docker/Dockerfile", "--build-context", "app", "--git-token-stdin", "--git-user", "ci", "--port", "3000")
	require.Contains(t, out, "https://github.com/acme/web.git#main")
	listed := c.ok("service", "list", "acme/shop", "-o", "json")
	require.NotContains(t, listed, token, "the token is never shown")
	var ss []api.Service
	c.json(&ss, "service", "list", "acme/shop")
	require.Equal(t, &api.CredentialInfo{Kind: "token", Username: "ci"}, ss[0].Source.Credential)
	require.Equal(t, "docker/Dockerfile", ss[0].Source.Dockerfile)
	require.Contains(t, c.fails("service", "create", "acme/shop/bad", "--git", "https://x/y", "--branch", "main", "--git-user", "u"), "--git-user goes with --git-token-stdin")

	// The webhook: the secret once, then never again.
	out = c.ok("project", "webhook", "acme/shop")
	secret := regexp.MustCompile(`Secret  (nbh_\S+)`).FindStringSubmatch(out)
	require.Len(t, secret, 2, out)
	url := regexp.MustCompile(`URL     (\S+)`).FindStringSubmatch(out)[1]
	require.Contains(t, url, httpapi.HookPath)
	again := c.ok("project", "webhook", "acme/shop")
	require.NotContains(t, again, secret[1])
	require.Contains(t, again, "--rotate")
	// A ping signed with it is a delivery.
	body := `{"zen":"Keep it logically awesome.","hook_id":1}`
	m := hmac.New(sha256.New, []byte(secret[1]))
	m.Write([]byte(body))
	req, err := http.NewRequest("POST", srv.URL+strings.TrimPrefix(url, "http://127.0.0.1"), strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "ping")
	req.Header.Set("X-GitHub-Delivery", uuid.NewString())
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, c.ok("project", "deliveries", "acme/shop"), "ping")

	require.Contains(t, c.ok("service", "track", "acme/shop/staging/web", "--branch", "feature/x"), "follows branch feature/x")
	require.Equal(t, exitUsage, exitCode(c.run("", "service", "track", "acme/shop/staging/web").failed))

	// Deploying builds (no agent here: the build runs until cancelled).
	commit := strings.Repeat("ab", 20)
	out = c.ok("deploy", "acme/shop/staging/web", "--commit", commit)
	require.Contains(t, out, "Building "+commit[:12])
	var bs []api.Build
	c.json(&bs, "builds", "list", "acme/shop", "--service", "web")
	require.Len(t, bs, 1)
	require.Equal(t, commit, bs[0].Commit)
	require.Equal(t, "feature/x", bs[0].Branch, "the tracked branch")
	require.Equal(t, "deploy", bs[0].Trigger)
	require.Contains(t, c.ok("builds", "show", "acme", bs[0].ID), "docker/Dockerfile in app")
	require.Contains(t, c.ok("builds", "cancel", "acme", bs[0].ID), "cancelled")
	require.Equal(t, exitConflict, exitCode(c.run("", "builds", "cancel", "acme", bs[0].ID).failed), "a finished build cannot be cancelled")
	require.Equal(t, exitFailed, exitCode(c.run("", "builds", "logs", "acme", bs[0].ID).failed), "a build that did not succeed exits 7")
	require.Equal(t, exitNotFound, exitCode(c.run("", "builds", "show", "acme", uuid.NewString()).failed))
	require.Error(t, c.run("", "deploy", "acme/shop/staging/web", "--commit", "abc").failed, "a short commit is refused")
}
