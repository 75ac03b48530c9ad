// Package orphan makes what a test process leaves running expire by itself:
// each directory of a long-lived test part (a PostgreSQL cluster, a Docker
// engine) names its owner's pid, and the next test process that makes one
// stops the parts of owners that are gone and removes their directories.
package orphan

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// OwnerFile names the owner's pid in a part's directory.
const OwnerFile = "owner.pid"

var reaped sync.Map // pattern -> *sync.Once

// NewDir makes a directory for a part, named after pattern (os.MkdirTemp's)
// in the temporary directory and owned by this process, after reaping (once
// per pattern and process) the directories of dead owners: stop stops what
// runs there before the directory is removed.
func NewDir(pattern string, stop func(dir string)) (string, error) {
	once, _ := reaped.LoadOrStore(pattern, &sync.Once{})
	once.(*sync.Once).Do(func() { Reap(os.TempDir(), pattern, stop) })
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, OwnerFile), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// Reap stops and removes the directories pattern names under root whose
// owner is gone; it returns how many. Directories without an owner file
// (not made by NewDir) are left alone.
func Reap(root, pattern string, stop func(dir string)) int {
	dirs, _ := filepath.Glob(filepath.Join(root, pattern+"*"))
	n := 0
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, OwnerFile))
		if err != nil {
			continue
		}
		owner, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || Alive(owner) {
			continue
		}
		stop(dir)
		_ = os.RemoveAll(dir)
		n++
	}
	return n
}

// Alive reports whether a process with pid exists.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// PIDFile reads a pid from the first line of a file; 0 when it cannot.
func PIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		return 0
	}
	return pid
}
