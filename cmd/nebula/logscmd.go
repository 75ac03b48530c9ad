package main

import (
	"encoding/json"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
)

func logsCommand() *cli.Command {
	return spec{
		name: "logs", usage: "show a service's container logs (kept 7 days)", argsUsage: shapeTarget,
		description: `Prints the latest lines of a service's containers in an environment, as its
cluster's agent streams them; --follow keeps printing new lines until interrupted.

Example:
   nebula logs acme/shop/production/api --follow`,
		flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new lines"},
			&cli.IntFlag{Name: "lines", Value: 100, Usage: "how many of the latest lines to start with (1-5000)"},
		},
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var cursor int64
			print := func(p api.LogPage) {
				for _, l := range p.Lines {
					if x.Bool("json") {
						b, _ := json.Marshal(l)
						x.printf("%s\n", b)
						continue
					}
					x.printf("%s %s %s\n", l.Time.Local().Format("2006-01-02 15:04:05"), l.Pod, l.Text)
				}
				cursor = p.NextCursor
			}
			ctx := x.Context.Context
			page, err := cl.Logs(ctx, a.Org, a.Project, a.Env, a.Service, 0, x.Int("lines"))
			if err != nil {
				return err
			}
			print(page)
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
				print(page)
			}
			return nil
		},
	}.command()
}
