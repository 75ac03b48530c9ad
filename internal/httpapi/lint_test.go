package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// RedoclyVersion is the Redocly CLI the document is linted with; go tool
// task deps installs it (scripts/ensure-redocly.sh).
const redoclyVersion = "2.77.0"

// redocly finds the pinned Redocly CLI: $REDOCLY_PREFIX or
// ~/.cache/nebulactrl/redocly. Without it the test fails.
func redocly(t *testing.T) string {
	t.Helper()
	prefix := os.Getenv("REDOCLY_PREFIX")
	if prefix == "" {
		home, err := os.UserHomeDir()
		require.NoError(t, err)
		prefix = filepath.Join(home, ".cache", "nebulactrl", "redocly")
	}
	bin := filepath.Join(prefix, "node_modules", ".bin", "redocly")
	out, err := exec.Command(bin, "--version").Output()
	if err == nil && strings.TrimSpace(string(out)) == redoclyVersion {
		return bin
	}
	t.Fatal("the OpenAPI linter @redocly/cli@" + redoclyVersion + " is not installed at " + bin + " (go tool task deps installs it)")
	return ""
}

// The document the server serves passes Redocly's recommended rules with no
// error and no warning.
func TestOpenAPIDocumentLintsClean(t *testing.T) {
	t.Parallel()
	bin := redocly(t)
	s := servertest.Start(t, servertest.Options{})
	resp, err := http.Get(s.URL + "/api/v1/openapi.json")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	dir := t.TempDir()
	file := filepath.Join(dir, "openapi.json")
	require.NoError(t, os.WriteFile(file, raw, 0o600))
	// An empty configuration file: the recommended rules, nothing relaxed.
	cfg := filepath.Join(dir, "redocly.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("extends:\n  - recommended\n"), 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lint", "--config", cfg, "--format", "stylish", "--max-problems", "1000", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	report := string(out)
	require.NoError(t, err, "redocly lint failed:\n%s", report)
	require.Contains(t, report, "Your API description is valid", report)
	// Problems are lines "<line>:<col>  <severity>  <rule>  <message>"; the
	// summary counts warnings ("You have 1 warning."). Node.js's own notices
	// (a deprecation box) are neither.
	require.NotRegexp(t, `(?m)^\s*\d+:\d+\s+(warning|error)\s`, report, "redocly lint reports problems:\n%s", report)
	require.NotRegexp(t, `You have \d+ warnings?`, report, "redocly lint reports warnings:\n%s", report)
}
