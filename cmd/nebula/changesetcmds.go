package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

func changesetCommand() *cli.Command {
	decided := func(x *cmdCtx, cs api.ChangeSet) error {
		x.printf("Change set %s is %s.\n", cs.ID, cs.Status)
		return nil
	}
	return group("changeset", "review the change sets of a protected environment",
		spec{
			name: "list", usage: "list the change sets of an environment", argsUsage: shapeEnv,
			description: `Lists the change sets of a protected environment, newest first.

Example:
   nebula changeset list acme/shop/production --status open`,
			flags: []cli.Flag{&cli.StringFlag{Name: "status", Usage: "only open, approved, rejected or expired ones"}},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				var cs []api.ChangeSet
				return x.read(&cs, func(ctx context.Context) (err error) {
					cs, err = cl.ChangeSets(ctx, a.Org, a.Project, a.Env, x.String("status"))
					return
				}, func() error {
					// Change sets name people by user id; show their e-mail
					// addresses where the members list has them.
					people := map[string]string{}
					if ms, err := cl.Members(x.Context.Context, a.Org); err == nil {
						for _, m := range ms {
							people[m.UserID] = m.Email
						}
					}
					person := func(id string) string {
						if e, ok := people[id]; ok {
							return e
						}
						return cell(id)
					}
					var rows [][]string
					for _, c := range cs {
						rows = append(rows, []string{c.ID, c.Status, strconv.Itoa(c.Version), cell(c.Description), person(c.OpenedBy), when(c.OpenedAt), person(c.DecidedBy)})
					}
					x.table("ID\tSTATUS\tVERSION\tDESCRIPTION\tOPENED BY\tOPENED\tDECIDED BY", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "show", usage: "show what a change set changes", argsUsage: shapeEnv + " ID",
			description: `Shows a change set: who opened it, its status and version, and what each of
its changes changes. While it is open, each change shows the value the
environment has now and the one it would have: variables set or unset (a
secret's values are masked), replicas scaled from -> to, the image deployed,
the release a rollback goes back to.

Example:
   nebula changeset show acme/shop/production 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				var cs api.ChangeSetView
				return x.read(&cs, func(ctx context.Context) (err error) {
					cs, err = cl.ChangeSet(ctx, a.Org, a.Project, a.Env, x.args[1])
					return
				}, func() error {
					x.printChangeSet(cl, a, cs)
					return nil
				})
			},
		}.command(),
		spec{
			name: "approve", usage: "approve and apply a change set someone else opened", argsUsage: shapeEnv + " ID",
			description: `Approves a change set and applies its changes. Nobody approves their own.
The approval names the version of the change set approved: the one it has
now (review it first with nebula changeset show), or --version N. When changes
joined the change set since, the approval is refused; review it again.

Example:
   nebula changeset approve acme/shop/production 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71 --version 2`,
			flags: []cli.Flag{&cli.IntFlag{Name: "version", Usage: "the version reviewed (default: the change set's present one)"}},
			json:  true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				id := x.args[1]
				version := x.Int("version")
				if !x.IsSet("version") {
					cur, err := cl.ChangeSet(x.Context.Context, a.Org, a.Project, a.Env, id)
					if err != nil {
						return err
					}
					version = cur.Version
				}
				var cs api.ChangeSet
				err = x.read(&cs, func(ctx context.Context) (err error) {
					cs, err = cl.ApproveChangeSet(ctx, a.Org, a.Project, a.Env, id, version)
					return
				}, func() error { return decided(x, cs) })
				if client.IsStatus(err, http.StatusConflict) {
					return fmt.Errorf("%w\nThe change set changed since version %d; review it again: nebula changeset show %s %s", err, version, a, id)
				}
				return err
			},
		}.command(),
		spec{
			name: "reject", usage: "reject a change set", argsUsage: shapeEnv + " ID",
			description: `Rejects a change set; its changes are dropped.

Example:
   nebula changeset reject acme/shop/production 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71 --reason "wrong image"`,
			flags: []cli.Flag{&cli.StringFlag{Name: "reason", Usage: "why, for the audit log"}},
			json:  true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				var cs api.ChangeSet
				return x.read(&cs, func(ctx context.Context) (err error) {
					cs, err = cl.RejectChangeSet(ctx, a.Org, a.Project, a.Env, x.args[1], x.String("reason"))
					return
				}, func() error { return decided(x, cs) })
			},
		}.command(),
	)
}

// printChangeSet prints a change set and its diff.
func (x *cmdCtx) printChangeSet(cl *client.Client, a address, cs api.ChangeSetView) {
	people := map[string]string{}
	if ms, err := cl.Members(x.Context.Context, a.Org); err == nil {
		for _, m := range ms {
			people[m.UserID] = m.Email
		}
	}
	person := func(id string) string {
		if e, ok := people[id]; ok {
			return e
		}
		return cell(id)
	}
	x.printf("Change set %s of %s: %s, version %d\n", cs.ID, a, cs.Status, cs.Version)
	x.printf("opened %s by %s", when(cs.OpenedAt), person(cs.OpenedBy))
	if cs.DecidedAt != nil {
		x.printf("; %s %s", cs.Status, when(*cs.DecidedAt))
		if cs.DecidedBy != "" {
			x.printf(" by %s", person(cs.DecidedBy))
		}
	}
	x.printf("\n\n")
	if len(cs.Diff) == 0 {
		x.printf("It changes nothing.\n")
	}
	for _, d := range cs.Diff {
		x.printf("  %s %s\n", diffMark(d.Kind), d.Summary)
	}
	if cs.Status == "open" {
		x.printf("\nApprove this version with:\n\n    nebula changeset approve %s %s --version %d\n", a, cs.ID, cs.Version)
	}
}

// diffMark marks a change as adding (+), removing (-) or changing (~).
func diffMark(kind string) string {
	switch kind {
	case api.DiffUnsetVariable, api.DiffRemoveDomain:
		return "-"
	case api.DiffAddDomain:
		return "+"
	}
	return "~"
}
