package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/database"
)

// serverName is the name the installed control plane answers to as well;
// invoked by it, the binary offers the server's own commands.
const serverName = "nebulactrl-server"

// exitBackupFailed is pre-upgrade-backup's status when the backup failed.
const exitBackupFailed = 3

// serverCommands are what nebulactrl-server offers.
func serverCommands() []*cli.Command {
	return []*cli.Command{serveCommand(), preUpgradeBackupCommand(), backupCommand(), auditCommand(), healthcheckCommand()}
}

// serverApp turns the app into nebulactrl-server when the binary was invoked
// by that name (a link or a copy of nebula, as the installer and the image
// install it).
func serverApp(app *cli.App, argv0 string) {
	if filepath.Base(argv0) != serverName {
		return
	}
	app.Name = serverName
	app.Usage = "the NebulaCtrl control plane: serve, pre-upgrade-backup, backup restore, audit replay, healthcheck"
	app.Commands = serverCommands()
}

// localDB opens the control plane's database for a command run beside it:
// NEBULACTRL_DATABASE_URL, or the managed PostgreSQL of the data directory
// (shared with a running nebula serve, or started for the command). ok is
// false when neither is configured: there is nothing to open.
func localDB(ctx context.Context, cfg config.Config) (url string, pool *pgxpool.Pool, done func(), ok bool, err error) {
	url, stop := cfg.DatabaseURL, func() {}
	if url == "" {
		// The managed PostgreSQL's cluster (see pgcluster): none yet means
		// nothing to open.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "postgres", "pgdata", "PG_VERSION")); err != nil {
			return "", nil, nil, false, nil
		}
		u, cluster, err := database.Managed(ctx, cfg.DataDir, nil)
		if err != nil {
			return "", nil, nil, true, err
		}
		url, stop = u, func() { _ = cluster.Stop(context.WithoutCancel(ctx)) }
	}
	pool, err = database.Open(ctx, url)
	if err != nil {
		stop()
		return "", nil, nil, true, err
	}
	return url, pool, func() { pool.Close(); stop() }, true, nil
}

func preUpgradeBackupCommand() *cli.Command {
	return &cli.Command{
		Name:  "pre-upgrade-backup",
		Usage: "back the control plane's database up before an upgrade (the installer runs it)",
		Description: `Takes a control-plane backup with the trigger "Before upgrade": a pg_dump in
custom format and a manifest (version, time, trigger, database size, SHA-256)
in NEBULACTRL_BACKUP_DIR (default: NEBULACTRL_DATA_DIR/backups), both mode
0600, and records the outcome in the database. A control plane of the
--target-version that starts within 24 hours reuses this backup instead of
taking its own. The backup never holds NEBULACTRL_SECRET_KEY: keep the .env
file apart from the dumps.

Exit status: 0 backed up, or nothing configured (no database yet); 3 the
backup failed (--force: a warning, and 0).

Example:
   cd /opt/nebulactrl && docker compose exec nebulactrl nebulactrl-server pre-upgrade-backup --target-version 1.5.0`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Usage: "go on when the backup fails: print a warning and exit 0"},
			&cli.StringFlag{Name: "target-version", Usage: "the version about to be installed (default: this binary's)"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return exitError{exitUsage, fmt.Errorf("pre-upgrade-backup takes no arguments, got %q", c.Args().Slice())}
			}
			target := c.String("target-version")
			force := c.Bool("force")
			fail := func(err error) error {
				if force {
					fmt.Fprintf(c.App.ErrWriter, "warning: the pre-upgrade backup failed, going on (--force): %v\n", err)
					return nil
				}
				return exitError{exitBackupFailed, fmt.Errorf("the pre-upgrade backup failed: %w", err)}
			}
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return fail(err)
			}
			dir, err := backup.Destination(cfg)
			if err != nil {
				return fail(err)
			}
			url, pool, done, ok, err := localDB(c.Context, cfg)
			if !ok {
				fmt.Fprintln(c.App.Writer, "nothing to back up: no database is configured (no NEBULACTRL_DATABASE_URL and no managed PostgreSQL in "+cfg.DataDir+")")
				return nil
			}
			if err != nil {
				return fail(err)
			}
			defer done()
			o, err := backup.PreUpgrade(c.Context, pool, backup.Config{DatabaseURL: url, Dir: dir, Version: version}, target, force)
			if err != nil {
				// Not even an outcome (the lock, the record): a failure
				// like any other, a warning under --force.
				return fail(err)
			}
			if !o.Succeeded {
				fmt.Fprintf(c.App.ErrWriter, "warning: the pre-upgrade backup failed, going on (--force): %s\n", o.Error)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "backed up before the upgrade to %s: %s (SHA-256 %s)\n", o.TargetVersion, filepath.Join(o.Destination, o.Dump), o.SHA256)
			return nil
		},
	}
}

