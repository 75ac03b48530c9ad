package pgtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// A cluster whose test process died is stopped and removed by the next one;
// a cluster whose owner lives is left alone.
func TestOrphanedClustersAreReaped(t *testing.T) {
	root, err := os.MkdirTemp("", "reap-root-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	if err := os.Chmod(root, 0o755); err != nil { // PostgreSQL runs as its own user under root
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(root, "nebula-pgtest-orphan")
	kept := filepath.Join(root, "nebula-pgtest-kept")
	for dir, owner := range map[string]int{orphan: dead.Process.Pid, kept: os.Getpid()} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(owner)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: orphan, Settings: FastSettings})
	if err != nil {
		t.Fatalf("starting a real PostgreSQL cluster: %v", err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	pm, err := os.ReadFile(filepath.Join(orphan, "pgdata", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.SplitN(string(pm), "\n", 2)[0])
	if !alive(pid) {
		t.Fatalf("the postmaster %d runs before", pid)
	}

	if n := reapOrphans(root); n != 1 {
		t.Fatalf("reaped %d clusters, want the orphan only", n)
	}
	wait.Eventually(t, "the orphan's postmaster is stopped", func() bool { return !alive(pid) })
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan's directory is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(kept, ownerFile)); err != nil {
		t.Fatalf("the living owner's cluster directory was touched: %v", err)
	}
}
