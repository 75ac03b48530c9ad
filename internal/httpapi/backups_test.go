package httpapi_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	nebula "github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// The instance administrator takes a backup through the API and lists it;
// without a destination the routes answer 503. (Other callers' 403 is in
// the authorisation suite, which covers every route.)
func TestBackupsThroughTheAPI(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "backups")
	t.Setenv(backup.EnvDir, dir)
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")

	r := c.do("POST", "/api/v1/instance/backups", root, nil)
	require.Equal(t, 201, r.status, string(r.body))
	var b api.Backup
	r.json(t, &b)
	require.Equal(t, backup.TriggerManual, b.Trigger)
	require.Equal(t, "test", b.Version)
	require.Len(t, b.SHA256, 64)
	st, err := os.Stat(filepath.Join(dir, b.Dump))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	require.NotContains(t, string(r.body), dir, "the answer names no path on the server")

	var list []api.Backup
	c.do("GET", "/api/v1/instance/backups", root, nil).items(t, &list)
	require.Len(t, list, 1)
	require.Equal(t, b, list[0])

	// The Go client (nebula backup list|create) reads the same.
	cl, err := nebula.New(s.URL, root)
	require.NoError(t, err)
	made, err := cl.CreateBackup(context.Background())
	require.NoError(t, err)
	got, err := cl.Backups(context.Background())
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Contains(t, got, made)

	t.Setenv(backup.EnvDir, "")
	bare := servertest.Start(t, servertest.Options{})
	bc := newClient(t, bare)
	broot := bare.Setup(t, "root@example.com", "acme")
	r = bc.do("GET", "/api/v1/instance/backups", broot, nil)
	require.Equal(t, 503, r.status)
	code, _ := r.errorCode(t)
	require.Equal(t, "backups_not_configured", code)
}