func backupCommand() *cli.Command {
	show := func(x *cmdCtx, bs []api.Backup) {
		rows := make([][]string, 0, len(bs))
		for _, b := range bs {
			rows = append(rows, []string{cell(b.Dump), cell(b.Time.Local().Format(time.DateTime)), cell(b.Trigger), cell(b.Version),
				strconv.FormatInt(b.DatabaseSize, 10), cell(b.SHA256)})
		}
		x.table("DUMP\tTIME\tTRIGGER\tVERSION\tDATABASE BYTES\tSHA-256", rows)
	}
	return group("backup", "control-plane backups: list and create through the API, restore beside the database",
		spec{
			name: "list", usage: "list the control-plane backups in the destination (instance administrator)",
			description: `Lists the backups in the control plane's backup destination, newest first: the
dump's file name, when and why it was taken, the version that took it, the
database's size and the dump's SHA-256.

Example:
   nebula backup list`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var bs []api.Backup
				return x.read(&bs, func(ctx context.Context) (err error) { bs, err = cl.Backups(ctx); return },
					func() error { show(x, bs); return nil })
			},
		}.command(),
		spec{
			name: "create", usage: "take a control-plane backup now (instance administrator)",
			description: `Makes the control plane take a backup with the trigger "Manual" into its
destination and prints it. The backup never holds NEBULACTRL_SECRET_KEY.

Example:
   nebula backup create`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var b api.Backup
				return x.read(&b, func(ctx context.Context) (err error) { b, err = cl.CreateBackup(ctx); return },
					func() error { show(x, []api.Backup{b}); return nil })
			},
		}.command(),
		restoreCommand(),
	)
}

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "restore a control-plane backup into an empty database (run beside the database)",
		ArgsUsage: "DUMP",
		Description: `Restores DUMP (a .dump file of the backup destination, or its .json manifest)
into the database given by --database-url, else the control plane's own
(NEBULACTRL_DATABASE_URL, or the managed PostgreSQL of the data directory).
The database must be empty: a database that holds any table is refused and
left alone. The dump is checked against its manifest's size and SHA-256 first,
and the restore runs in one transaction. On a new PostgreSQL (a new machine or
volume) the events' transaction ids are then renumbered below its own, so the
control plane reads them and projects what comes after. Start the version the
database was at with the same NEBULACTRL_SECRET_KEY (sealed values need it)
and public URL: agents reconnect with their credentials and are sent their
latest revisions. Then check that every projection matches the events:
nebula audit replay (docs/operations.md, Restoring a backup).

Example:
   nebula backup restore /var/lib/nebulactrl/backups/nebulactrl-20261201T030000Z-1.5.0.dump \
     --database-url postgres://nebulactrl@db/nebulactrl_restored`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "database-url", Usage: "the empty database to restore into (default: the control plane's)"},
		},
		Action: func(c *cli.Context) error {
			args, help, err := interspersed(c)
			if err != nil {
				return exitError{exitUsage, err}
			}
			if help {
				return cli.ShowSubcommandHelp(c)
			}
			if len(args) != 1 {
				return exitError{exitUsage, errors.New("want DUMP, the backup file to restore (see --help)")}
			}
			path := args[0]
			target := c.String("database-url")
			if target == "" {
				cfg, err := config.Load(c.String("env-file"))
				if err != nil {
					return err
				}
				url, _, done, ok, err := localDB(c.Context, cfg)
				if !ok {
					// The managed default: create it to restore into.
					url, cluster, err := database.Managed(c.Context, cfg.DataDir, nil)
					if err != nil {
						return err
					}
					defer func() { _ = cluster.Stop(context.WithoutCancel(c.Context)) }()
					target = url
				} else {
					if err != nil {
						return err
					}
					defer done()
					target = url
				}
			}
			m, err := backup.Restore(c.Context, "", path, target)
			if err != nil {
				return err
			}
			if m.Dump != "" {
				fmt.Fprintf(c.App.Writer, "restored %s (version %s, taken %s, %s)\n", m.Dump, m.Version, m.Time.Local().Format(time.DateTime), m.Trigger)
			} else {
				fmt.Fprintf(c.App.Writer, "restored %s (no manifest beside it: not checked)\n", path)
			}
			fmt.Fprintln(c.App.Writer, "Next: start the control plane with the same NEBULACTRL_SECRET_KEY, then run: nebula audit replay")
			return nil
		},
	}
}
