package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

const shapeServer = "ORG/CLUSTER/SERVER"

// serverUpgradeCommand is nebula server upgrade: one server's agent, or a
// staged rollout over an organisation's servers.
func serverUpgradeCommand() *cli.Command {
	return spec{
		name: "upgrade", usage: "upgrade a server's agent, or every agent of an organisation one at a time, to the control plane's version",
		argsUsage: shapeServer + " | --all ORG",
		description: `Upgrades the agent of one server to the control plane's version: the agent
downloads the binary from the control plane, checks its SHA-256 and its
--version, replaces itself and restarts; it is upgraded when it connects again
with the new version (nebula server list shows the last upgrade). SERVER is
the server's name or id. --force installs a version the agent rolled back in
the last 24 hours.

With --all ORG, upgrades the organisation's servers that can be upgraded now
(connected, behind the control plane, able to upgrade themselves) one at a
time in name order: the next when the one before connected again with the new
version. The first failure halts the rollout and leaves the rest untouched.

Refusals: server_offline, agent_current, agent_newer, upgrade_in_progress,
nothing_to_upgrade, rolled_back_recently (exit code 5); agent_predates_upgrade,
agent_cannot_upgrade, no_agent_binary (exit code 2). Needs servers:write
(Owners and Admins).

Examples:
   nebula server upgrade acme/eu-1/node-1
   nebula server upgrade acme/eu-1/node-1 --force
   nebula server upgrade --all acme`,
		flags: []cli.Flag{
			&cli.BoolFlag{Name: "all", Usage: "upgrade every server of the organisation ORG that can be upgraded now, one at a time"},
			&cli.BoolFlag{Name: "force", Usage: "install a version the agent rolled back in the last 24 hours"},
		},
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			if x.Bool("all") {
				return upgradeAll(x)
			}
			return upgradeOne(x)
		},
	}.command()
}

func upgradeAll(x *cmdCtx) error {
	if x.Bool("force") {
		return usagef("--force upgrades one server (%s), not --all", shapeServer)
	}
	a, err := x.address(0, shapeOrg)
	if err != nil {
		return err
	}
	cl, err := x.client()
	if err != nil {
		return err
	}
	var out api.RolloutAccepted
	return x.read(&out, func(ctx context.Context) (err error) { out, err = cl.UpgradeAgents(ctx, a.Org); return }, func() error {
		x.printf("Upgrading the agents of %s to %s one at a time (rollout %s):\n", a.Org, out.Version, out.RolloutID)
		for _, s := range out.Servers {
			x.printf("  %s\n", s)
		}
		x.printf("The first failure halts the rollout; follow it with nebula server list or nebula audit %s --action 'server.agent.*'.\n", a.Org)
		return nil
	})
}

func upgradeOne(x *cmdCtx) error {
	parts := strings.Split(x.args[0], "/")
	if len(parts) != 3 || parts[2] == "" || strings.TrimSpace(parts[2]) != parts[2] {
		return usagef("want %s (or --all ORG), got %q", shapeServer, x.args[0])
	}
	a, err := parseAddress(parts[0]+"/"+parts[1], shapeCluster)
	if err != nil {
		return usagef("want %s, got %q: %v", shapeServer, x.args[0], err)
	}
	cl, err := x.client()
	if err != nil {
		return err
	}
	var out api.UpgradeAccepted
	return x.read(&out, func(ctx context.Context) error {
		servers, err := cl.Servers(ctx, a.Org, a.Cluster)
		if err != nil {
			return err
		}
		id := ""
		for _, s := range servers {
			if s.RevokedAt == nil && (s.Name == parts[2] || s.ID == parts[2]) {
				id = s.ID
				break
			}
		}
		if id == "" {
			return exitError{exitNotFound, fmt.Errorf("no server %s in cluster %s (nebula server list %s)", parts[2], a, a)}
		}
		out, err = cl.UpgradeServer(ctx, id, x.Bool("force"))
		return err
	}, func() error {
		x.printf("Upgrading the agent of %s from %s to %s (upgrade %s): it restarts and connects again with the new version.\n",
			out.Server, cell(out.From), out.To, out.UpgradeID)
		return nil
	})
}

// lastUpgradeCell is a server's last upgrade in a table: its state and
// target version ("rolled_back 1.5.0"), or "-".
func lastUpgradeCell(u *api.LastUpgrade) string {
	if u == nil {
		return "-"
	}
	return u.State + " " + u.Version
}
