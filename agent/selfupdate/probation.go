package selfupdate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nebulactrl/nebulactrl/transport"
)

// Start runs at the agent's start, before it connects: it removes what an
// interrupted upgrade left, completes a rollback that was decided, counts a
// start of a new binary on probation, and rolls back (ErrRestart: exit now)
// after MaxStarts starts without staying connected.
func (u *Updater) Start() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.cfg.Clock.Now().UTC()
	u.started = now
	if u.cfg.Binary != "" {
		if stale, _ := filepath.Glob(filepath.Join(filepath.Dir(u.cfg.Binary), u.tmpPattern())); len(stale) > 0 {
			for _, f := range stale {
				_ = os.Remove(f)
			}
		}
		_ = os.Remove(u.prevTmp())
	}
	rec, err := u.read()
	if err != nil {
		// A record that cannot be read must not stop the agent: it starts
		// afresh, and says so.
		u.cfg.Logger.Warn("reading the upgrade record; starting without it", "file", u.recordPath(), "err", err)
		rec = nil
	}
	u.rec = rec
	if rec == nil {
		return nil
	}
	switch {
	case rec.State == transport.UpgradeProbation && u.cfg.Version != rec.To:
		// Killed after step 4 and before the rename: the old binary runs,
		// nothing was replaced.
		rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeFailed, "interrupted before the binary was replaced", now, 0
		return u.write(rec)
	case rec.State == transport.UpgradeRolledBack && u.cfg.Version == rec.To:
		// The rollback was decided and recorded, the rename not made yet.
		if err := u.restorePrev(); err != nil {
			u.cfg.Logger.Error("completing a rollback: the previous binary cannot be put back; running this one", "err", err)
			rec.Reason += "; the previous binary could not be put back: " + err.Error()
			return u.write(rec)
		}
		return ErrRestart
	case rec.State == transport.UpgradeProbation:
		if rec.Starts >= MaxStarts {
			return u.rollbackLocked(fmt.Sprintf("the new binary started %d times without staying connected to the control plane", rec.Starts))
		}
		rec.Starts++
		u.probation = true
		return u.write(rec)
	}
	return nil
}

// OnProbation reports whether this process is a new binary not yet kept.
func (u *Updater) OnProbation() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.probation
}

// Connected and Disconnected follow the link (its welcome and its end).
func (u *Updater) Connected() { u.setConnected(true) }

func (u *Updater) Disconnected() { u.setConnected(false) }

func (u *Updater) setConnected(c bool) {
	u.mu.Lock()
	u.connected = c
	u.gen++
	u.mu.Unlock()
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// Run keeps the probation of a new binary until ctx ends: kept after
// KeepAfter connected; rolled back (and Exit) when it is not connected
// ConnectWithin after its start, or when, connected then, it drops before
// KeepAfter. Nothing to do otherwise.
func (u *Updater) Run(ctx context.Context) {
	u.mu.Lock()
	probation, started := u.probation, u.started
	u.mu.Unlock()
	if !probation {
		return
	}
	deadline := u.cfg.Clock.After(u.cfg.ConnectWithin - u.cfg.Clock.Now().Sub(started))
	armed := -1
	var keep <-chan time.Time
	// overdue: the deadline passed while connected (connected within
	// ConnectWithin): the binary is kept after KeepAfter connected, and
	// rolled back if it drops before.
	overdue := false
	rollback := func() {
		u.mu.Lock()
		err := u.rollbackLocked(fmt.Sprintf("the new binary did not stay connected to the control plane for %s within %s of its start",
			u.cfg.KeepAfter, u.cfg.ConnectWithin))
		u.mu.Unlock()
		if err != nil && !errors.Is(err, ErrRestart) {
			u.cfg.Logger.Error("rolling back", "err", err)
			return
		}
		u.cfg.Exit("rolled back")
	}
	for {
		u.mu.Lock()
		connected, gen := u.connected, u.gen
		u.mu.Unlock()
		switch {
		case connected && armed != gen:
			if overdue && armed != -1 {
				// Dropped and reconnected since the deadline.
				rollback()
				return
			}
			keep, armed = u.cfg.Clock.After(u.cfg.KeepAfter), gen
		case !connected:
			keep, armed = nil, -1
			if overdue {
				rollback()
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-u.changed:
		case <-keep:
			u.mu.Lock()
			still := u.connected && u.gen == armed
			u.mu.Unlock()
			if !still {
				continue
			}
			u.keep()
			return
		case <-deadline:
			u.mu.Lock()
			still := u.connected
			u.mu.Unlock()
			if still {
				// Connected within ConnectWithin: not rolled back now.
				deadline, overdue = nil, true
				continue
			}
			rollback()
			return
		}
	}
}

// keep ends the probation: the new binary stays.
func (u *Updater) keep() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.probation = false
	if u.rec == nil {
		return
	}
	u.rec.State, u.rec.Reason, u.rec.At, u.rec.Starts = transport.UpgradeSucceeded, "", u.cfg.Clock.Now().UTC(), 0
	if err := u.write(u.rec); err != nil {
		u.cfg.Logger.Error("recording the upgrade as kept", "err", err)
	}
	u.cfg.Logger.Info("upgrade kept: the new binary stayed connected", "from", u.rec.From, "to", u.rec.To)
}

// rollbackLocked records the rollback and its reason first (a process
// killed right after completes it at its next start), then renames
// <binary>.prev over the binary. It returns ErrRestart when the previous
// binary is in place.
func (u *Updater) rollbackLocked(reason string) error {
	now := u.cfg.Clock.Now().UTC()
	rec := u.rec
	if rec.Refused == nil {
		rec.Refused = map[string]time.Time{}
	}
	for v, until := range rec.Refused {
		if !until.After(now) {
			delete(rec.Refused, v)
		}
	}
	rec.Refused[rec.To] = now.Add(RefuseFor)
	rec.State, rec.Reason, rec.At, rec.Starts = transport.UpgradeRolledBack, reason, now, 0
	u.probation = false
	if err := u.write(rec); err != nil {
		return fmt.Errorf("recording the rollback: %w", err)
	}
	u.cfg.Logger.Error("rolling the upgrade back", "from", rec.From, "to", rec.To, "reason", reason)
	if err := u.restorePrev(); err != nil {
		rec.Reason += "; the previous binary could not be put back: " + err.Error()
		_ = u.write(rec)
		return err
	}
	return ErrRestart
}

// restorePrev renames <binary>.prev over the binary: one atomic step.
func (u *Updater) restorePrev() error {
	if err := os.Rename(u.prev(), u.cfg.Binary); err != nil {
		return err
	}
	return syncDir(filepath.Dir(u.cfg.Binary))
}

// stop waits forever at the failpoint name, when the environment names it.
func (u *Updater) stop(name string) {
	if u.failpoint != name {
		return
	}
	fmt.Fprintf(os.Stderr, "selfupdate: stopped at failpoint %s\n", name)
	select {}
}
