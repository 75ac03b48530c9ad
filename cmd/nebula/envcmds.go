package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

func envCommand() *cli.Command {
	return group("env", "create, list, change and delete environments",
		spec{
			name: "create", usage: "create an environment on a cluster", argsUsage: shapeEnv,
			description: `Creates an environment of a project on a cluster of the organisation. In a
protected environment every change waits in a change set until someone else
approves it.

Example:
   nebula env create acme/shop/production --cluster eu-1 --protected`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "cluster", Usage: "the cluster the environment runs on (required)"},
				&cli.BoolFlag{Name: "protected", Usage: "changes wait for someone else's approval"},
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				if x.String("cluster") == "" {
					return exitError{exitUsage, errors.New("give the cluster the environment runs on: --cluster CLUSTER (nebula cluster list " + a.Org + ")")}
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var e api.Environment
				return x.read(&e, func(ctx context.Context) (err error) {
					e, err = cl.CreateEnvironment(ctx, a.Org, a.Project, api.CreateEnvironmentRequest{Name: a.Env, Cluster: x.String("cluster"), Protected: x.Bool("protected")})
					return
				}, func() error {
					prot := ""
					if e.Protected {
						prot = " (protected: changes wait for approval)"
					}
					x.printf("Created environment %s on cluster %s%s.\n", a, e.ClusterName, prot)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the environments of a project", argsUsage: shapeProject,
			description: `Lists the environments of a project with their clusters.

Example:
   nebula env list acme/shop`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var es []api.Environment
				return x.read(&es, func(ctx context.Context) (err error) { es, err = cl.Environments(ctx, a.Org, a.Project); return }, func() error {
					var rows [][]string
					for _, e := range es {
						rows = append(rows, []string{e.Name, cell(e.ClusterName), yesNo(e.Protected), when(e.CreatedAt)})
					}
					x.table("NAME\tCLUSTER\tPROTECTED\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "update", usage: "change an environment's cluster or protection", argsUsage: shapeEnv,
			description: `Moves an environment to another cluster of the organisation, or protects or
unprotects it. Unprotecting a protected environment, like any change to it,
waits in a change set for someone else's approval (exit code 6).

Example:
   nebula env update acme/shop/staging --protected
   nebula env update acme/shop/production --protected=false
   nebula env update acme/shop/staging --cluster eu-2`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "cluster", Usage: "the cluster to run on"},
				&cli.BoolFlag{Name: "protected", Usage: "changes wait for someone else's approval (--protected=false to lift it)"},
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				var req api.UpdateEnvironmentRequest
				if x.IsSet("cluster") {
					c := x.String("cluster")
					req.Cluster = &c
				}
				if x.IsSet("protected") {
					p := x.Bool("protected")
					req.Protected = &p
				}
				if req.Cluster == nil && req.Protected == nil {
					return usagef("nothing to change: give --cluster CLUSTER, --protected or --protected=false")
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				e, cs, err := cl.UpdateEnvironment(x.Context.Context, a.Org, a.Project, a.Env, req)
				if err != nil {
					return err
				}
				out := envUpdate{Status: statusDone, ChangeSet: cs}
				if cs == nil {
					out.Environment = &e
				} else {
					out.Status = statusWaiting
				}
				if x.machine() {
					if err := x.emit(out); err != nil {
						return err
					}
					if cs != nil {
						return exitError{exitApproval, fmt.Errorf("the change of %s waits for approval in change set %s", a, cs.ID)}
					}
					return nil
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Changing environment "+a.String(), a.Org, a.Project, cs)
				}
				prot := "not protected"
				if e.Protected {
					prot = "protected: changes wait for approval"
				}
				x.printf("Updated environment %s: cluster %s, %s.\n", a, e.ClusterName, prot)
				return nil
			},
		}.command(),
		spec{
			name: "delete", usage: "delete an environment", argsUsage: shapeEnv,
			description: `Deletes an environment; what runs for it is removed from its cluster. Asks
first on a terminal; give --yes otherwise.

Example:
   nebula env delete acme/shop/staging --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete environment " + a.String() + " and remove what runs for it"); err != nil {
					return err
				}
				cs, err := cl.DeleteEnvironment(x.Context.Context, a.Org, a.Project, a.Env)
				if err != nil {
					return err
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Deleting environment "+a.String(), a.Org, a.Project, cs)
				}
				x.printf("Deleted environment %s.\n", a)
				return nil
			},
		}.command(),
	)
}

// envUpdate is what env update prints with -o json: the same shape whether
// the change is done or waits in a change set.
type envUpdate struct {
	Status      string           `json:"status"`
	Environment *api.Environment `json:"environment"`
	ChangeSet   *api.ChangeSet   `json:"changeSet"`
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
