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
// that already holds sealed values. During a rotation it also returns the
// previous key (NEBULACTRL_PREVIOUS_SECRET_KEY), which opens what it wrapped.
// A key a finished rotation retired is refused as the master key.
func masterKey(ctx context.Context, cfg config.Config, pool *pgxpool.Pool, log *slog.Logger) (key, previous seal.MasterKey, err error) {
	ids, err := seal.MasterKeyIDs(ctx, pool)
	if err != nil {
		return key, previous, err
	}
	if cfg.SecretKey == "" {
		if cfg.PreviousSecretKey != "" {
			return key, previous, fmt.Errorf("%s is set but %s is not: a rotation needs the new key in %s and the old one in %s",
				config.EnvPreviousSecretKey, config.EnvSecretKey, config.EnvSecretKey, config.EnvPreviousSecretKey)
		}
		if len(ids) > 0 {
			return key, previous, fmt.Errorf("%s is not set, and this database holds values sealed with master key %s: set %s to that key (a new key could not open them)",
				config.EnvSecretKey, strings.Join(ids, ", "), config.EnvSecretKey)
		}
		if cfg.EnvFile == "" {
			return key, previous, fmt.Errorf("%s is not set and there is no .env file to write a new one to", config.EnvSecretKey)
		}
		encoded, err := seal.GenerateMasterKey()
		if err != nil {
			return key, previous, err
		}
		if err := cfg.AppendToEnvFile(config.EnvSecretKey, encoded); err != nil {
			return key, previous, fmt.Errorf("saving a new master key: %w", err)
		}
		key, err := seal.ParseMasterKey(encoded)
		if err != nil {
			return key, previous, err
		}
		log.Warn("generated a new master key; keep a copy apart from database backups", "file", cfg.EnvFile, "key_id", key.ID())
		return key, previous, nil
	}
	if key, err = seal.ParseMasterKey(cfg.SecretKey); err != nil {
		return key, previous, fmt.Errorf("%s: %w", config.EnvSecretKey, err)
	}
	if cfg.PreviousSecretKey != "" {
		if previous, err = seal.ParseMasterKeyOf(config.EnvPreviousSecretKey, cfg.PreviousSecretKey); err != nil {
			return key, previous, fmt.Errorf("%s: %w", config.EnvPreviousSecretKey, err)
		}
		if previous.Equal(key) {
			return key, previous, fmt.Errorf("%s and %s are the same key (%s): the previous key is the one being rotated away",
				config.EnvPreviousSecretKey, config.EnvSecretKey, key.ID())
		}
	}
	retired, err := seal.RetiredMasterKeys(ctx, pool)
	if err != nil {
		return key, previous, err
	}
	for _, r := range retired {
		if r.ID == key.ID() {
			return key, previous, fmt.Errorf("%w: %s is master key %s, which a rotation replaced by %s on %s: set %s to the new key",
				seal.ErrRetiredKey, config.EnvSecretKey, key.ID(), r.ReplacedBy, r.At.UTC().Format(time.RFC3339), config.EnvSecretKey)
		}
		if !previous.IsZero() && r.ID == previous.ID() && !contains(ids, r.ID) {
			log.Info("the master key rotation is finished: no data key is wrapped by the previous key any more; remove "+config.EnvPreviousSecretKey+" and restart",
				"previous_key_id", previous.ID(), "key_id", key.ID())
		}
	}
	var unknown []string
	for _, id := range ids {
		if id != key.ID() && (previous.IsZero() || id != previous.ID()) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		log.Error("this database's sealed values were sealed with another master key: they are unreadable, and services that need them are held",
			"expected_key_ids", ids, "configured_key_id", key.ID(), "previous_key_id", previous.String(), "unreadable_key_ids", unknown)
	}
	return key, previous, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func backgroundJobs(pool *pgxpool.Pool, tel *telemetry.Store, every time.Duration) []jobs.Job {
	interval := func(d time.Duration) time.Duration {
		if every > 0 {
			return every
		}
		return d
	}
	return []jobs.Job{
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
