package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

// parkedCommands are the operator's path for events a subscription could not
// handle and parked (docs/operations.md, "Parked events"): list them, and
// handle them again once the cause is fixed.
func parkedCommands() []*cli.Command {
	return []*cli.Command{
		spec{
			name: "parked", usage: "list the events the projections or reactions could not handle and parked (instance administrator)",
			description: `Lists the events a subscription set aside because it failed on them again
and again (the event's own error), and the later events of the same stream
parked behind them so that nothing is projected on top of a missing event.
Other streams and organisations go on meanwhile; audit verify and audit replay
fail until every parked event is retried. Exits 1 when anything is parked.

Example:
   nebula audit parked
   nebula audit parked --subscription projections -o json`,
			flags: []cli.Flag{&cli.StringFlag{Name: "subscription", Usage: "only this subscription's (projections, reactions)"}},
			json:  true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var out api.ParkedEvents
				err = x.read(&out, func(ctx context.Context) (err error) {
					out, err = cl.ParkedEvents(ctx, x.String("subscription"))
					return
				}, func() error {
					if len(out.Events) == 0 {
						x.printf("nothing is parked\n")
						return nil
					}
					rows := make([][]string, 0, len(out.Events))
					for _, p := range out.Events {
						rows = append(rows, []string{p.Subscription, strconv.FormatInt(p.Position, 10), cell(p.StreamID), cell(p.Type), p.Reason,
							p.ParkedAt.UTC().Format("2006-01-02T15:04:05Z"), cell(p.Error), cell(p.LastRetryError)})
					}
					x.table("SUBSCRIPTION\tPOSITION\tSTREAM\tTYPE\tREASON\tPARKED AT\tERROR\tLAST RETRY", rows)
					x.printf("\nOnce the cause is fixed (an upgrade with the fix): nebula audit retry POSITION, or nebula audit retry --all\n")
					return nil
				})
				if err == nil && len(out.Events) > 0 {
					return exitError{code: 1, err: fmt.Errorf("%d events are parked", len(out.Events))}
				}
				return err
			},
		}.command(),
		spec{
			name: "retry", usage: "handle parked events again, each stream's in order (instance administrator)",
			argsUsage: "POSITION | --all",
			description: `Handles again, with the subscription's own code, the parked events of the
stream of the event parked at POSITION (all of that stream's, in order), or of
every parked stream with --all. Run it once the cause is fixed, for example
after an upgrade with the fix. A stream whose events fail again stays parked
with the new error (shown), and the command exits 1. Afterwards the stream is
handled as usual again.

Example:
   nebula audit retry 1234
   nebula audit retry --subscription reactions 1234
   nebula audit retry --all`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "subscription", Usage: "the subscription that parked it (needed only when several did)"},
				&cli.BoolFlag{Name: "all", Usage: "retry every parked stream"},
			},
			json: true, nargs: -1,
			run: func(x *cmdCtx) error {
				req := api.RetryParkedRequest{Subscription: x.String("subscription"), All: x.Bool("all")}
				switch {
				case req.All && len(x.args) == 0:
				case !req.All && len(x.args) == 1:
					p, err := strconv.ParseInt(x.args[0], 10, 64)
					if err != nil || p <= 0 {
						return exitError{code: 2, err: fmt.Errorf("POSITION must be a parked event's position (a positive number), not %q", x.args[0])}
					}
					req.Position = p
				default:
					return exitError{code: 2, err: errors.New("give a parked event's POSITION or --all (see nebula audit parked)")}
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var out api.RetryParkedResponse
				err = x.read(&out, func(ctx context.Context) (err error) {
					out, err = cl.RetryParked(ctx, req)
					return
				}, func() error {
					if len(out.Retried) == 0 {
						x.printf("nothing was parked\n")
					}
					for _, r := range out.Retried {
						if r.Error != "" {
							x.printf("%s %s: FAILED, still parked: %s\n", r.Subscription, r.StreamID, r.Error)
							continue
						}
						ps := make([]string, len(r.Positions))
						for i, p := range r.Positions {
							ps[i] = strconv.FormatInt(p, 10)
						}
						x.printf("%s %s: handled %d events (%s)\n", r.Subscription, r.StreamID, len(r.Positions), strings.Join(ps, ", "))
					}
					return nil
				})
				if err == nil && out.Failed {
					return exitError{code: 1, err: errors.New("some parked events failed again and stay parked")}
				}
				return err
			},
		}.command(),
	}
}
