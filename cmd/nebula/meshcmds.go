package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
)

// meshCommand is nebula mesh: the organisation's WireGuard mesh.
func meshCommand() *cli.Command {
	return group("mesh", "show the organisation's WireGuard mesh, rotate its nodes' keys, set its range",
		spec{
			name: "show", usage: "show every node of the mesh: address, key, endpoint, handshakes, reachable or why not", argsUsage: shapeOrg,
			description: `Shows the organisation's mesh: its range, and per node its mesh address, the
fingerprint of its public key, the endpoint its peers use, its latest
handshake with any peer, and whether it is reachable (a handshake in the last
3 minutes) or why not. Clusters whose pod or service ranges overlap another's
are meshed by node address only; the reason and the K3s flags that fix it
are printed below.

Example:
   nebula mesh show acme
   nebula mesh show acme -o json`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var m api.Mesh
				return x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.Mesh(ctx, a.Org)
					return
				}, func() error {
					x.printf("Mesh of %s: %s, %d node(s)\n\n", a.Org, m.Network, len(m.Nodes))
					var rows [][]string
					for _, n := range m.Nodes {
						var latest *time.Time
						for _, p := range n.Peers {
							if p.LastHandshake != nil && (latest == nil || p.LastHandshake.After(*latest)) {
								latest = p.LastHandshake
							}
						}
						state := "reachable"
						if !n.Reachable {
							state = "unreachable: " + n.Reason
						}
						ep := n.Endpoint
						if ep == "" || n.Keepalive {
							ep = cell(ep) + " (keepalive)"
						}
						rows = append(rows, []string{n.Cluster, n.Node, n.Address, n.Fingerprint, ep, whenPtr(latest), strconv.Itoa(n.Revision), state})
					}
					x.table("CLUSTER\tNODE\tADDRESS\tKEY\tENDPOINT\tLAST HANDSHAKE\tREVISION\tSTATE", rows)
					for _, o := range m.Overlaps {
						x.printf("\n%s: %s\n", o.Cluster, o.Reason)
					}
					return nil
				})
			},
		}.command(),
		spec{
			name: "rotate", usage: "ask a cluster's nodes (or one node) for new WireGuard keys", argsUsage: shapeClusterNode,
			description: `Asks every node of the cluster, or the one named, to make a new private key
(on the node: it never leaves it) and publish its public key; its peers take
the new key in the next mesh revision. Keys are also rotated on a schedule.

Example:
   nebula mesh rotate acme/eu-1
   nebula mesh rotate acme/eu-1/node-3`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeClusterNode)
				if err != nil {
					return err
				}
				var res api.MeshRotateResponse
				return x.read(&res, func(ctx context.Context) (err error) {
					res, err = cl.RotateMeshKeys(ctx, a.Org, a.Cluster, a.Node)
					return
				}, func() error {
					if len(res.Nodes) == 0 {
						x.printf("Nothing to do: every node of %s was asked already.\n", a)
						return nil
					}
					x.printf("Asked %s for new keys.\n", strings.Join(res.Nodes, ", "))
					return nil
				})
			},
		}.command(),
		spec{
			name: "settings", usage: "set the mesh range (it can grow, never shrink under its nodes)", argsUsage: shapeOrg,
			flags: []cli.Flag{&cli.StringFlag{Name: "network", Usage: "the mesh range, an IPv4 CIDR of /8 to /24 (default 100.96.0.0/12)", Required: true}},
			description: `Sets the range mesh addresses are allocated from. A node keeps its address,
so a new range must contain every address given (exit code 5 otherwise).

Example:
   nebula mesh settings acme --network 100.64.0.0/10`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var m api.Mesh
				return x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.UpdateMesh(ctx, a.Org, api.MeshSettingsRequest{Network: x.String("network")})
					return
				}, func() error {
					x.printf("Mesh of %s: %s\n", a.Org, m.Network)
					return nil
				})
			},
		}.command(),
	)
}
