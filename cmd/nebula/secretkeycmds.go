package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
)

// secretKeyCommand is nebula secret-key: the master key that wraps the data
// keys of every sealed value (docs/operations.md, "Rotating the master
// key"). Its subcommands other than generate work on the database directly,
// beside it, like backup restore and audit replay: they need the keys, which
// the API never holds out.
func secretKeyCommand() *cli.Command {
	return group("secret-key", "the master key that seals secrets: generate one, rotate to it, see which key wraps what (run beside the database)",
		secretKeyGenerateCommand(), secretKeyStatusCommand(), secretKeyRotateCommand())
}

func noArgs(c *cli.Context) error {
	if c.Args().Present() {
		return exitError{exitUsage, fmt.Errorf("nebula secret-key %s takes no arguments, got %q (see --help)", c.Command.Name, c.Args().Slice())}
	}
	return nil
}

func secretKeyGenerateCommand() *cli.Command {
	return &cli.Command{
		Name:  "generate",
		Usage: "print a new random master key (base64 of 32 bytes) and, on stderr, its id",
		Description: `Prints a new master key on stdout, as NEBULACTRL_SECRET_KEY expects it, and
its public id (mk_ and 16 hex digits, the id status and the logs show) on
stderr. It changes nothing: put the key into the configuration yourself.

Example:
   nebula secret-key generate > new-key   # key id mk_... on stderr`,
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			encoded, err := seal.GenerateMasterKey()
			if err != nil {
				return err
			}
			k, err := seal.ParseMasterKey(encoded)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, encoded)
			fmt.Fprintln(c.App.ErrWriter, "key id "+k.ID())
			return nil
		},
	}
}

// configuredKeys parses the keys of the configuration; either may be zero.
func configuredKeys(cfg config.Config) (current, previous seal.MasterKey, err error) {
	if cfg.SecretKey != "" {
		if current, err = seal.ParseMasterKey(cfg.SecretKey); err != nil {
			return current, previous, fmt.Errorf("%s: %w", config.EnvSecretKey, err)
		}
	}
	if cfg.PreviousSecretKey != "" {
		if previous, err = seal.ParseMasterKeyOf(config.EnvPreviousSecretKey, cfg.PreviousSecretKey); err != nil {
			return current, previous, fmt.Errorf("%s: %w", config.EnvPreviousSecretKey, err)
		}
	}
	return current, previous, nil
}

func secretKeyStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "how many data keys each master key wraps, and whether a rotation is finished",
		Description: `Counts the data keys (one per sealed value) by the master key that wraps
them, and names each master key's role: NEBULACTRL_SECRET_KEY,
NEBULACTRL_PREVIOUS_SECRET_KEY, retired by a rotation, or unknown to this
configuration. The last line says what to do next. It needs the database
(NEBULACTRL_DATABASE_URL, or the managed PostgreSQL of the data directory)
and reads the keys from the environment and the .env file only to name them.

Exit status: 0 nothing is left under a key other than NEBULACTRL_SECRET_KEY;
1 otherwise (a rotation to finish, or values this configuration cannot open).

Example:
   nebula secret-key status`,
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return err
			}
			current, previous, err := configuredKeys(cfg)
			if err != nil {
				return err
			}
			_, pool, done, ok, err := localDB(c.Context, cfg)
			if !ok {
				return errors.New("no database is configured (no NEBULACTRL_DATABASE_URL and no managed PostgreSQL in " + cfg.DataDir + ")")
			}
			if err != nil {
				return err
			}
			defer done()
			counts, err := seal.CountByMasterKey(c.Context, pool)
			if err != nil {
				return err
			}
			retired, err := seal.RetiredMasterKeys(c.Context, pool)
			if err != nil {
				return err
			}
			replacedBy := map[string]string{}
			for _, r := range retired {
				replacedBy[r.ID] = r.ReplacedBy + " on " + r.At.UTC().Format(time.RFC3339)
			}
			byID := map[string]int{}
			var ids []string
			for _, k := range []seal.MasterKey{current, previous} {
				if !k.IsZero() {
					ids = append(ids, k.ID())
					byID[k.ID()] = 0
				}
			}
			for _, k := range counts {
				if _, seen := byID[k.MasterKeyID]; !seen {
					ids = append(ids, k.MasterKeyID)
				}
				byID[k.MasterKeyID] = k.DataKeys
			}
			rows := make([][]string, 0, len(ids))
			var elsewhere int
			for _, id := range ids {
				role := "unknown: neither configured key"
				switch {
				case !current.IsZero() && id == current.ID():
					role = config.EnvSecretKey
				case !previous.IsZero() && id == previous.ID():
					role = config.EnvPreviousSecretKey
				}
				if r, ok := replacedBy[id]; ok {
					role += " (retired: replaced by " + r + ")"
				}
				if current.IsZero() || id != current.ID() {
					elsewhere += byID[id]
				}
				rows = append(rows, []string{id, strconv.Itoa(byID[id]), role})
			}
			x := &cmdCtx{Context: c, out: c.App.Writer}
			x.table("MASTER KEY\tDATA KEYS\tROLE", rows)
			w := c.App.Writer
			switch {
			case current.IsZero():
				fmt.Fprintf(w, "%s is not set: set it to see whether a rotation is finished\n", config.EnvSecretKey)
				return exitError{1, errors.New("no master key configured")}
			case elsewhere == 0 && !previous.IsZero():
				fmt.Fprintf(w, "rotation finished: every data key is wrapped by %s; remove %s from every replica and restart them\n",
					current.ID(), config.EnvPreviousSecretKey)
			case elsewhere == 0:
				fmt.Fprintf(w, "every data key is wrapped by %s (%s)\n", current.ID(), config.EnvSecretKey)
			case !previous.IsZero() && byID[previous.ID()] == elsewhere:
				fmt.Fprintf(w, "rotation unfinished: %d data keys are still wrapped by %s; run nebula secret-key rotate (keep %s until it says finished)\n",
					elsewhere, previous.ID(), config.EnvPreviousSecretKey)
				return exitError{1, fmt.Errorf("%d data keys are not wrapped by %s yet", elsewhere, current.ID())}
			default:
				fmt.Fprintf(w, "%d data keys are wrapped by a master key this configuration does not hold: the control plane cannot open their values\n", elsewhere)
				return exitError{1, fmt.Errorf("%d data keys are not wrapped by %s", elsewhere, current.ID())}
			}
			return nil
		},
	}
}

