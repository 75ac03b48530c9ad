package pgtest

import (
	"path/filepath"
	"syscall"

	"github.com/nebulactrl/nebulactrl/internal/testenv/orphan"
)

// What a test process that died (SIGKILL, a timeout) left running expires
// by itself (package orphan): the next test process that starts a cluster
// stops the clusters whose owner is gone (immediate shutdown of their
// postmaster) and removes their directories.

const (
	clusterPattern = "nebula-pgtest-"
	ownerFile      = orphan.OwnerFile
)

// newClusterDir makes a cluster's directory owned by this process, after
// reaping the orphans of dead ones (once per process).
func newClusterDir() (string, error) { return orphan.NewDir(clusterPattern, stopPostmaster) }

// reapOrphans stops and removes the clusters under root whose owner
// process is gone; it returns how many it reaped.
func reapOrphans(root string) int { return orphan.Reap(root, clusterPattern, stopPostmaster) }

func stopPostmaster(dir string) {
	if pid := orphan.PIDFile(filepath.Join(dir, "pgdata", "postmaster.pid")); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
	}
}

func alive(pid int) bool { return orphan.Alive(pid) }
