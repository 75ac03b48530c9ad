package dockertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// An engine whose test process died is killed with its process group and
// removed by the next one; an engine whose owner lives is left alone. The
// engine here is a process group of its own led by a sleeping process that
// stands for dockerd (the reaper sees only the pid file and the group):
// starting a real dockerd belongs to the tests that use one.
func TestOrphanedEnginesAreReaped(t *testing.T) {
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(root, "dockertest-orphan")
	kept := filepath.Join(root, "dockertest-kept")
	daemons := map[string]*exec.Cmd{}
	for dir, owner := range map[string]int{orphan: dead.Process.Pid, kept: os.Getpid()} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
		// The daemon and a child of it, as containerd is.
		cmd := exec.Command("sh", "-c", "sleep 600 & wait")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }()
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		if err := os.WriteFile(filepath.Join(dir, "docker.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		daemons[dir] = cmd
	}

	if n := reapOrphans(root); n != 1 {
		t.Fatalf("reaped %d engines, want the orphan only", n)
	}
	pgid := daemons[orphan].Process.Pid
	wait.Eventually(t, "the orphan's process group is gone", func() bool {
		return syscall.Kill(-pgid, 0) != nil
	})
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan's directory is still there: %v", err)
	}
	if !alive(daemons[kept].Process.Pid) {
		t.Fatal("the living owner's engine was killed")
	}
	if _, err := os.Stat(filepath.Join(kept, ownerFile)); err != nil {
		t.Fatalf("the living owner's engine directory was touched: %v", err)
	}
}