func secretKeyRotateCommand() *cli.Command {
	return &cli.Command{
		Name:  "rotate",
		Usage: "re-wrap every data key wrapped by NEBULACTRL_PREVIOUS_SECRET_KEY with NEBULACTRL_SECRET_KEY",
		Description: `Re-wraps, in batches of --batch-size, each in its own transaction, every data
key wrapped by the old master key (NEBULACTRL_PREVIOUS_SECRET_KEY) with the
new one (NEBULACTRL_SECRET_KEY). Sealed values and events stay as they are.
Run it beside the database while the control plane serves: every replica
must already run with both keys, so that each opens a value whichever key
wraps its data key at that moment.

It is idempotent and resumable: a run interrupted or killed in the middle
loses nothing (its open batch rolls back), and running it again re-wraps
what is left. When nothing is left under the old key it records that key as
retired: a control plane whose NEBULACTRL_SECRET_KEY is a retired key refuses
to start, and no rotation takes it as a new key again. Then remove
NEBULACTRL_PREVIOUS_SECRET_KEY from every replica and restart them.

A data key the old key cannot unwrap stops the rotation at its batch, naming
it (nothing of that batch is written). An old key that wraps nothing while
the database holds keys of a third master key is refused as mistyped.

Exit status: 0 rotated (or nothing left to rotate); 1 otherwise.

Example:
   NEBULACTRL_PREVIOUS_SECRET_KEY=<old key> NEBULACTRL_SECRET_KEY=<new key> nebula secret-key rotate`,
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "batch-size", Value: seal.DefaultRotateBatch, Usage: "data keys re-wrapped per transaction"},
			&cli.DurationFlag{Name: "pause", Usage: "wait this long between batches, to spare a busy database (such as 100ms)"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if c.Int("batch-size") < 1 {
				return exitError{exitUsage, fmt.Errorf("--batch-size %d: want at least 1", c.Int("batch-size"))}
			}
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return err
			}
			current, previous, err := configuredKeys(cfg)
			if err != nil {
				return err
			}
			if current.IsZero() || previous.IsZero() {
				return fmt.Errorf("a rotation needs the new master key in %s and the old one in %s (see nebula secret-key rotate --help)",
					config.EnvSecretKey, config.EnvPreviousSecretKey)
			}
			_, pool, done, ok, err := localDB(c.Context, cfg)
			if !ok {
				return errors.New("no database is configured (no NEBULACTRL_DATABASE_URL and no managed PostgreSQL in " + cfg.DataDir + ")")
			}
			if err != nil {
				return err
			}
			defer done()
			fmt.Fprintf(c.App.Writer, "rotating from %s (%s) to %s (%s)\n", previous.ID(), config.EnvPreviousSecretKey, current.ID(), config.EnvSecretKey)
			n, err := seal.RotateBatches(c.Context, pool, previous, current, seal.RotateOptions{
				BatchSize: c.Int("batch-size"), Pause: c.Duration("pause"),
				Progress: func(n int) { fmt.Fprintf(c.App.Writer, "re-wrapped %d data keys\n", n) },
			})
			if err != nil {
				return fmt.Errorf("%w (%d data keys re-wrapped before; run nebula secret-key rotate again to go on)", err, n)
			}
			fmt.Fprintf(c.App.Writer, "rotation finished: %d data keys re-wrapped by this run, none is left under %s, which is retired.\n", n, previous.ID())
			fmt.Fprintf(c.App.Writer, "Next: remove %s from every replica and restart them.\n", config.EnvPreviousSecretKey)
			return nil
		},
	}
}
