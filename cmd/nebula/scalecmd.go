package main

import (
	"context"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
)

// scaleOutcome is what service scale prints with -o json: the same shape
// whether the change ran at once or waits for approval.
type scaleOutcome struct {
	Status    string                `json:"status"`
	Replicas  []api.ProcessReplicas `json:"replicas"`
	ChangeSet *api.ChangeSet        `json:"changeSet"`
}

// parseScale reads "N" or "PROCESS=N".
func parseScale(arg string) (process string, n int, err error) {
	count := arg
	if i := strings.IndexByte(arg, '='); i >= 0 {
		process, count = arg[:i], arg[i+1:]
		if process == "" {
			return "", 0, usagef("%q: give PROCESS=N or N", arg)
		}
	}
	n, err = strconv.Atoi(count)
	if err != nil || n < 0 || n > 1000 {
		return "", 0, usagef("%q: the replica count must be a whole number from 0 to 1000", arg)
	}
	return process, n, nil
}

func serviceScaleSpec() spec {
	return spec{
		name: "scale", usage: "set how many copies of a service's process run in an environment", argsUsage: shapeTarget + " [PROCESS=]N",
		description: `Sets the replica count of one process of a service in one environment, or,
without N, lists the counts. A service with one process takes N alone. Like
every change it makes a new release of what runs and deploys it; in a
protected environment it waits in a change set (exit code 6).

Example:
   nebula service scale acme/shop/production/api 3
   nebula service scale acme/shop/production/api worker=2
   nebula service scale acme/shop/production/api`,
		json: true, nargs: -1,
		run: func(x *cmdCtx) error {
			if len(x.args) < 1 || len(x.args) > 2 {
				return usagef("give %s and, to change it, [PROCESS=]N", shapeTarget)
			}
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			var process string
			n := -1
			if len(x.args) == 2 {
				if process, n, err = parseScale(x.args[1]); err != nil {
					return err
				}
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			table := func(rs []api.ProcessReplicas) {
				var rows [][]string
				for _, r := range rs {
					src := "service default"
					if r.Scaled {
						src = "set for " + a.Env
					}
					rows = append(rows, []string{r.Process, strconv.Itoa(r.Replicas), src})
				}
				x.table("PROCESS\tREPLICAS\tFROM", rows)
			}
			if n < 0 {
				var rs []api.ProcessReplicas
				return x.read(&rs, func(ctx context.Context) (err error) {
					rs, err = cl.Replicas(ctx, a.Org, a.Project, a.Env, a.Service)
					return
				}, func() error { table(rs); return nil })
			}
			var out scaleOutcome
			err = x.read(&out, func(ctx context.Context) error {
				rs, cs, err := cl.Scale(ctx, a.Org, a.Project, a.Env, a.Service, process, n)
				out = scaleOutcome{Status: statusDone, Replicas: rs, ChangeSet: cs}
				if cs != nil {
					out.Status = statusWaiting
					out.Replicas = []api.ProcessReplicas{}
				}
				return err
			}, func() error {
				if out.ChangeSet != nil {
					x.changeSetNote(a, out.ChangeSet)
					return nil
				}
				x.printf("Scaled %s: a new release with the new count is deployed.\n", a)
				table(out.Replicas)
				return nil
			})
			if err == nil && out.ChangeSet != nil {
				return waiting(out.ChangeSet)
			}
			return err
		},
	}
}
