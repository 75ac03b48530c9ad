package selfupdate

import (
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"time"
)

// Record is upgrade.json: the last upgrade, and the versions refused.
type Record struct {
	ID   string `json:"id,omitempty"`
	From string `json:"from"`
	To   string `json:"to"`
	// State is one of transport.Upgrade*.
	State  string    `json:"state"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Starts counts the new binary's starts while on probation.
	Starts int `json:"starts,omitempty"`
	// Refused maps a rolled-back version to when it may be installed again
	// without force.
	Refused map[string]time.Time `json:"refused,omitempty"`
}

func (u *Updater) read() (*Record, error) {
	b, err := os.ReadFile(u.recordPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// write replaces upgrade.json atomically (a temporary file, synced, renamed).
func (u *Updater) write(r *Record) error {
	u.rec = r
	if err := os.MkdirAll(u.cfg.StateDir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := u.recordPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, u.recordPath()); err != nil {
		return err
	}
	return syncDir(u.cfg.StateDir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

func (u *Updater) recordOrNew() *Record {
	if u.rec == nil {
		u.rec = &Record{}
	}
	return u.rec
}
