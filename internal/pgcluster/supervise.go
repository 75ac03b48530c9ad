package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// watch follows a postmaster this process did not start: its end is seen by
// looking every WatchInterval (until Stop).
func (c *Cluster) watch(pid int) *postmaster {
	pm := &postmaster{pid: pid, exited: make(chan struct{})}
	go func() {
		t := time.NewTicker(c.cfg.WatchInterval)
		defer t.Stop()
		for {
			select {
			case <-c.stopped:
				return
			case <-t.C:
			}
			if !alive(pid) {
				pm.status = "gone"
				close(pm.exited)
				return
			}
		}
	}()
	return pm
}

// waitForOwner waits for the live process holding the lock to have a
// postmaster running, and shares it.
func (c *Cluster) waitForOwner(ctx context.Context, holder int) (*postmaster, error) {
	deadline := time.Now().Add(c.cfg.StartTimeout)
	for {
		if pid, port, ok := c.livePostmaster(); ok {
			c.port = port
			pm := c.watch(pid)
			if err := c.waitReady(ctx, pm); err != nil {
				return nil, err
			}
			return pm, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgcluster: process %d holds %s, but no PostgreSQL ran there within %s; stop that process or wait for it",
				holder, c.lockPath(), c.cfg.StartTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Owned reports whether this process owns the postmaster (started or
// adopted it): Stop stops it.
func (c *Cluster) Owned() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owned
}

// PID is the postmaster's process id.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pm == nil {
		return 0
	}
	return c.pm.pid
}

// Supervise keeps the postmaster running until ctx ends or Stop is called:
// when it dies, Supervise starts it again (or, when another live process
// owns it, waits for that process to), after Restart.Backoff, doubling after
// each failed attempt. It returns an error, and stops trying, when more than
// Restart.Max attempts were needed within Restart.Window.
func (c *Cluster) Supervise(ctx context.Context) error {
	var attempts []time.Time
	for {
		c.mu.Lock()
		pm := c.pm
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-c.stopped:
			return nil
		case <-pm.exited:
		}
		select {
		case <-c.stopped:
			return nil
		default:
		}
		c.logger.Error("the managed PostgreSQL stopped unexpectedly; restarting it", "dir", c.cfg.Dir, "pid", pm.pid, "how", pm.status, "log", c.LogFile())
		backoff := c.cfg.Restart.Backoff
		for {
			now := time.Now()
			kept := attempts[:0]
			for _, a := range attempts {
				if now.Sub(a) < c.cfg.Restart.Window {
					kept = append(kept, a)
				}
			}
			attempts = append(kept, now)
			if len(attempts) > c.cfg.Restart.Max {
				return fmt.Errorf("pgcluster: PostgreSQL in %s stopped and %d restarts within %s did not keep it running; see %s",
					c.cfg.Dir, c.cfg.Restart.Max, c.cfg.Restart.Window, c.LogFile())
			}
			select {
			case <-ctx.Done():
				return nil
			case <-c.stopped:
				return nil
			case <-time.After(backoff):
			}
			err := c.recover(ctx)
			if err == nil {
				c.logger.Warn("the managed PostgreSQL runs again", "dir", c.cfg.Dir, "pid", c.PID(), "port", c.port)
				break
			}
			if errors.Is(err, errStopped) {
				return nil
			}
			c.logger.Error("restarting the managed PostgreSQL failed", "dir", c.cfg.Dir, "err", err, "retry_in", min(2*backoff, 30*time.Second))
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

var errStopped = errors.New("pgcluster: stopped")

// recover brings the postmaster back after it died: one running now (another
// process restarted it) is watched, adopted when its owner is gone;
// otherwise this process starts it, taking ownership when it has none.
func (c *Cluster) recover(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.stopped:
		return errStopped
	default:
	}
	if !c.owned {
		lock, holder, err := c.tryLock()
		if err != nil {
			return err
		}
		if lock == nil {
			if pid, port, ok := c.livePostmaster(); ok && port == c.port {
				c.pm = c.watch(pid)
				return nil
			}
			return fmt.Errorf("process %d owns %s and has not restarted PostgreSQL yet", holder, c.cfg.Dir)
		}
		c.owned, c.lock = true, lock
	}
	if pid, port, ok := c.livePostmaster(); ok && port == c.port {
		c.pm = c.watch(pid)
		return c.waitReady(ctx, c.pm)
	}
	// The port is the one the clients' URLs name: keep it.
	return c.startPostmaster(ctx)
}

// Stop shuts the postmaster down (fast mode: open transactions are rolled
// back) and waits until it is gone, when this process owns it; a shared one
// is left alone. Nothing restarts it afterwards. Stop is idempotent.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stopped) })
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.owned || c.lock == nil {
		return nil
	}
	defer c.release()
	pm := c.pm
	if pm == nil {
		return nil
	}
	select {
	case <-pm.exited:
		return nil
	default:
	}
	if err := syscall.Kill(pm.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgcluster: stopping postgres (pid %d): %w", pm.pid, err)
	}
	if !pm.child {
		// Looked at every WatchInterval until now; look more often.
		for alive(pm.pid) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("pgcluster: postgres (pid %d) did not stop: %w", pm.pid, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}
	select {
	case <-pm.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgcluster: postgres (pid %d) did not stop: %w", pm.pid, ctx.Err())
	}
}

// release gives up ownership: the lock goes (and with it the claim).
func (c *Cluster) release() {
	if c.lock != nil {
		_ = c.lock.Close()
		c.lock = nil
	}
}

func (c *Cluster) lockPath() string { return filepath.Join(c.cfg.Dir, "nebula.lock") }

// tryLock takes the owner lock without waiting. It returns the open lock
// file, or nil and the pid of the live process holding it. The lock is
// flock(2)'s, so it ends with the process holding it, however it ends; the
// file is opened close-on-exec, so PostgreSQL never inherits it.
func (c *Cluster) tryLock() (*os.File, int, error) {
	f, err := os.OpenFile(c.lockPath(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("pgcluster: opening %s: %w", c.lockPath(), err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(c.lockPath())
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, holder, nil
		}
		return nil, 0, fmt.Errorf("pgcluster: locking %s: %w", c.lockPath(), err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, 0, nil
}

// livePostmaster reads postmaster.pid and reports the postmaster's pid and
// port when that process is alive.
func (c *Cluster) livePostmaster() (pid, port int, ok bool) {
	b, err := os.ReadFile(filepath.Join(c.pgdata(), "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	lines := strings.Split(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 || !alive(pid) {
		return 0, 0, false
	}
	if len(lines) > 3 {
		port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	if port == 0 {
		port, _ = c.lastPort()
	}
	return pid, port, true
}

// alive reports whether pid is a live postgres process: a zombie (a dead
// process nobody reaped yet, as under an init that does not reap) is not,
// nor is an unrelated process that reused the pid.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
			return false // /proc works: the process is gone
		}
		err := syscall.Kill(pid, 0)
		return err == nil || errors.Is(err, syscall.EPERM)
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || len(s) < end+3 {
		return false
	}
	state := s[end+2]
	return s[open+1:end] == "postgres" && state != 'Z' && state != 'X' && state != 'x'
}
