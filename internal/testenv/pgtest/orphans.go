package pgtest

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
// by itself: each cluster directory names its owner's pid, and the next
// test process that starts a cluster stops the clusters whose owner is gone
// (immediate shutdown of their postmaster) and removes their directories.

const ownerFile = "owner.pid"

var reapOnce sync.Once

// newClusterDir makes a cluster's directory owned by this process, after
// reaping the orphans of dead ones (once per process).
func newClusterDir() (string, error) {
	reapOnce.Do(func() { reapOrphans(os.TempDir()) })
	dir, err := os.MkdirTemp("", "nebula-pgtest-")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// reapOrphans stops and removes the clusters under root whose owner
// process is gone; it returns how many it reaped.
func reapOrphans(root string) int {
	dirs, _ := filepath.Glob(filepath.Join(root, "nebula-pgtest-*"))
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
		if pm, err := os.ReadFile(filepath.Join(dir, "pgdata", "postmaster.pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pm), "\n", 2)[0])); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGQUIT) // immediate shutdown
			}
		}
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
