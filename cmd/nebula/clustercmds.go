package main

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

// clusterView is a cluster as cluster list and cluster get print it: the
// cluster, whether its agents are connected, and the agent versions its
// servers run.
type clusterView struct {
	api.Cluster
	Status   api.ClusterStatus `json:"status"`
	Versions []string          `json:"versions"`
}

// serverView is a server as server list prints it, with its state:
// Connected, Disconnected (no heartbeat for a minute, or never connected)
// or Revoked.
type serverView struct {
	api.Server
	State string `json:"state"`
}

// Server states.
const (
	serverRevoked = "Revoked"
)

// viewServers names each server's state: the API says whether its agent
// is live (the one liveness rule, applied by the control plane).
func viewServers(ss []api.Server) []serverView {
	out := make([]serverView, 0, len(ss))
	for _, s := range ss {
		st := api.StateDisconnected
		switch {
		case s.RevokedAt != nil:
			st = serverRevoked
		case s.Connected:
			st = api.StateConnected
		}
		out = append(out, serverView{Server: s, State: st})
	}
	return out
}

// versions lists the agent versions of the servers in force, each once.
func versions(ss []api.Server) []string {
	out := []string{}
	for _, s := range ss {
		if s.RevokedAt == nil && s.Version != "" && !slices.Contains(out, s.Version) {
			out = append(out, s.Version)
		}
	}
	slices.Sort(out)
	return out
}

// viewCluster reads a cluster's status and servers.
func viewCluster(ctx context.Context, cl *client.Client, org, name string) (clusterView, error) {
	c, err := cl.Cluster(ctx, org, name)
	if err != nil {
		return clusterView{}, err
	}
	ss, err := cl.Servers(ctx, org, name)
	if err != nil {
		return clusterView{}, err
	}
	return clusterView{Cluster: c.Cluster, Status: c.Status, Versions: versions(ss)}, nil
}

func clusterListCommand() *cli.Command {
	return spec{
		name: "list", usage: "list the clusters of an organisation with their state", argsUsage: shapeOrg,
		description: `Lists the clusters of an organisation: Connected when one of its servers' agents
sent a heartbeat in the last minute, else Disconnected; the last heartbeat;
how many servers it has and the agent versions they run.

Example:
   nebula cluster list acme`,
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeOrg)
			if err != nil {
				return err
			}
			var views []clusterView
			return x.read(&views, func(ctx context.Context) error {
				cs, err := cl.Clusters(ctx, a.Org)
				if err != nil {
					return err
				}
				views = []clusterView{}
				for _, c := range cs {
					v, err := viewCluster(ctx, cl, a.Org, c.Name)
					if client.IsStatus(err, 404) {
						continue // deleted meanwhile
					}
					if err != nil {
						return err
					}
					views = append(views, v)
				}
				return nil
			}, func() error {
				var rows [][]string
				for _, v := range views {
					rows = append(rows, []string{v.Name, v.Status.State, whenPtr(v.Status.LastHeartbeatAt), strconv.Itoa(v.Servers),
						cell(strings.Join(v.Versions, ",")), when(v.CreatedAt)})
				}
				x.table("NAME\tSTATE\tLAST HEARTBEAT\tSERVERS\tVERSIONS\tCREATED", rows)
				return nil
			})
		},
	}.command()
}

func clusterGetCommand() *cli.Command {
	return spec{
		name: "get", usage: "show a cluster, its state and its servers", argsUsage: shapeCluster,
		description: `Shows a cluster: Connected or Disconnected, the last heartbeat, the agents
connected and the agent versions, and (as text) its servers.

Example:
   nebula cluster get acme/eu-1
   nebula cluster get acme/eu-1 -o yaml`,
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeCluster)
			if err != nil {
				return err
			}
			var v clusterView
			return x.read(&v, func(ctx context.Context) (err error) {
				v, err = viewCluster(ctx, cl, a.Org, a.Cluster)
				return
			}, func() error {
				x.printf("Cluster %s (id %s), created %s\n", a, v.ID, when(v.CreatedAt))
				x.printf("state: %s; last heartbeat %s; %d agent(s) connected\n", v.Status.State, whenPtr(v.Status.LastHeartbeatAt), v.Status.ConnectedAgents)
				x.printf("servers: %d; agent versions: %s\n\n", v.Servers, cell(strings.Join(v.Versions, ", ")))
				ss, err := cl.Servers(x.Context.Context, a.Org, a.Cluster)
				if err != nil {
					return err
				}
				x.serverTable(viewServers(ss))
				return nil
			})
		},
	}.command()
}

func (x *cmdCtx) serverTable(ss []serverView) {
	var rows [][]string
	for _, s := range ss {
		rows = append(rows, []string{s.ID, s.Name, s.State, cell(s.Version), cell(s.Skew), lastUpgradeCell(s.LastUpgrade), whenPtr(s.LastHeartbeatAt), when(s.RegisteredAt)})
	}
	x.table("ID\tNAME\tSTATE\tVERSION\tSKEW\tLAST UPGRADE\tLAST HEARTBEAT\tREGISTERED", rows)
}

