package k8stest

import "syscall"

// sysProcAttr has the kernel kill a child when the test binary dies without
// running its cleanups (go test's timeout, a crash), so that no etcd or API
// server outlives it holding ports and the temp dir.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
