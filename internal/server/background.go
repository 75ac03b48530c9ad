package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/apistate"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/jobs"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
)

// replicaName names this process among the replicas: stable across restarts
// of one replica (its watermill consumer group), distinct between replicas.
func replicaName(addr string) string {
	host, _ := os.Hostname()
	return host + "/" + addr
}

// masterKey returns the master key: the configured one, or a new one written
// to the .env file on a first start. It never makes a new key for a database
// that already holds sealed values.
func masterKey(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log *slog.Logger) (seal.MasterKey, error) {
	ids, err := seal.MasterKeyIDs(ctx, pool)
	if err != nil {
		return seal.MasterKey{}, err
	}
	if cfg.SecretKey == "" {
		if len(ids) > 0 {
			return seal.MasterKey{}, fmt.Errorf("%s is not set, and this database holds values sealed with master key %s: set %s to that key (a new key could not open them)",
				config.EnvSecretKey, strings.Join(ids, ", "), config.EnvSecretKey)
		}
		if cfg.EnvFile == "" {
			return seal.MasterKey{}, fmt.Errorf("%s is not set and there is no .env file to write a new one to", config.EnvSecretKey)
		}
		encoded, err := seal.GenerateMasterKey()
		if err != nil {
			return seal.MasterKey{}, err
		}
		if err := cfg.AppendToEnvFile(config.EnvSecretKey, encoded); err != nil {
			return seal.MasterKey{}, fmt.Errorf("saving a new master key: %w", err)
		}
		key, err := seal.ParseMasterKey(encoded)
		if err != nil {
			return seal.MasterKey{}, err
		}
		log.Warn("generated a new master key; keep a copy apart from database backups", "file", cfg.EnvFile, "key_id", key.ID())
		return key, nil
	}
	key, err := seal.ParseMasterKey(cfg.SecretKey)
	if err != nil {
		return seal.MasterKey{}, fmt.Errorf("%s: %w", config.EnvSecretKey, err)
	}
	if len(ids) > 0 && !contains(ids, key.ID()) {
		log.Error("this database's sealed values were sealed with another master key: they are unreadable, and services that need them are held",
			"expected_key_ids", ids, "configured_key_id", key.ID())
	}
	return key, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func backgroundJobs(store *eventstore.Store, pool *pgxpool.Pool, tel *telemetry.Store, every time.Duration) []jobs.Job {
	interval := func(d time.Duration) time.Duration {
		if every > 0 {
			return every
		}
		return d
	}
	return []jobs.Job{
		{Name: "prune-outbox", Interval: interval(10 * time.Minute), Run: func(ctx context.Context) error {
			_, err := store.PruneOutbox(ctx, time.Hour)
			return err
		}},
		// A kept response goes with its data key: nothing can open it after.
		{Name: "prune-idempotency-keys", Interval: interval(time.Hour), Run: func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				keys, err := apistate.PruneIdempotencyKeys(ctx, tx)
				if err != nil {
					return err
				}
				return seal.DeleteDataKeys(ctx, tx, keys)
			})
		}},
		{Name: "prune-login-attempts", Interval: interval(time.Hour), Run: func(ctx context.Context) error {
			return apistate.PruneLoginAttempts(ctx, pool)
		}},
		{Name: "prune-job-runs", Interval: interval(24 * time.Hour), Run: func(ctx context.Context) error { return jobs.PruneRuns(ctx, pool) }},
		// Logs older than 7 days go with their daily partition.
		{Name: "rotate-log-partitions", Interval: interval(time.Hour), Run: func(ctx context.Context) error {
			if err := tel.EnsurePartitions(ctx); err != nil {
				return err
			}
			_, err := tel.DropExpired(ctx)
			return err
		}},
	}
}
