package dockertest

import (
	"path/filepath"
	"syscall"

	"github.com/nebulactrl/nebulactrl/internal/testenv/orphan"
)

// What a test process that died (SIGKILL, a timeout) left running expires
// by itself, as pgtest's clusters do (package orphan): the next test
// process that starts an engine kills the process group of every engine
// whose owner is gone (dockerd, its containerd, the shims and the
// containers' processes), unmounts what is mounted under its directory and
// removes it.

const (
	enginePattern = "dockertest-"
	ownerFile     = orphan.OwnerFile
)

// newEngineDir makes an engine's directory owned by this process, after
// reaping the orphans of dead ones (once per process).
func newEngineDir() (string, error) { return orphan.NewDir(enginePattern, stopEngine) }

// reapOrphans stops and removes the engines under root whose owner process
// is gone; it returns how many it reaped.
func reapOrphans(root string) int { return orphan.Reap(root, enginePattern, stopEngine) }

func stopEngine(dir string) {
	// dockerd leads its own process group (Start's Setpgid).
	if pid := orphan.PIDFile(filepath.Join(dir, "docker.pid")); pid > 1 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	unmountUnder(dir)
}

func alive(pid int) bool { return orphan.Alive(pid) }
