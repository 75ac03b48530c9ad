package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Restore restores the dump at path (a .dump, or its .json manifest) into the
// empty database at targetURL. It refuses a database that holds any table,
// checks the dump against its manifest when one lies beside it, and restores
// in one transaction: a failure leaves the target empty. binDir may be empty.
func Restore(ctx context.Context, binDir, path, targetURL string) (Manifest, error) {
	dump, manifestPath := path, strings.TrimSuffix(path, ".dump")+".json"
	if strings.HasSuffix(path, ".json") {
		dump, manifestPath = strings.TrimSuffix(path, ".json")+".dump", path
	}
	var m Manifest
	if b, err := os.ReadFile(manifestPath); err == nil {
		if err := json.Unmarshal(b, &m); err != nil {
			return m, fmt.Errorf("reading %s: %w", manifestPath, err)
		}
		if m.Dump != filepath.Base(dump) {
			return m, fmt.Errorf("%s describes %s, not %s", manifestPath, m.Dump, filepath.Base(dump))
		}
		if err := Verify(filepath.Dir(dump), m); err != nil {
			return m, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return m, fmt.Errorf("reading %s: %w", manifestPath, err)
	}
	if _, err := os.Stat(dump); err != nil {
		return m, fmt.Errorf("opening the dump: %w", err)
	}
	if err := checkEmpty(ctx, targetURL); err != nil {
		return m, err
	}
	if binDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return m, err
		}
		binDir = d
	}
	cmd, err := pgCommand(ctx, binDir, "pg_restore", targetURL,
		"--no-password", "--exit-on-error", "--single-transaction", "--no-owner", "--no-privileges", dump)
	if err != nil {
		return m, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitWriter{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return m, fmt.Errorf("pg_restore: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := renumber(ctx, targetURL); err != nil {
		return m, fmt.Errorf("%w (the target holds the restored tables but cannot serve: drop it, create it empty and restore again)", err)
	}
	return m, nil
}

// renumber makes the restored events' transaction ids valid on the target's
// PostgreSQL (eventstore.RenumberRestored): a dump restored on a new
// PostgreSQL keeps the ids of the old one, far ahead of the new one's.
func renumber(ctx context.Context, targetURL string) error {
	conn, err := pgx.Connect(ctx, targetURL)
	if err != nil {
		return fmt.Errorf("connecting to the target database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = eventstore.RenumberRestored(ctx, conn)
	return err
}

// checkEmpty refuses a database holding tables, views, sequences or types of
// its own.
func checkEmpty(ctx context.Context, targetURL string) error {
	conn, err := pgx.Connect(ctx, targetURL)
	if err != nil {
		return fmt.Errorf("connecting to the target database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_toast%'
		AND n.nspname NOT LIKE 'pg\_temp%' AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')`).Scan(&n)
	if err != nil {
		return fmt.Errorf("inspecting the target database: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w (it holds %d relations)", ErrNotEmpty, n)
	}
	return nil
}
