package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/install"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/query"
)

// printDeploy tells what a deploy or rollback started.
func (x *cmdCtx) printDeploy(a address, res api.DeployResponse) error {
	if res.ChangeSet != nil {
		x.changeSetNote(a, res.ChangeSet)
		return nil
	}
	if res.Deployment == nil || res.Release == nil {
		return errors.New("the control plane answered without a deployment")
	}
	x.printf("Deploying %s: release %d, image %s\n", a, res.Release.Number, res.Release.Image)
	x.printf("deployment %s is %s; follow it with: nebula deployments %s\n", res.Deployment.ID, res.Deployment.Status, a)
	return nil
}

func deployCommand() *cli.Command {
	return spec{
		name: "deploy", usage: "deploy an image to a service in an environment as a new release", argsUsage: shapeTarget,
		description: `Deploys --image, or the service's own image, as a new release of the service in
the environment. The control plane pins a tag to its digest at the registry
first: an image it cannot resolve is refused and nothing is created. In a
protected environment the deployment waits in a change set for someone
else's approval.

Example:
   nebula deploy acme/shop/production/api --image ghcr.io/acme/api:1.5`,
		flags: []cli.Flag{&cli.StringFlag{Name: "image", Usage: "the image to deploy (default: the service's image)"}},
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var res api.DeployResponse
			return x.read(func(ctx context.Context) (err error) {
				res, err = cl.Deploy(ctx, a.Org, a.Project, a.Env, a.Service, x.String("image"))
				return
			}, func() error { return x.printDeploy(a, res) })
		},
	}.command()
}

func rollbackCommand() *cli.Command {
	return spec{
		name: "rollback", usage: "deploy an earlier release again", argsUsage: shapeTarget,
		description: `Deploys an earlier release of the service (its image and the configuration it
froze) again; nebula releases lists them.

Example:
   nebula rollback acme/shop/production/api --release 41`,
		flags: []cli.Flag{&cli.IntFlag{Name: "release", Usage: "the release number to deploy again (required)"}},
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			if x.Int("release") <= 0 {
				return errors.New("give the release to go back to: --release N (nebula releases " + a.String() + ")")
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var res api.DeployResponse
			return x.read(func(ctx context.Context) (err error) {
				res, err = cl.Rollback(ctx, a.Org, a.Project, a.Env, a.Service, x.Int("release"))
				return
			}, func() error { return x.printDeploy(a, res) })
		},
	}.command()
}

