package main

import (
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

func stateCommand() *cli.Command {
	return spec{
		name: "state", usage: "show the desired state of an environment", argsUsage: shapeEnv,
		description: `Prints the desired-state document the control plane compiled for the
environment, as indented JSON: the latest revision, revision N, or the one in
force at a time. Secrets in it stay sealed. With --summary, a table of the
services: release, image and, for a held service, why it is held.

Example:
   nebula state acme/shop/production --summary
   nebula state acme/shop/production --at 2026-11-30T12:00:00Z`,
		flags: []cli.Flag{
			&cli.IntFlag{Name: "revision", Usage: "revision number N"},
			&cli.StringFlag{Name: "at", Usage: "the revision in force at this time (RFC 3339, a date, or a duration back from now such as 2h)"},
			&cli.BoolFlag{Name: "summary", Usage: "print a table of the services instead of the document"},
		},
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeEnv)
			if err != nil {
				return err
			}
			var q client.StateQuery
			q.Revision = x.Int("revision")
			if x.String("at") != "" {
				if q.Revision != 0 {
					return usagef("give either --revision or --at, not both")
				}
				if q.At, err = parseWhen(x.String("at"), timeNow()); err != nil {
					return err
				}
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var raw []byte
			rev, err := cl.State(client.CaptureBody(x.Context.Context, &raw), a.Org, a.Project, a.Env, q)
			if err != nil {
				return err
			}
			if !x.Bool("summary") || x.machine() {
				return x.emitRaw(raw)
			}
			x.printSummary(rev)
			return nil
		},
	}.command()
}

func (x *cmdCtx) printSummary(rev api.Revision) {
	d := rev.Document
	x.printf("%s/%s/%s revision %d (compiled %s, hash %s)\n\n", d.Environment.Org, d.Environment.Project, d.Environment.Name,
		rev.Number, when(rev.CompiledAt), rev.Hash)
	var rows [][]string
	for _, s := range d.Services {
		release, image := "-", "-"
		if s.Release != nil {
			release, image = strconv.Itoa(s.Release.Number), s.Release.Image
		}
		held := "-"
		if s.Held {
			held = cell(s.HeldReason)
		}
		rows = append(rows, []string{s.Name, release, image, held})
	}
	x.table("SERVICE\tRELEASE\tIMAGE\tHELD", rows)
}
