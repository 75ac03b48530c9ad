package database

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
)

// ManagedName is the database the embedded default uses.
const ManagedName = "nebulactrl"

// ManagedConfig says where the managed PostgreSQL lives and how it is kept.
type ManagedConfig struct {
	DataDir string
	Logger  *slog.Logger
	// Restart bounds the restarts of Cluster.Supervise (defaults: see
	// pgcluster.Restart).
	Restart pgcluster.Restart
}

// Managed starts (or finds running) the local PostgreSQL cluster of a data
// directory, the embedded default, and returns the URL of its database with
// the cluster. Its superuser password is made once and kept in the data
// directory, readable by its owner only.
//
// A postmaster left running by a process that died without stopping it (kill
// -9) is adopted: the returned cluster stops it. One that another live
// process owns (nebula serve, while an operator tool runs) is shared and left
// to that process.
func Managed(ctx context.Context, dataDir string, logger *slog.Logger) (string, *pgcluster.Cluster, error) {
	return ManagedWith(ctx, ManagedConfig{DataDir: dataDir, Logger: logger})
}

// ManagedWith is Managed with every setting.
func ManagedWith(ctx context.Context, mc ManagedConfig) (string, *pgcluster.Cluster, error) {
	dataDir, logger := mc.DataDir, mc.Logger
	dir := filepath.Join(dataDir, "postgres")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("creating data directory %s: %w", dataDir, err)
	}
	if os.Geteuid() == 0 {
		// PostgreSQL runs as an unprivileged user and must pass through the
		// data directory to its own; it may not list or read the rest.
		if err := os.Chmod(dataDir, 0o711); err != nil {
			return "", nil, fmt.Errorf("opening data directory %s to the PostgreSQL user: %w", dataDir, err)
		}
	}
	pwFile := filepath.Join(dataDir, "postgres.password")
	pw, err := os.ReadFile(pwFile)
	if errors.Is(err, os.ErrNotExist) {
		b := make([]byte, 24)
		if _, err := rand.Read(b); err != nil {
			return "", nil, err
		}
		pw = []byte(hex.EncodeToString(b))
		if err := os.WriteFile(pwFile, pw, 0o600); err != nil {
			return "", nil, fmt.Errorf("writing %s: %w", pwFile, err)
		}
	} else if err != nil {
		return "", nil, fmt.Errorf("reading %s: %w", pwFile, err)
	}
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Password: strings.TrimSpace(string(pw)), Logger: logger, Restart: mc.Restart})
	if err != nil {
		return "", nil, err
	}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		_ = c.Stop(ctx)
		return "", nil, fmt.Errorf("connecting to the managed PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, ManagedName).Scan(&exists); err != nil {
		_ = c.Stop(ctx)
		return "", nil, err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+ManagedName); err != nil {
			_ = c.Stop(ctx)
			return "", nil, fmt.Errorf("creating database %s: %w", ManagedName, err)
		}
	}
	return c.URL(ManagedName), c, nil
}
