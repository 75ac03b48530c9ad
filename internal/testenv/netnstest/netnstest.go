// Package netnstest builds test networks of hosts out of Linux network
// namespaces and veth pairs (iproute2's ip; go tool task deps installs it):
// each host a namespace of its own, for tests of what crosses a network.
// It needs root. What a killed test process left behind expires by itself:
// namespaces are named after their owner's pid, and the next test process
// deletes those whose owner is gone.
package netnstest

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

var (
	counter  atomic.Int64
	reapOnce sync.Once
)

// prefix starts the names of this process's namespaces and links.
func prefix(pid int) string { return "nbl" + strconv.FormatInt(int64(pid), 36) + "-" }

// Require fails the test when it cannot build networks here: not root, or
// no ip command.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netnstest: network namespaces need root")
	}
	for _, c := range []string{"ip", "ping", "nft"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Fatalf("netnstest: %s is missing (go tool task deps installs iproute2, iputils-ping and nftables)", c)
		}
	}
	reapOnce.Do(reapOrphans)
}

// NS is a network namespace: a host of the test network.
type NS struct {
	Name string
}

// New makes a namespace with its loopback up; it is deleted when the test
// ends (and every link in it with it).
func New(t testing.TB, name string) *NS {
	t.Helper()
	Require(t)
	ns := &NS{Name: prefix(os.Getpid()) + name}
	run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.Name).Run() })
	ns.Must(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Cmd is a command run in the namespace.
func (n *NS) Cmd(args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// Must runs a command in the namespace and returns its output; a failure
// fails the test.
func (n *NS) Must(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Cmd(args...).CombinedOutput()
	if err != nil {
		t.Fatalf("netnstest: in %s: %s: %v: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("netnstest: %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Link makes a veth pair between a and b (nil: the test's own namespace),
// named aIf and bIf, with the addresses (CIDR, or "" for none), both up. A
// link to the test's own namespace gets a generated name there instead of
// bIf (names are shared by every test process).
func Link(t testing.TB, a *NS, aIf, aAddr string, b *NS, bIf, bAddr string) {
	t.Helper()
	Require(t)
	tmp := fmt.Sprintf("%sv%d", prefix(os.Getpid()), counter.Add(1))
	if b == nil {
		bIf = tmp + "r"
	}
	run(t, "ip", "link", "add", tmp+"a", "type", "veth", "peer", "name", tmp+"b")
	run(t, "ip", "link", "set", tmp+"a", "netns", a.Name)
	a.Must(t, "ip", "link", "set", tmp+"a", "name", aIf)
	if b != nil {
		run(t, "ip", "link", "set", tmp+"b", "netns", b.Name)
		b.Must(t, "ip", "link", "set", tmp+"b", "name", bIf)
	} else {
		run(t, "ip", "link", "set", tmp+"b", "name", bIf)
	}
	for _, side := range []struct {
		ns         *NS
		name, addr string
	}{{a, aIf, aAddr}, {b, bIf, bAddr}} {
		cmd := func(args ...string) {
			if side.ns != nil {
				side.ns.Must(t, args...)
			} else {
				run(t, args...)
			}
		}
		if side.addr != "" {
			cmd("ip", "addr", "add", side.addr, "dev", side.name)
		}
		cmd("ip", "link", "set", side.name, "up")
	}
}

// Forward accepts TCP connections on addr (in the test's own namespace: an
// address of a Link to it) and forwards each to target, until the test
// ends: how a host in a namespace reaches a server on the test's loopback.
// It returns the listening address.
func Forward(t testing.TB, addr, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("netnstest: listening on %s: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return l.Addr().String()
}

// reapOrphans deletes the namespaces of test processes that are gone (their
// links go with them).
func reapOrphans() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "nbl") {
			continue
		}
		rest := strings.TrimPrefix(f[0], "nbl")
		i := strings.IndexByte(rest, '-')
		if i <= 0 {
			continue
		}
		pid, err := strconv.ParseInt(rest[:i], 36, 64)
		if err != nil || alive(int(pid)) {
			continue
		}
		_ = exec.Command("ip", "netns", "del", f[0]).Run()
	}
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
