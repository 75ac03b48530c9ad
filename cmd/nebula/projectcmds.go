package main

import (
	"context"
	"fmt"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

func projectCommand() *cli.Command {
	return group("project", "create, list and delete projects; their push webhook and its deliveries",
		spec{
			name: "create", usage: "create a project", argsUsage: shapeProject,
			description: `Creates a project in an organisation.

Example:
   nebula project create acme/shop`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var p api.Project
				return x.read(&p, func(ctx context.Context) (err error) { p, err = cl.CreateProject(ctx, a.Org, a.Project); return }, func() error {
					x.printf("Created project %s/%s.\n", a.Org, p.Name)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the projects of an organisation", argsUsage: shapeOrg,
			description: `Lists the projects of an organisation.

Example:
   nebula project list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var ps []api.Project
				return x.read(&ps, func(ctx context.Context) (err error) { ps, err = cl.Projects(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, p := range ps {
						rows = append(rows, []string{p.Name, when(p.CreatedAt)})
					}
					x.table("NAME\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "delete", usage: "delete a project with its environments and services", argsUsage: shapeProject,
			description: `Deletes a project, its environments and its services. Asks first on a
terminal; give --yes otherwise.

Example:
   nebula project delete acme/shop --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete project " + a.String() + " with its environments and services"); err != nil {
					return err
				}
				cs, err := cl.DeleteProject(x.Context.Context, a.Org, a.Project)
				if err != nil {
					return err
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Deleting project "+a.String(), a.Org, a.Project, cs)
				}
				x.printf("Deleted project %s.\n", a)
				return nil
			},
		}.command(),
		webhookSpecs()[0],
		webhookSpecs()[1],
	)
}

// Statuses of a change that may wait in a change set (the JSON's "status").
const (
	statusDone    = "done"
	statusWaiting = "waiting-for-approval"
)

// waiting is the error of a change that waits in a change set: exit code 6.
func waiting(cs *api.ChangeSet) error {
	return exitError{exitApproval, fmt.Errorf("the change waits for approval in change set %s (version %d)", cs.ID, cs.Version)}
}

// changeSetNote tells that a change waits in a change set.
func (x *cmdCtx) changeSetNote(a address, cs *api.ChangeSet) {
	env := address{Org: a.Org, Project: a.Project, Env: a.Env}
	x.printf("%s is protected: the change waits in change set %s (version %d) for someone else's review and approval:\n\n    nebula changeset show %s %s\n    nebula changeset approve %s %s --version %d\n",
		env, cs.ID, cs.Version, env, cs.ID, env, cs.ID, cs.Version)
}
