package dockertest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// What a test process that died (SIGKILL, a timeout) left running expires
// by itself, as pgtest's clusters do: each engine's directory names its
// owner's pid, and the next test process that starts an engine kills the
// process group of every engine whose owner is gone (dockerd, its
// containerd, the shims and the containers' processes), unmounts what is
// mounted under its directory and removes it.

const ownerFile = "owner.pid"

var reapOnce sync.Once

// newEngineDir makes an engine's directory owned by this process, after
// reaping the orphans of dead ones (once per process).
func newEngineDir() (string, error) {
	reapOnce.Do(func() { reapOrphans(os.TempDir()) })
	dir, err := os.MkdirTemp("", "dockertest-")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// reapOrphans stops and removes the engines under root whose owner process
// is gone; it returns how many it reaped.
func reapOrphans(root string) int {
	dirs, _ := filepath.Glob(filepath.Join(root, "dockertest-*"))
	n := 0
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not one of ours, or made before owners were named
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || alive(owner) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "docker.pid")); err == nil {
			// dockerd leads its own process group (Start's Setpgid).
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			}
		}
		unmountUnder(dir)
		_ = os.RemoveAll(dir)
		n++
	}
	return n
}

// alive reports whether a process with pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
