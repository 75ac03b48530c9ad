package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/projections"
)

// operatorDB opens the control plane's database directly, for the
// operator's tools: NEBULACTRL_DATABASE_URL, or the managed PostgreSQL of the
// data directory (started for the command if nebula serve is not running).
func operatorDB(c *cli.Context) (*pgxpool.Pool, func(), error) {
	cfg, err := config.Load(c.String("env-file"))
	if err != nil {
		return nil, nil, err
	}
	ctx := c.Context
	url, stop := cfg.DatabaseURL, func() {}
	if url == "" {
		u, cluster, err := database.Managed(ctx, cfg.DataDir, nil)
		if err != nil {
			return nil, nil, err
		}
		url, stop = u, func() { _ = cluster.Stop(context.WithoutCancel(ctx)) }
	}
	pool, err := database.Open(ctx, url)
	if err != nil {
		stop()
		return nil, nil, err
	}
	pending, err := database.Pending(ctx, pool)
	if err != nil || pending {
		pool.Close()
		stop()
		if err == nil {
			err = errors.New("the database is not migrated to this version: start nebula serve first")
		}
		return nil, nil, err
	}
	return pool, func() { pool.Close(); stop() }, nil
}

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:   "audit",
		Usage:  "read the audit log through the API, or check it on the database (replay, verify, state)",
		Flags:  auditLogFlags(),
		Action: auditLogAction,
		Subcommands: append(parkedCommands(), []*cli.Command{
			{
				Name:  "replay",
				Usage: "rebuild every projection from event 0 and compare it with the live one (works on the database)",
				Description: `Rebuilds the audit log, release history, read models and revisions from the
events into scratch tables, compares them row by row with the live tables, and
verifies the audit hash chain. Exits 1 when anything differs.

Example:
   NEBULACTRL_DATABASE_URL=postgres://... nebula audit replay`,
				Flags: outputFlags(),
				Action: func(c *cli.Context) error {
					pool, done, err := operatorDB(c)
					if err != nil {
						return err
					}
					defer done()
					rep, err := projections.Replay(c.Context, pool)
					if err != nil {
						return err
					}
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					if format != outTable {
						if err := emitTo(c.App.Writer, format, rep); err != nil {
							return err
						}
					} else {
						w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
						fmt.Fprintln(w, "PROJECTION\tTABLE\tLIVE ROWS\tREPLAYED ROWS\tRESULT")
						for _, p := range rep.Projections {
							for _, t := range p.Tables {
								result := "equal"
								if !t.Equal {
									result = "DIFFERS: " + t.FirstDifference
								}
								fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", p.Projection, t.Table, t.LiveRows, t.ReplayRows, result)
							}
						}
						w.Flush()
						fmt.Fprintf(c.App.Writer, "\n%d events replayed in %s\n", rep.Events, rep.Duration.Round(time.Millisecond))
						if !rep.Lag.Complete() {
							fmt.Fprintf(c.App.Writer, "NOT CURRENT: %s\n", rep.Lag)
						}
						printChain(c, rep.Chain)
					}
					if !rep.Equal() {
						return exitError{code: 1, err: errors.New("the live projections differ from the events")}
					}
					return nil
				},
			},
			{
				Name:  "verify",
				Usage: "verify the audit log's hash chain (works on the database)",
				Description: `Recomputes every audit row's hash and link and checks the chain's head
against the number of events projected, so an edited, inserted or deleted
row, or a deleted tail, is found; and checks that the projections have
handled every event in the store (a stuck projection is named with the
event it stopped at). Exits 1 when the chain is broken or stops short.

Example:
   nebula audit verify`,
				Flags: outputFlags(),
				Action: func(c *cli.Context) error {
					pool, done, err := operatorDB(c)
					if err != nil {
						return err
					}
					defer done()
					rep, err := projections.Verify(c.Context, pool)
					if err != nil {
						return err
					}
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					if format != outTable {
						if err := emitTo(c.App.Writer, format, rep); err != nil {
							return err
						}
					} else {
						printChain(c, rep)
					}
					if !rep.OK {
						return exitError{code: 1, err: errors.New("the audit chain is broken")}
					}
					return nil
				},
			},
			{
				Name:      "state",
				Usage:     "show the desired state an environment had at a time or revision (works on the database)",
				ArgsUsage: "ORG/PROJECT/ENV",
				Description: `Prints the desired-state document of an environment from its revision
events: the latest, revision N, or the one in force at a point in time.

Example:
   nebula audit state acme/shop/production --at 2026-11-30T12:00:00Z`,
				Flags: []cli.Flag{
					&cli.TimestampFlag{Name: "at", Layout: time.RFC3339, Usage: "the time (RFC 3339)"},
					&cli.IntFlag{Name: "revision", Usage: "the revision number"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return fmt.Errorf("want ORG/PROJECT/ENV, got %d arguments", c.NArg())
					}
					parts := strings.Split(c.Args().First(), "/")
					if len(parts) != 3 {
						return fmt.Errorf("%q is not ORG/PROJECT/ENV", c.Args().First())
					}
					pool, done, err := operatorDB(c)
					if err != nil {
						return err
					}
					defer done()
					envID, found, err := projections.EnvironmentByPath(c.Context, pool, parts[0], parts[1], parts[2])
					if err != nil {
						return err
					}
					if !found {
						return fmt.Errorf("environment %s not found", c.Args().First())
					}
					var rev api.Revision
					if at := c.Timestamp("at"); at != nil {
						rev, err = projections.StateAt(c.Context, pool, envID, *at)
					} else {
						rev, err = projections.RevisionNumber(c.Context, pool, envID, c.Int("revision"))
					}
					if err != nil {
						return err
					}
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(rev)
				},
			},
		}...),
	}
}

func printChain(c *cli.Context, r projections.ChainReport) {
	if r.OK {
		fmt.Fprintf(c.App.Writer, "audit chain: intact (%d rows, %d events)\n", r.Rows, r.Events)
		return
	}
	fmt.Fprintf(c.App.Writer, "audit chain: BROKEN: %s\n", r.Problem)
}
