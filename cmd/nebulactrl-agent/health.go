package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// healthEvery is how often the agent rewrites its health file, and
// healthMaxAge how old the health command lets it be: a process that stopped
// rewriting it for that long is stuck and is restarted.
const (
	healthEvery  = 5 * time.Second
	healthMaxAge = 30 * time.Second
)

// health is what the health file holds.
type health struct {
	Time      time.Time `json:"time"`
	Connected bool      `json:"connected"`
	Leader    bool      `json:"leader"`
}

// healthFile keeps the agent's health where its probes read it: a file on
// a pod volume, so that the probes need no port and the root filesystem
// stays read-only. A healthFile without a path does nothing.
type healthFile struct {
	path      string
	connected atomic.Bool
}

func newHealthFile(path string) *healthFile { return &healthFile{path: path} }

// write replaces the file atomically.
func (h *healthFile) write(connected, leader bool) error {
	if h.path == "" {
		return nil
	}
	b, _ := json.Marshal(health{Time: time.Now().UTC(), Connected: connected, Leader: leader})
	tmp := h.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("writing the health file: %w", err)
	}
	if err := os.Rename(tmp, h.path); err != nil {
		return fmt.Errorf("writing the health file: %w", err)
	}
	return nil
}

// keep rewrites the file until ctx ends.
func (h *healthFile) keep(ctx context.Context, leader func() bool, log *slog.Logger) {
	if h.path == "" {
		return
	}
	t := time.NewTicker(healthEvery)
	defer t.Stop()
	for {
		if err := h.write(h.connected.Load(), leader()); err != nil {
			log.Warn("keeping the health file", "err", err)
		}
		select {
		case <-ctx.Done():
			_ = os.Remove(h.path)
			return
		case <-t.C:
		}
	}
}

// checkHealth reads a health file: an error when it is missing, unreadable,
// older than maxAge, or (with connected) says the agent is not connected.
func checkHealth(path string, connected bool, maxAge time.Duration, now time.Time) (string, error) {
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		return "", fmt.Errorf("no health file: %w", err)
	}
	var h health
	if err := json.Unmarshal(b, &h); err != nil {
		return "", fmt.Errorf("the health file %s is not the agent's: %w", path, err)
	}
	if age := now.Sub(h.Time); age > maxAge {
		return "", fmt.Errorf("the agent last wrote its health %v ago (more than %v): it is stuck", age.Round(time.Second), maxAge)
	}
	if connected && !h.Connected {
		return "", errors.New("the agent is not connected to the control plane")
	}
	role := "standing by"
	if h.Leader {
		role = "leading"
	}
	state := "not connected"
	if h.Connected {
		state = "connected"
	}
	return fmt.Sprintf("healthy: %s, %s", state, role), nil
}
