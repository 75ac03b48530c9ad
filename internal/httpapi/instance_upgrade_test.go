package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// GET /api/v1/instance/upgrade always has the key preUpgradeBackup: null
// when no backup was taken before an upgrade (a new database), so that a
// program reading it can tell "none" from "not reported".
func TestInstanceUpgradeSaysWhenNoBackupWasTaken(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	c := newClient(t, srv)
	root := srv.Setup(t, "root@example.com", "acme")
	r := c.do("GET", "/api/v1/instance/upgrade", root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var raw map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.body, &raw))
	v, ok := raw["preUpgradeBackup"]
	require.True(t, ok, "the key is there: %s", r.body)
	require.Equal(t, "null", string(v))
}
