package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The agent checks that it can keep its credential before it registers; a
// state directory it cannot create or write is refused, and the check
// leaves nothing behind.
func TestFileStoreWritable(t *testing.T) {
	dir := t.TempDir()
	ok := FileStore{Path: filepath.Join(dir, "state", "credential")}
	require.NoError(t, ok.Writable(context.Background()))
	entries, err := os.ReadDir(filepath.Join(dir, "state"))
	require.NoError(t, err)
	require.Empty(t, entries, "the probe is removed")
	cred, err := ok.Load(context.Background())
	require.NoError(t, err)
	require.Empty(t, cred, "no credential was made")

	// A state directory under a file cannot be made (root may write
	// anywhere, so a mode would not stop it).
	file := filepath.Join(dir, "a-file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	bad := FileStore{Path: filepath.Join(file, "state", "credential")}
	require.Error(t, bad.Writable(context.Background()))
}