func clusterDeleteCommand() *cli.Command {
	return spec{
		name: "delete", usage: "delete a cluster that runs no environment", argsUsage: shapeCluster,
		description: `Deletes a cluster. Refused (exit code 5) while an environment runs on it: move
the environments (nebula env update --cluster) or delete them first. Asks
first on a terminal; give --yes otherwise.

Example:
   nebula cluster delete acme/eu-1 --yes`,
		destructive: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeCluster)
			if err != nil {
				return err
			}
			if err := x.confirm("Delete cluster " + a.String()); err != nil {
				return err
			}
			if err := cl.DeleteCluster(x.Context.Context, a.Org, a.Cluster); err != nil {
				return err
			}
			x.printf("Deleted cluster %s.\n", a)
			return nil
		},
	}.command()
}

// serverCommand is nebula server: the servers (agent installations) of a
// cluster.
func serverCommand() *cli.Command {
	return group("server", "list a cluster's servers (agent installations), upgrade their agents and revoke them",
		spec{
			name: "list", usage: "list the servers of a cluster with their state and agent version", argsUsage: shapeCluster,
			description: `Lists the servers of a cluster: Connected (a heartbeat in the last minute),
Disconnected or Revoked, the agent version each last reported, the last
heartbeat, and when it joined; the agent's version skew against the control
plane (Behind 1.5.0, Newer than the control plane, Version not comparable)
and its last upgrade (in_progress, succeeded, failed, rolled_back or timed_out
and the version; -o json has the message, such as "The agent rolled the
upgrade back: ..."). Revoked ones come last.

Example:
   nebula server list acme/eu-1`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeCluster)
				if err != nil {
					return err
				}
				var ss []serverView
				return x.read(&ss, func(ctx context.Context) error {
					s, err := cl.Servers(ctx, a.Org, a.Cluster)
					ss = viewServers(s)
					return err
				}, func() error {
					x.serverTable(ss)
					return nil
				})
			},
		}.command(),
		spec{
			name: "revoke", usage: "revoke a server's credential: its agent is disconnected and refused", argsUsage: shapeCluster + " SERVER_ID",
			description: `Revokes a server's credential: its agent is disconnected at once and refused
afterwards; it joins again only with a new join token. Asks first on a
terminal; give --yes otherwise.

Example:
   nebula server revoke acme/eu-1 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d --yes`,
			destructive: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeCluster)
				if err != nil {
					return err
				}
				if err := x.confirm("Revoke server " + x.args[1] + " of " + a.String()); err != nil {
					return err
				}
				if err := cl.RevokeServer(x.Context.Context, a.Org, a.Cluster, x.args[1]); err != nil {
					return err
				}
				x.printf("Revoked server %s of %s: its agent is disconnected.\n", x.args[1], a)
				return nil
			},
		}.command(),
		serverUpgradeCommand(),
	)
}

func clusterCommand() *cli.Command {
	joinToken := func(x *cmdCtx, t api.CreatedJoinToken) {
		x.printf("\nJoin token (valid until %s):\n\n    %s\n\n", at(t.ExpiresAt), t.Token)
		x.printf("It is shown only this once: keep it until the server is installed. A server joins\nthe cluster with it; revoke it with nebula cluster token revoke when no longer needed.\n")
	}
	hours := func() cli.Flag {
		return &cli.IntFlag{Name: "expires-in-hours", Usage: "the join token's life in hours (1-720; default 24)"}
	}
	return group("cluster", "create, list, show and delete clusters, and issue their join tokens",
		spec{
			name: "create", usage: "create a cluster and its first join token", argsUsage: shapeCluster,
			description: `Creates a cluster of the organisation and prints its first join token once.

Example:
   nebula cluster create acme/eu-1`,
			flags: []cli.Flag{hours()},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeCluster)
				if err != nil {
					return err
				}
				var res api.ClusterResponse
				return x.read(&res, func(ctx context.Context) (err error) {
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
		clusterListCommand(),
		clusterGetCommand(),
		clusterDeleteCommand(),
		clusterManifestCommand(hours()),
		group("token", "issue, list and revoke join tokens",
			spec{
				name: "create", usage: "issue a join token", argsUsage: shapeCluster,
				description: `Issues another join token for servers to join the cluster with; it is shown once.

Example:
   nebula cluster token create acme/eu-1 --expires-in-hours 2`,
				flags: []cli.Flag{hours()},
				json:  true, nargs: 1,
				run: func(x *cmdCtx) error {
					a, cl, err := x.addressClient(0, shapeCluster)
					if err != nil {
						return err
					}
					var t api.CreatedJoinToken
					return x.read(&t, func(ctx context.Context) (err error) {
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
					a, cl, err := x.addressClient(0, shapeCluster)
					if err != nil {
						return err
					}
					var ts []api.JoinToken
					return x.read(&ts, func(ctx context.Context) (err error) { ts, err = cl.JoinTokens(ctx, a.Org, a.Cluster); return }, func() error {
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
				description: `Revokes a join token: no server joins the cluster with it any more. Asks first
on a terminal; give --yes otherwise.

Example:
   nebula cluster token revoke acme/eu-1 3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d --yes`,
				nargs: 2, destructive: true,
				run: func(x *cmdCtx) error {
					a, cl, err := x.addressClient(0, shapeCluster)
					if err != nil {
						return err
					}
					if err := x.confirm("Revoke join token " + x.args[1] + " of " + a.String()); err != nil {
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
