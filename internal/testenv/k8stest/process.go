package k8stest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// tailLines is how much of a process's log goes into an error: enough for
// the fatal message and the lines that led to it.
const tailLines = 30

// process is one control-plane binary, its output going to NAME.log in the
// cluster directory.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
}

func startProcess(dir, name, binary string, args ...string) (*process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating the log of %s: %w", name, err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Dir = dir
	// An *os.File, not a pipe: the child writes straight to it, so no copying
	// goroutine, and the test binary's own output is never held open by a
	// child that outlives it.
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	fmt.Fprintf(logFile, "# %s %s\n", binary, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitError reports a process that has exited, with the tail of its log, or
// nil while it runs. A control-plane process never exits on its own while the
// cluster is up, so any exit is a failure.
func (p *process) exitError() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); the end of its log, %s:\n%s", p.name, p.waitErr, filepath.Base(p.logPath), p.tail())
	default:
		return nil
	}
}

// stop sends SIGTERM, then SIGKILL if the process is still there after grace.
func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("terminating %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// tail returns the last lines of the process's log.
func (p *process) tail() string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	defer f.Close()
	// Reading the last 64 KiB is enough for tailLines of even verbose lines
	// and keeps a huge log from being read whole.
	const window = 64 << 10
	if st, err := f.Stat(); err == nil && st.Size() > window {
		if _, err := f.Seek(-window, io.SeekEnd); err != nil {
			return fmt.Sprintf("(reading the log: %v)", err)
		}
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(reading the log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > tailLines {
		lines = lines[len(lines)-tailLines:]
	}
	return "\t" + string(bytes.Join(lines, []byte("\n\t")))
}
