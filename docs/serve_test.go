package docs_test

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// `nebula serve` with NEBULACTRL_LOG_FORMAT=json writes nothing but JSON
// objects to stderr, the first-user hint among them while no user exists,
// and one "request" line per request, with the echoed request id.
func TestServeLogsJSONLines(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build(t, bin, "nebula")
	addr := freeAddr(t)
	srv := startServe(t, bin, filepath.Join(dir, "server.env"), []string{
		"NEBULACTRL_DATABASE_URL=" + pgtest.URL(t),
		"NEBULACTRL_LISTEN=" + addr,
		"NEBULACTRL_DATA_DIR=" + filepath.Join(dir, "data"),
		"NEBULACTRL_LOG_FORMAT=json",
	})
	srv.waitFor(t, `"msg":"no user yet: create the first one with nebula setup"`)

	req, _ := http.NewRequest("GET", "http://"+addr+"/api/v1/me?token=in-the-query", nil)
	req.Header.Set("X-Request-Id", "json-log-1")
	req.Header.Set("Authorization", "Bearer nbl_not_a_token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Equal(t, "json-log-1", resp.Header.Get("X-Request-Id"))
	line := srv.waitFor(t, `"request_id":"json-log-1"`)
	srv.stop(t)

	var l map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &l))
	require.Equal(t, "request", l["msg"])
	require.Equal(t, "GET /api/v1/me", l["route"])
	require.EqualValues(t, 401, l["status"])
	require.Equal(t, "INFO", l["level"])
	out := srv.output()
	require.NotContains(t, out, "in-the-query", "no query string in the log")
	require.NotContains(t, out, "nbl_not_a_token", "no token in the log")
	require.NotContains(t, out, "First time?", "no text lines among the JSON ones")
	n := 0
	for _, s := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(s), &m), "stderr holds a line that is not JSON: %q", s)
		_, err := time.Parse(time.RFC3339Nano, m["time"].(string))
		require.NoError(t, err)
		n++
	}
	require.Greater(t, n, 3)
}
