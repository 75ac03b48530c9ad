package main

import (
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

func logsCommand() *cli.Command {
	return spec{
		name: "logs", usage: "show a service's container logs (kept 7 days)", argsUsage: shapeTarget,
		description: `Prints the latest lines of a service's containers in an environment, as its
cluster's agent streams them, each with its time (RFC 3339) and pod; --follow
keeps printing new lines until interrupted. With -o json or -o yaml the lines
are one array; with -o jsonl, and with --follow and -o json, each line is one
line of JSON as it comes.

Example:
   nebula logs acme/shop/production/api --follow
   nebula logs acme/shop/production/api --lines 500 -o json`,
		flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines"},
			&cli.IntFlag{Name: "lines", Value: 100, Usage: "how many of the latest lines to start with (1-5000)"},
		},
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			format, follow := x.format(), x.Bool("follow")
			if follow && format == outYAML {
				return usagef("--follow prints JSON lines (-o json or -o jsonl), not YAML")
			}
			lines := format == outJSONL || (follow && format == outJSON)
			var cursor string
			print := func(p api.LogPage) error {
				cursor = p.Next
				if lines {
					return emitTo(x.out, outJSONL, p.Items)
				}
				for _, l := range p.Items {
					x.printf("%s %s %s\n", l.Time.Local().Format(time.RFC3339), l.Pod, l.Text)
				}
				return nil
			}
			ctx := x.Context.Context
			page, err := cl.Logs(ctx, a.Org, a.Project, a.Env, a.Service, "", x.Int("lines"))
			if err != nil {
				return err
			}
			if format != outTable && !lines {
				return x.emit(page.Items)
			}
			if err := print(page); err != nil {
				return err
			}
			for x.Bool("follow") {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
				page, err := cl.Logs(ctx, a.Org, a.Project, a.Env, a.Service, cursor, 5000)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				if err := print(page); err != nil {
					return err
				}
			}
			return nil
		},
	}.command()
}
