package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

// domainOutcome is what domain add prints with -o json: the same shape
// whether the host is routed or the change waits in a change set.
type domainOutcome struct {
	Status    string         `json:"status"`
	Domain    *api.Domain    `json:"domain"`
	ChangeSet *api.ChangeSet `json:"changeSet"`
}

func domainCommand() *cli.Command {
	return group("domain", "route host names to services",
		spec{
			name: "add", usage: "route a host name to a service", argsUsage: shapeTarget + " HOST",
			description: `Routes a host name to a service in an environment.

Example:
   nebula domain add acme/shop/production/web shop.example.com`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeTarget)
				if err != nil {
					return err
				}
				var res client.DomainResult
				var out domainOutcome
				err = x.read(&out, func(ctx context.Context) (err error) {
					res, err = cl.AddDomain(ctx, a.Org, a.Project, a.Env, a.Service, x.args[1])
					out = domainOutcome{Status: statusDone, Domain: res.Domain, ChangeSet: res.ChangeSet}
					if res.ChangeSet != nil {
						out.Status = statusWaiting
					}
					return
				}, func() error {
					if res.ChangeSet != nil {
						x.changeSetNote(a, res.ChangeSet)
						return nil
					}
					x.printf("Routed %s to %s.\n", res.Domain.Host, a)
					return nil
				})
				if err == nil && res.ChangeSet != nil {
					return waiting(res.ChangeSet)
				}
				return err
			},
		}.command(),
		spec{
			name: "remove", usage: "stop routing a host name", argsUsage: shapeTarget + " HOST",
			description: `Stops routing a host name to a service. Asks first on a terminal; give --yes
otherwise.

Example:
   nebula domain remove acme/shop/production/web shop.example.com --yes`,
			nargs: 2, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeTarget)
				if err != nil {
					return err
				}
				if err := x.confirm("Stop routing " + x.args[1] + " to " + a.String()); err != nil {
					return err
				}
				cs, err := cl.RemoveDomain(x.Context.Context, a.Org, a.Project, a.Env, a.Service, x.args[1])
				if err != nil {
					return err
				}
				if cs != nil {
					x.changeSetNote(a, cs)
					return waiting(cs)
				}
				x.printf("Stopped routing %s to %s.\n", x.args[1], a)
				return nil
			},
		}.command(),
		spec{
			name: "list", usage: "list the domains of an environment or a service", argsUsage: shapeEnvOrTarget,
			description: `Lists the host names routed in an environment, or to one service in it.

Example:
   nebula domain list acme/shop/production`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnvOrTarget)
				if err != nil {
					return err
				}
				var ds []api.Domain
				return x.read(&ds, func(ctx context.Context) (err error) {
					ds, err = cl.Domains(ctx, a.Org, a.Project, a.Env, a.Service)
					return
				}, func() error {
					var rows [][]string
					for _, d := range ds {
						rows = append(rows, []string{d.Host, cell(d.ServiceName), when(d.CreatedAt)})
					}
					x.table("HOST\tSERVICE\tCREATED", rows)
					return nil
				})
			},
		}.command(),
	)
}
