package dockertest

import (
	"archive/tar"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// hostState is what the engine must leave as it found it: the ruleset's
// Docker rules and chains, and the Docker bridges (only those: other tests
// of the machine may change the rest meanwhile).
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if p, err := exec.LookPath("iptables-save"); err == nil {
		out, _ := exec.Command(p).Output()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(strings.ToLower(l), "docker") || strings.Contains(l, "br-") {
				fmt.Fprintln(&b, l)
			}
		}
	}
	links, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Name, "docker") || strings.HasPrefix(l.Name, "br-") {
			fmt.Fprintln(&b, l.Name)
		}
	}
	return b.String()
}

// busyboxRootfs is a tar of a root filesystem with the machine's static
// busybox as /bin/busybox and /bin/sh.
func busyboxRootfs(t *testing.T) string {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("busybox-static is required (go tool task docker): %v", err)
	}
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, h := range []*tar.Header{
		{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(bb))},
		{Name: "bin/sh", Typeflag: tar.TypeSymlink, Linkname: "busybox", Mode: 0o777},
		{Name: "www/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "www/index.html", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		switch h.Name {
		case "bin/busybox":
			_, err = tw.Write(bb)
		case "www/index.html":
			_, err = io.WriteString(tw, "hello\n")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// The engine runs a container; with Compose, services on a user-defined
// network reach each other by name and a published loopback port answers
// from the host; at the end the directory is gone and the host's ruleset
// and links are as before.
func TestEngine(t *testing.T) {
	before := hostState(t)
	var dir string
	t.Run("engine", func(t *testing.T) {
		e := Start(t)
		dir = e.Dir
		rootfs := busyboxRootfs(t)
		e.Must(t, "import", rootfs, "local/busybox:1")
		if out := e.Must(t, "run", "--rm", "local/busybox:1", "/bin/busybox", "echo", "hi"); out != "hi" {
			t.Fatalf("run printed %q", out)
		}

		port := func() int {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			return l.Addr().(*net.TCPAddr).Port
		}()
		project := t.TempDir()
		compose := fmt.Sprintf(`name: dockertest
services:
  web:
    image: local/busybox:1
    command: ["/bin/busybox", "httpd", "-f", "-p", "8080", "-h", "/www"]
    init: true
    ports: ["127.0.0.1:%d:8080"]
  client:
    image: local/busybox:1
    command: ["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do /bin/busybox wget -q -O - http://web:8080/ && exit 0; /bin/busybox sleep 0.5; done; exit 1"]
    depends_on: [web]
`, port)
		if err := os.WriteFile(filepath.Join(project, "compose.yaml"), []byte(compose), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := e.Command("compose", "up", "--abort-on-container-exit", "--exit-code-from", "client")
		cmd.Dir = project
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "hello") {
			t.Fatalf("compose up: %v\n%s", err, out)
		}
		cmd = e.Command("compose", "up", "--detach", "--wait", "web")
		cmd.Dir = project
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("compose up web: %v\n%s", err, out)
		}
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				body = string(b)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the published port does not answer: %v", err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if body != "hello\n" {
			t.Fatalf("the published port answered %q", body)
		}
		// Left running with its network: the cleanup removes them.
	})
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is left: %v", dir, err)
	}
	if after := hostState(t); after != before {
		t.Errorf("the host's ruleset or links changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