func releasesCommand() *cli.Command {
	return spec{
		name: "releases", usage: "list the releases of a service in an environment", argsUsage: shapeTarget,
		description: `Lists the release history, newest first; CURRENT marks the release the latest
deployment asked for.

Example:
   nebula releases acme/shop/production/api`,
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
			var rs []query.Release
			return x.read(func(ctx context.Context) (err error) {
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
	return spec{
		name: "deployments", usage: "list the deployments of a service in an environment", argsUsage: shapeTarget,
		description: `Lists deployments, newest first, and how far each got.

Example:
   nebula deployments acme/shop/production/api --limit 10`,
		flags: []cli.Flag{&cli.IntFlag{Name: "limit", Usage: "at most this many (1-500; default 50)"}},
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var ds []query.Deployment
			return x.read(func(ctx context.Context) (err error) {
				ds, err = cl.Deployments(ctx, a.Org, a.Project, a.Env, a.Service, x.Int("limit"))
				return
			}, func() error {
				var rows [][]string
				for _, d := range ds {
					rows = append(rows, []string{d.ID, strconv.Itoa(d.ReleaseNumber), d.Status, when(d.RequestedAt), cell(d.RequestedBy), cell(d.Reason)})
				}
				x.table("ID\tRELEASE\tSTATUS\tREQUESTED\tBY\tREASON", rows)
				return nil
			})
		},
	}.command()
}

func changesetCommand() *cli.Command {
	decided := func(x *cmdCtx, cs query.ChangeSet) error {
		x.printf("Change set %s is %s.\n", cs.ID, cs.Status)
		return nil
	}
	return group("changeset", "review the change sets of a protected environment",
		spec{
			name: "list", usage: "list the change sets of an environment", argsUsage: shapeEnv,
			description: `Lists the change sets of a protected environment, newest first.

Example:
   nebula changeset list acme/shop/production --status open`,
			flags: []cli.Flag{&cli.StringFlag{Name: "status", Usage: "only open, approved or rejected ones"}},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var cs []query.ChangeSet
				return x.read(func(ctx context.Context) (err error) {
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
						rows = append(rows, []string{c.ID, c.Status, cell(c.Description), person(c.OpenedBy), when(c.OpenedAt), person(c.DecidedBy)})
					}
					x.table("ID\tSTATUS\tDESCRIPTION\tOPENED BY\tOPENED\tDECIDED BY", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "approve", usage: "approve and apply a change set someone else opened", argsUsage: shapeEnv + " ID",
			description: `Approves a change set and applies its changes. Nobody approves their own.

Example:
   nebula changeset approve acme/shop/production 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var cs query.ChangeSet
				return x.read(func(ctx context.Context) (err error) {
					cs, err = cl.ApproveChangeSet(ctx, a.Org, a.Project, a.Env, x.args[1])
					return
				}, func() error { return decided(x, cs) })
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
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var cs query.ChangeSet
				return x.read(func(ctx context.Context) (err error) {
					cs, err = cl.RejectChangeSet(ctx, a.Org, a.Project, a.Env, x.args[1], x.String("reason"))
					return
				}, func() error { return decided(x, cs) })
			},
		}.command(),
	)
}

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
					return errors.New("give either --revision or --at, not both")
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
			if !x.Bool("summary") || x.Bool("json") {
				return writeJSON(x.out, raw)
			}
			x.printSummary(rev)
			return nil
		},
	}.command()
}

func (x *cmdCtx) printSummary(rev projections.Revision) {
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

func clusterCommand() *cli.Command {
	joinToken := func(x *cmdCtx, t api.CreatedJoinToken) {
		x.printf("\nJoin token (valid until %s):\n\n    %s\n\n", when(t.ExpiresAt), t.Token)
		x.printf("It is shown only this once: keep it until the server is installed. A server joins\nthe cluster with it; revoke it with nebula cluster token revoke when no longer needed.\n")
	}
	hours := func() cli.Flag {
		return &cli.IntFlag{Name: "expires-in-hours", Usage: "the join token's life in hours (1-720; default 24)"}
	}
	return group("cluster", "create and list clusters, and issue their join tokens",
		spec{
			name: "create", usage: "create a cluster and its first join token", argsUsage: shapeCluster,
			description: `Creates a cluster of the organisation and prints its first join token once.

Example:
   nebula cluster create acme/eu-1`,
			flags: []cli.Flag{hours()},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeCluster)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var res api.ClusterResponse
				return x.read(func(ctx context.Context) (err error) {
					res, err = cl.CreateCluster(ctx, a.Org, api.CreateClusterRequest{Name: a.Cluster, ExpiresInHours: x.Int("expires-in-hours")})
					return
				}, func() error {
					x.printf("Created cluster %s.\n", a)
					if res.JoinToken != nil {
						joinToken(x, *res.JoinToken)
					}
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the clusters of an organisation", argsUsage: shapeOrg,
			description: `Lists the clusters of an organisation and how many servers each has.

Example:
   nebula cluster list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeOrg)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var cs []query.Cluster
				return x.read(func(ctx context.Context) (err error) { cs, err = cl.Clusters(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, c := range cs {
						rows = append(rows, []string{c.Name, strconv.Itoa(c.Servers), when(c.CreatedAt)})
					}
					x.table("NAME\tSERVERS\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "manifest", usage: "print what installs the agent: the Kubernetes manifest, or a systemd unit with --host", argsUsage: shapeCluster,
			description: `Issues a new join token and prints the install manifest of the cluster's agent:
namespaces nebula-system and nebula-build, least-privilege RBAC, the join token Secret,
a StatefulSet of two agent replicas (leader election on a Lease) and a PodDisruptionBudget.
With --host it prints a systemd unit and its environment file instead. The output holds
the join token: treat it like a password.

Example:
   nebula cluster manifest acme/eu-1 | kubectl apply -f -
   nebula cluster manifest acme/eu-1 --host`,
			flags: []cli.Flag{hours(),
				&cli.BoolFlag{Name: "host", Usage: "print a systemd unit for an agent on a host"},
				&cli.StringFlag{Name: "image", Usage: "the agent image", Value: install.DefaultImage(version)},
				&cli.StringFlag{Name: "ca-bundle", Usage: "a PEM file of CAs the agents trust besides the system roots"},
				&cli.StringFlag{Name: "public-url", Usage: "the URL agents reach the control plane at (default: the one you use)"}},
			nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeCluster)
				if err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				opts := install.Options{ControlPlaneURL: cl.URL(), Image: x.String("image"), Cluster: a.String()}
				if u := x.String("public-url"); u != "" {
					opts.ControlPlaneURL = u
				}
				if f := x.String("ca-bundle"); f != "" {
					b, err := os.ReadFile(f)
					if err != nil {
						return fmt.Errorf("reading the CA bundle: %w", err)
					}
					opts.CABundle = string(b)
				}
				var t api.CreatedJoinToken
				return x.read(func(ctx context.Context) (err error) {
					t, err = cl.CreateJoinToken(ctx, a.Org, a.Cluster, api.JoinTokenRequest{ExpiresInHours: x.Int("expires-in-hours")})
					return
				}, func() error {
					opts.JoinToken = t.Token
					if x.Bool("host") {
						unit, env, err := install.SystemdUnit(opts)
						if err != nil {
							return err
						}
						x.printf("%s\n%s", unit, env)
						return nil
					}
					m, err := install.Manifest(opts)
					if err != nil {
						return err
					}
					x.printf("%s", m)
					return nil
				})
			},
		}.command(),
		group("token", "issue, list and revoke join tokens",
			spec{
				name: "create", usage: "issue a join token", argsUsage: shapeCluster,
				description: `Issues another join token for servers to join the cluster with; it is shown once.

Example:
   nebula cluster token create acme/eu-1 --expires-in-hours 2`,
				flags: []cli.Flag{hours()},
				json:  true, nargs: 1,
				run: func(x *cmdCtx) error {
					a, err := x.address(0, shapeCluster)
					if err != nil {
						return err
					}
					cl, err := x.client()
					if err != nil {
						return err
					}
					var t api.CreatedJoinToken
					return x.read(func(ctx context.Context) (err error) {
						t, err = cl.CreateJoinToken(ctx, a.Org, a.Cluster, api.JoinTokenRequest{ExpiresInHours: x.Int("expires-in-hours")})
						return
					}, func() error {
						x.printf("Issued join token %s for %s.\n", t.ID, a)
						joinToken(x, t)
						return nil
					})
				},
			}.command(),
			spec{
				name: "list", usage: "list a cluster's join tokens (never their secrets)", argsUsage: shapeCluster,
				description: `Lists the join tokens of a cluster, newest first.

Example:
   nebula cluster token list acme/eu-1`,
				json: true, nargs: 1,
				run: func(x *cmdCtx) error {
					a, err := x.address(0, shapeCluster)
					if err != nil {
						return err
					}
					cl, err := x.client()
					if err != nil {
						return err
					}
					var ts []query.JoinToken
					return x.read(func(ctx context.Context) (err error) { ts, err = cl.JoinTokens(ctx, a.Org, a.Cluster); return }, func() error {
						var rows [][]string
						for _, t := range ts {
							status := "valid"
							switch {
							case t.RevokedAt != nil:
								status = "revoked"
							case !t.ExpiresAt.After(timeNow()):
								status = "expired"
							}
							rows = append(rows, []string{t.ID, when(t.CreatedAt), when(t.ExpiresAt), status})
						}
						x.table("ID\tCREATED\tEXPIRES\tSTATUS", rows)
						return nil
					})
				},
			}.command(),
			spec{
				name: "revoke", usage: "revoke a join token", argsUsage: shapeCluster + " TOKEN_ID",
				description: `Revokes a join token: no server joins the cluster with it any more.

Example:
   nebula cluster token revoke acme/eu-1 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d`,
				nargs: 2,
				run: func(x *cmdCtx) error {
					a, err := x.address(0, shapeCluster)
					if err != nil {
						return err
					}
					cl, err := x.client()
					if err != nil {
						return err
					}
					if err := cl.RevokeJoinToken(x.Context.Context, a.Org, a.Cluster, x.args[1]); err != nil {
						return err
					}
					x.printf("Revoked join token %s of %s.\n", x.args[1], a)
					return nil
				},
			}.command(),
		),
	)
}
