package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

func orgCommand() *cli.Command {
	return group("org", "create and list organisations",
		spec{
			name: "create", usage: "create an organisation you own", argsUsage: "ORG",
			description: `Creates an organisation; you become its owner.

Example:
   nebula org create acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var o api.Organisation
				return x.read(&o, func(ctx context.Context) (err error) { o, err = cl.CreateOrganisation(ctx, a.Org); return }, func() error {
					x.printf("Created organisation %s; you own it.\n", o.Name)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list your organisations",
			description: `Lists the organisations you are a member of, with your role.

Example:
   nebula org list`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var orgs []api.Organisation
				return x.read(&orgs, func(ctx context.Context) (err error) { orgs, err = cl.Organisations(ctx); return }, func() error {
					var rows [][]string
					for _, o := range orgs {
						rows = append(rows, []string{o.Name, string(o.Role), when(o.CreatedAt)})
					}
					x.table("NAME\tROLE\tCREATED", rows)
					return nil
				})
			},
		}.command(),
	)
}

func memberCommand() *cli.Command {
	return group("member", "manage the members of an organisation",
		spec{
			name: "add", usage: "add a user to an organisation with a role", argsUsage: "ORG EMAIL",
			description: `Adds an existing user, by e-mail address, with a role: owner, admin, member or
viewer (only an owner makes owners). The instance administrator creates users
with nebula user create.

Example:
   nebula member add acme grace@example.com --role admin`,
			flags: []cli.Flag{&cli.StringFlag{Name: "role", Value: "member", Usage: "owner, admin, member or viewer"}},
			json:  true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var m api.Member
				err = x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.AddMember(ctx, a.Org, x.args[1], x.String("role"))
					return
				}, func() error {
					x.printf("Added %s to %s as %s.\n", m.Email, a.Org, m.Role)
					return nil
				})
				if client.IsStatus(err, http.StatusConflict) {
					return exitError{exitConflict, fmt.Errorf("%w: change the role with nebula member set-role %s %s %s", err, a.Org, x.args[1], x.String("role"))}
				}
				return err
			},
		}.command(),
		spec{
			name: "list", usage: "list the members of an organisation", argsUsage: "ORG",
			description: `Lists the members of an organisation with their roles.

Example:
   nebula member list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var ms []api.Member
				return x.read(&ms, func(ctx context.Context) (err error) { ms, err = cl.Members(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, m := range ms {
						rows = append(rows, []string{m.Email, cell(m.Name), string(m.Role), m.UserID, when(m.Since)})
					}
					x.table("EMAIL\tNAME\tROLE\tUSER ID\tSINCE", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "set-role", usage: "change a member's role", argsUsage: "ORG USER_ID|EMAIL ROLE",
			description: `Changes the role of a member, named by user id or by e-mail address, to owner,
admin, member or viewer (only an owner makes owners).

Example:
   nebula member set-role acme grace@example.com viewer`,
			json: true, nargs: 3,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				userID, err := memberID(x, cl, a.Org, x.args[1])
				if err != nil {
					return err
				}
				var m api.Member
				return x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.ChangeMemberRole(ctx, a.Org, userID, x.args[2])
					return
				}, func() error {
					x.printf("%s is now %s of %s.\n", m.Email, m.Role, a.Org)
					return nil
				})
			},
		}.command(),
		spec{
			name: "remove", usage: "remove a member from an organisation", argsUsage: "ORG USER_ID|EMAIL",
			description: `Removes a member, named by user id or by e-mail address. Asks first on a
terminal; give --yes otherwise.

Example:
   nebula member remove acme grace@example.com --yes`,
			nargs: 2, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				who := x.args[1]
				userID, err := memberID(x, cl, a.Org, who)
				if err != nil {
					return err
				}
				if err := x.confirm("Remove " + who + " from " + a.Org); err != nil {
					return err
				}
				if err := cl.RemoveMember(x.Context.Context, a.Org, userID); err != nil {
					return err
				}
				x.printf("Removed %s from %s.\n", who, a.Org)
				return nil
			},
		}.command(),
	)
}

// memberID names a member by user id, or finds the id of an e-mail address.
func memberID(x *cmdCtx, cl *client.Client, org, who string) (string, error) {
	if !strings.Contains(who, "@") {
		return who, nil
	}
	ms, err := cl.Members(x.Context.Context, org)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if strings.EqualFold(m.Email, who) {
			return m.UserID, nil
		}
	}
	return "", exitError{exitNotFound, fmt.Errorf("%s is not a member of %s", who, org)}
}
