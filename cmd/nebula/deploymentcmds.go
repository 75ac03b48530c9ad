package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

func releasesCommand() *cli.Command {
	return spec{
		name: "releases", usage: "list the releases of a service in an environment", argsUsage: shapeTarget,
		description: `Lists the release history, newest first; CURRENT marks the release the latest
deployment asked for.

Example:
   nebula releases acme/shop/production/api`,
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			var rs []api.Release
			return x.read(&rs, func(ctx context.Context) (err error) {
				rs, err = cl.Releases(ctx, a.Org, a.Project, a.Env, a.Service)
				return
			}, func() error {
				var rows [][]string
				for _, r := range rs {
					cur := ""
					if r.Current {
						cur = "*"
					}
					rows = append(rows, []string{strconv.Itoa(r.Number), cur, r.Image, cell(r.Reason), when(r.CreatedAt), cell(r.CreatedBy)})
				}
				x.table("RELEASE\tCURRENT\tIMAGE\tREASON\tCREATED\tBY", rows)
				return nil
			})
		},
	}.command()
}

func deploymentsCommand() *cli.Command {
	cmd := spec{
		name: "deployments", usage: "list the deployments of a service in an environment; watch or show one", argsUsage: shapeTarget,
		description: `Lists deployments, newest first: the stage each reached (or how it ended),
its pods ready, and what holds it up (stalled; delivery: the cluster is
disconnected). nebula deployments watch follows one as it rolls out;
nebula deployments show lists the stages of one.

Example:
   nebula deployments acme/shop/production/api --limit 10
   nebula deployments watch acme/shop/production/api`,
		flags: []cli.Flag{&cli.IntFlag{Name: "limit", Usage: "at most this many, newest first (default 50)"}},
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			var ds []api.DeploymentView
			return x.read(&ds, func(ctx context.Context) (err error) {
				ds, err = cl.Deployments(ctx, a.Org, a.Project, a.Env, a.Service, x.Int("limit"))
				return
			}, func() error {
				var rows [][]string
				for _, d := range ds {
					rows = append(rows, []string{d.ID, strconv.Itoa(d.ReleaseNumber), d.Status, pods(d.Deployment), holdUps(d),
						when(d.RequestedAt), cell(d.RequestedBy), cell(d.Reason)})
				}
				x.table("ID\tRELEASE\tSTATUS\tREADY\tHELD UP\tREQUESTED\tBY\tREASON", rows)
				if t, err := cl.Target(x.Context.Context, a.Org, a.Project, a.Env, a.Service); err == nil && t.DeploysPaused != nil {
					x.printf("\n%s\n", pausedNote(a, t.DeploysPaused))
				}
				return nil
			})
		},
	}.command()
	cmd.Subcommands = []*cli.Command{
		spec{
			name: "watch", usage: "follow a deployment until it ends", argsUsage: shapeTarget + " [DEPLOYMENT]",
			description: `Follows a deployment (the newest when DEPLOYMENT is left out) as it rolls out,
until it succeeds, fails or is superseded. On a terminal one line shows the
stage, the pods ready and the time taken, and each stage done stays as a line;
otherwise (piped) one plain line per stage. A stalled rollout and a cluster
that is disconnected (the delivery blocker) are shown when they happen. A lost
connection is made again and the watch resumes where it was. With -o json
(or --json, -o jsonl), each event is printed as one JSON line, as it comes:
{"event": "deployment"|"stage", "data": {...}}.

Example:
   nebula deployments watch acme/shop/production/api
   nebula deployments watch acme/shop/production/api 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71 --timeout 30m

` + exitCodesHelp,
			flags: []cli.Flag{timeoutFlag()},
			json:  true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 1 || len(x.args) > 2 {
					return usagef("want %s [DEPLOYMENT], got %d argument(s) (see --help)", shapeTarget, len(x.args))
				}
				if x.format() == outYAML {
					return usagef("deployments watch prints JSON lines (-o json or -o jsonl), not YAML")
				}
				a, err := x.address(0, shapeTarget)
				if err != nil {
					return err
				}
				id := client.LatestDeployment
				if len(x.args) == 2 {
					id = x.args[1]
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				return watchDeployment(x, cl, a, id, x.Duration("timeout"))
			},
		}.command(),
		spec{
			name: "show", usage: "show a deployment and the stages of its rollout", argsUsage: shapeTarget + " [DEPLOYMENT]",
			description: `Shows a deployment (the newest when DEPLOYMENT is left out): its release, how
far it got or how it ended, and every stage with its time and pods ready.

Example:
   nebula deployments show acme/shop/production/api`,
			json: true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 1 || len(x.args) > 2 {
					return usagef("want %s [DEPLOYMENT], got %d argument(s) (see --help)", shapeTarget, len(x.args))
				}
				a, err := x.address(0, shapeTarget)
				if err != nil {
					return err
				}
				id := client.LatestDeployment
				if len(x.args) == 2 {
					id = x.args[1]
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var d api.DeploymentDetail
				return x.read(&d, func(ctx context.Context) (err error) {
					d, err = cl.Deployment(ctx, a.Org, a.Project, a.Env, a.Service, id)
					return
				}, func() error {
					kind := "deployment"
					if d.Rollback {
						kind = "rollback"
					}
					x.printf("Deployment %s of %s: %s of release %d (%s)\n", d.ID, a, kind, d.ReleaseNumber, d.Image)
					x.printf("requested %s by %s; status %s", when(d.RequestedAt), cell(d.RequestedBy), d.Status)
					if d.Desired > 0 {
						x.printf(", %d/%d pods ready", d.Ready, d.Desired)
					}
					x.printf("\n")
					if h := holdUps(d.DeploymentView); h != "-" {
						x.printf("held up: %s\n", h)
					}
					if d.Reason != "" {
						x.printf("reason: %s\n", d.Reason)
					}
					if d.SupersededBy != "" {
						x.printf("superseded by deployment %s\n", d.SupersededBy)
					}
					x.printf("\n")
					var rows [][]string
					for _, s := range d.Stages {
						ready := "-"
						if s.Desired > 0 {
							ready = fmt.Sprintf("%d/%d", s.Ready, s.Desired)
						}
						rows = append(rows, []string{strconv.Itoa(s.Seq), s.Stage, when(s.At), ready, cell(s.Actor), cell(s.Detail)})
					}
					x.table("SEQ\tSTAGE\tAT\tREADY\tBY\tDETAIL", rows)
					return nil
				})
			},
		}.command(),
	}
	return cmd
}

// pods writes a deployment's pods ready of desired.
func pods(d api.Deployment) string {
	if d.Desired == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", d.Ready, d.Desired)
}

// holdUps writes what holds a deployment up: stalled, and its blockers.
func holdUps(d api.DeploymentView) string {
	var out []string
	if d.Stalled {
		out = append(out, "stalled")
	}
	out = append(out, d.Blockers...)
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// pausedNote says that a service's automatic deploys are paused.
func pausedNote(a address, p *api.DeployPause) string {
	return fmt.Sprintf("Automatic deploys of %s are paused since %s by %s: %s\nResume them with: nebula service resume-deploys %s",
		a, when(p.PausedAt), cell(p.PausedBy), cell(p.Reason), a)
}
