// Package jobs runs the control plane's background jobs exactly once across
// replicas: the replica that holds a PostgreSQL advisory lock on a dedicated
// connection is the leader and runs every job; the others wait to take over
// when it stops or its connection dies.
package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// leaderLock is the advisory lock key of job leadership.
const leaderLock int64 = 0x6e6562756c61 // "nebula"

// Job is a periodic background job.
type Job struct {
	Name     string
	Interval time.Duration
	Run      func(ctx context.Context) error
}

// Config configures the scheduler.
type Config struct {
	Pool    *pgxpool.Pool
	Replica string
	Logger  *slog.Logger
	Jobs    []Job
	// Retry is how often a follower tries to become the leader (default 2 s).
	Retry time.Duration
	Now   func() time.Time
}

// Validate joins every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("jobs: no database"))
	}
	if c.Replica == "" {
		errs = append(errs, errors.New("jobs: no replica name"))
	}
	for _, j := range c.Jobs {
		if j.Name == "" || j.Interval <= 0 || j.Run == nil {
			errs = append(errs, fmt.Errorf("jobs: job %q needs a name, an interval and a function", j.Name))
		}
	}
	return errors.Join(errs...)
}

// Scheduler runs jobs while this replica leads.
type Scheduler struct {
	cfg Config
}

// New returns a scheduler.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Retry == 0 {
		cfg.Retry = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Scheduler{cfg: cfg}, nil
}

// Run competes for leadership and runs the jobs while leading, until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		led, err := s.lead(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.cfg.Logger.Warn("job leadership lost", "err", err)
		}
		if !led && !sleep(ctx, s.cfg.Retry) {
			return nil
		}
	}
	return nil
}

// lead takes the leader lock if it is free and runs the jobs while the
// connection holding it lives. It reports whether it led.
func (s *Scheduler) lead(ctx context.Context) (bool, error) {
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// The lock lives as long as this session: keep the connection out of
	// the pool and close it when done, which releases the lock.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	var got bool
	if err := pc.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, leaderLock).Scan(&got); err != nil || !got {
		return false, err
	}
	s.cfg.Logger.Info("leading background jobs", "replica", s.cfg.Replica)
	next := make([]time.Time, len(s.cfg.Jobs))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		now := s.cfg.Now()
		for i, j := range s.cfg.Jobs {
			if now.Before(next[i]) {
				continue
			}
			next[i] = now.Add(j.Interval)
			s.runOne(ctx, j)
		}
		select {
		case <-ctx.Done():
			return true, nil
		case <-tick.C:
		}
		// A dead connection means the lock is gone: another replica may lead now.
		if err := pc.Ping(ctx); err != nil {
			return true, fmt.Errorf("leader connection: %w", err)
		}
	}
}

func (s *Scheduler) runOne(ctx context.Context, j Job) {
	err := j.Run(ctx)
	msg := ""
	if err != nil {
		msg = err.Error()
		s.cfg.Logger.Error("background job failed", "job", j.Name, "err", err)
	}
	if _, err := s.cfg.Pool.Exec(ctx, `INSERT INTO job_runs (job, ran_at, replica, error) VALUES ($1, $2, $3, $4)`,
		j.Name, s.cfg.Now(), s.cfg.Replica, msg); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("recording a job run", "job", j.Name, "err", err)
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
