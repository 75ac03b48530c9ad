package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
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
	if res.Deployment.Rollback {
		x.printf("Rolling %s back to release %d, image %s\n", a, res.Release.Number, res.Release.Image)
	} else {
		x.printf("Deploying %s: release %d, image %s\n", a, res.Release.Number, res.Release.Image)
	}
	if !x.Bool("wait") {
		x.printf("deployment %s is %s; follow it with: nebula deployments watch %s %s\n", res.Deployment.ID, res.Deployment.Status, a, res.Deployment.ID)
	}
	return nil
}

// waitsForApproval says that a change to a protected environment waits in a
// change set for someone else, and how they approve it; it exits with the
// waiting-for-approval code.
func (x *cmdCtx) waitsForApproval(cl *client.Client, what, org, project string, cs *query.ChangeSet) error {
	env := cs.EnvironmentID
	if envs, err := cl.Environments(x.Context.Context, org, project); err == nil {
		for _, e := range envs {
			if e.ID == cs.EnvironmentID {
				env = e.Name
			}
		}
	}
	x.printf("%s waits for someone else's approval in change set %s (version %d) of the protected environment %s/%s/%s.\n",
		what, cs.ID, cs.Version, org, project, env)
	x.printf("Another member approves it with:\n\n    nebula changeset approve %s/%s/%s %s --version %d\n", org, project, env, cs.ID, cs.Version)
	return exitError{exitApproval, fmt.Errorf("%s waits for approval in change set %s", what, cs.ID)}
}

// deployOutcome is what deploy and rollback print with -o json: one shape
// whether the deployment started or waits in a change set of a protected
// environment (status waiting-for-approval, exit code 6).
type deployOutcome struct {
	Status     string            `json:"status"`
	Deployment *query.Deployment `json:"deployment"`
	Release    *query.Release    `json:"release"`
	ChangeSet  *query.ChangeSet  `json:"changeSet"`
	// Build is what a Git service's deploy builds first (status building).
	Build *query.Build `json:"build,omitempty"`
}

// Deploy statuses besides statusWaiting.
const (
	statusStarted  = "started"
	statusBuilding = "building"
)

// deployed prints what a deploy or rollback started (or that it waits for
// approval) and follows it with --wait.
func (x *cmdCtx) deployed(cl *client.Client, a address, res api.DeployResponse) error {
	if x.machine() {
		out := deployOutcome{Status: statusStarted, Deployment: res.Deployment, Release: res.Release, ChangeSet: res.ChangeSet}
		if res.ChangeSet != nil {
			out.Status = statusWaiting
		}
		if err := x.emit(out); err != nil {
			return err
		}
		if res.ChangeSet != nil {
			return exitError{exitApproval, fmt.Errorf("the deployment waits for approval in change set %s", res.ChangeSet.ID)}
		}
	} else if err := x.printDeploy(a, res); err != nil {
		return err
	}
	return x.afterDeploy(cl, a, res)
}

// building says what a Git service's deploy started (a build) and, with
// --wait, follows it and then its deployment.
func (x *cmdCtx) building(cl *client.Client, a address, b query.Build) error {
	if x.machine() {
		if err := x.emit(deployOutcome{Status: statusBuilding, Build: &b}); err != nil {
			return err
		}
	} else {
		x.printf("Building %s of %s (build %s, %s): the deployment starts when it succeeds.\n", or(short(b.Commit), b.Branch+"'s head"), a, b.ID, b.Status)
	}
	if !x.Bool("wait") {
		return nil
	}
	env, err := cl.Environment(x.Context.Context, a.Org, a.Project, a.Env)
	if err != nil {
		return err
	}
	return x.awaitBuildDeploy(cl, a, env.ID, b)
}

// afterDeploy follows what a deploy or rollback started when --wait asks for
// it; without --wait, a deployment that waits for approval exits with 6.
func (x *cmdCtx) afterDeploy(cl *client.Client, a address, res api.DeployResponse) error {
	if res.ChangeSet != nil {
		// What waits, and how to approve it, is printed already.
		return exitError{exitApproval, fmt.Errorf("the deployment waits for approval in change set %s", res.ChangeSet.ID)}
	}
	if !x.Bool("wait") {
		return nil
	}
	if res.Deployment == nil {
		return errors.New("the control plane answered without a deployment")
	}
	return watchDeployment(x, cl, a, res.Deployment.ID, x.Duration("timeout"))
}

func deployCommand() *cli.Command {
	return spec{
		name: "deploy", usage: "deploy an image to a service in an environment as a new release", argsUsage: shapeTarget,
		description: `Deploys --image, or the service's own image, as a new release of the service in
the environment. The control plane pins a tag to its digest at the registry
first: an image it cannot resolve is refused and nothing is created. In a
protected environment the deployment waits in a change set for someone
else's approval.

A Git service is built first, in the environment's cluster: the head of the
branch the environment tracks (as the last push said; without one, as the
cluster finds it), or --commit. A commit already built there deploys its
image at once. The deployment starts when the build succeeds; with --wait the
build's output is printed, and a build that fails exits 7.

With --wait it follows the deployment's rollout until it ends: on a terminal
one line shows the stage, the pods ready and the time taken, and each stage
done stays as a line; otherwise one plain line per stage.

Example:
   nebula deploy acme/shop/production/api --image ghcr.io/acme/api:1.5
   nebula deploy acme/shop/staging/api --wait --timeout 5m
   nebula deploy acme/shop/staging/web --commit 9f1c2e7d0b3a4c5d6e7f8091a2b3c4d5e6f70819 --wait

` + exitCodesHelp,
		flags: append([]cli.Flag{&cli.StringFlag{Name: "image", Usage: "the image to deploy (default: the service's image)"},
			&cli.StringFlag{Name: "commit", Usage: "a Git service: build and deploy this commit (the full id) instead of the tracked branch's head"}}, waitFlags()...),
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			res, err := cl.DeployWith(x.Context.Context, a.Org, a.Project, a.Env, a.Service, api.DeployRequest{Image: x.String("image"), Commit: x.String("commit")})
			if err != nil {
				return err
			}
			if res.Build != nil && res.Deployment == nil && res.ChangeSet == nil {
				return x.building(cl, a, *res.Build)
			}
			return x.deployed(cl, a, res)
		},
	}.command()
}

func rollbackCommand() *cli.Command {
	return spec{
		name: "rollback", usage: "deploy an earlier release again", argsUsage: shapeTarget,
		description: `Deploys an earlier release of the service (its image and the configuration it
froze) again; nebula releases lists them.

A rollback pauses the service's automatic deploys in the environment until
someone resumes them (nebula service resume-deploys). With --wait it follows
the deployment as nebula deploy --wait does.

Example:
   nebula rollback acme/shop/production/api --release 41 --wait

` + exitCodesHelp,
		flags: append([]cli.Flag{&cli.IntFlag{Name: "release", Usage: "the release number to deploy again (required)"}}, waitFlags()...),
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			if x.Int("release") <= 0 {
				return usagef("give the release to go back to: --release N (nebula releases %s)", a)
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			res, err := cl.Rollback(x.Context.Context, a.Org, a.Project, a.Env, a.Service, x.Int("release"))
			if err != nil {
				return err
			}
			return x.deployed(cl, a, res)
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
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			var rs []query.Release
			return x.read(&rs, func(ctx context.Context) (err error) {
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
	cmd := spec{
		name: "deployments", usage: "list the deployments of a service in an environment; watch or show one", argsUsage: shapeTarget,
		description: `Lists deployments, newest first: the stage each reached (or how it ended),
its pods ready, and what holds it up (stalled; delivery: the cluster is
disconnected). nebula deployments watch follows one as it rolls out;
nebula deployments show lists the stages of one.

Example:
   nebula deployments acme/shop/production/api --limit 10
   nebula deployments watch acme/shop/production/api`,
		flags: []cli.Flag{&cli.IntFlag{Name: "limit", Usage: "at most this many, newest first (default 50)"}},
		json:  true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeTarget)
			if err != nil {
				return err
			}
			var ds []api.DeploymentView
			return x.read(&ds, func(ctx context.Context) (err error) {
				ds, err = cl.Deployments(ctx, a.Org, a.Project, a.Env, a.Service, x.Int("limit"))
				return
			}, func() error {
				var rows [][]string
				for _, d := range ds {
					rows = append(rows, []string{d.ID, strconv.Itoa(d.ReleaseNumber), d.Status, pods(d.Deployment), holdUps(d),
						when(d.RequestedAt), cell(d.RequestedBy), cell(d.Reason)})
				}
				x.table("ID\tRELEASE\tSTATUS\tREADY\tHELD UP\tREQUESTED\tBY\tREASON", rows)
				if t, err := cl.Target(x.Context.Context, a.Org, a.Project, a.Env, a.Service); err == nil && t.DeploysPaused != nil {
					x.printf("\n%s\n", pausedNote(a, t.DeploysPaused))
				}
				return nil
			})
		},
	}.command()
	cmd.Subcommands = []*cli.Command{
		spec{
			name: "watch", usage: "follow a deployment until it ends", argsUsage: shapeTarget + " [DEPLOYMENT]",
			description: `Follows a deployment (the newest when DEPLOYMENT is left out) as it rolls out,
until it succeeds, fails or is superseded. On a terminal one line shows the
stage, the pods ready and the time taken, and each stage done stays as a line;
otherwise (piped) one plain line per stage. A stalled rollout and a cluster
that is disconnected (the delivery blocker) are shown when they happen. A lost
connection is made again and the watch resumes where it was. With -o json
(or --json, -o jsonl), each event is printed as one JSON line, as it comes:
{"event": "deployment"|"stage", "data": {...}}.

Example:
   nebula deployments watch acme/shop/production/api
   nebula deployments watch acme/shop/production/api 5d0c1f5e-1b7a-4a5e-9a53-2f3a4e9b8c71 --timeout 30m

` + exitCodesHelp,
			flags: []cli.Flag{timeoutFlag()},
			json:  true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 1 || len(x.args) > 2 {
					return usagef("want %s [DEPLOYMENT], got %d argument(s) (see --help)", shapeTarget, len(x.args))
				}
				if x.format() == outYAML {
					return usagef("deployments watch prints JSON lines (-o json or -o jsonl), not YAML")
				}
				a, err := x.address(0, shapeTarget)
				if err != nil {
					return err
				}
				id := client.LatestDeployment
				if len(x.args) == 2 {
					id = x.args[1]
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				return watchDeployment(x, cl, a, id, x.Duration("timeout"))
			},
		}.command(),
		spec{
			name: "show", usage: "show a deployment and the stages of its rollout", argsUsage: shapeTarget + " [DEPLOYMENT]",
			description: `Shows a deployment (the newest when DEPLOYMENT is left out): its release, how
far it got or how it ended, and every stage with its time and pods ready.

Example:
   nebula deployments show acme/shop/production/api`,
			json: true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 1 || len(x.args) > 2 {
					return usagef("want %s [DEPLOYMENT], got %d argument(s) (see --help)", shapeTarget, len(x.args))
				}
				a, err := x.address(0, shapeTarget)
				if err != nil {
					return err
				}
				id := client.LatestDeployment
				if len(x.args) == 2 {
					id = x.args[1]
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var d api.DeploymentDetail
				return x.read(&d, func(ctx context.Context) (err error) {
					d, err = cl.Deployment(ctx, a.Org, a.Project, a.Env, a.Service, id)
					return
				}, func() error {
					kind := "deployment"
					if d.Rollback {
						kind = "rollback"
					}
					x.printf("Deployment %s of %s: %s of release %d (%s)\n", d.ID, a, kind, d.ReleaseNumber, d.Image)
					x.printf("requested %s by %s; status %s", when(d.RequestedAt), cell(d.RequestedBy), d.Status)
					if d.Desired > 0 {
						x.printf(", %d/%d pods ready", d.Ready, d.Desired)
					}
					x.printf("\n")
					if h := holdUps(d.DeploymentView); h != "-" {
						x.printf("held up: %s\n", h)
					}
					if d.Reason != "" {
						x.printf("reason: %s\n", d.Reason)
					}
					if d.SupersededBy != "" {
						x.printf("superseded by deployment %s\n", d.SupersededBy)
					}
					x.printf("\n")
					var rows [][]string
					for _, s := range d.Stages {
						ready := "-"
						if s.Desired > 0 {
							ready = fmt.Sprintf("%d/%d", s.Ready, s.Desired)
						}
						rows = append(rows, []string{strconv.Itoa(s.Seq), s.Stage, when(s.At), ready, cell(s.Actor), cell(s.Detail)})
					}
					x.table("SEQ\tSTAGE\tAT\tREADY\tBY\tDETAIL", rows)
					return nil
				})
			},
		}.command(),
	}
	return cmd
}

// pods writes a deployment's pods ready of desired.
func pods(d query.Deployment) string {
	if d.Desired == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", d.Ready, d.Desired)
}

// holdUps writes what holds a deployment up: stalled, and its blockers.
func holdUps(d api.DeploymentView) string {
	var out []string
	if d.Stalled {
		out = append(out, "stalled")
	}
	out = append(out, d.Blockers...)
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// pausedNote says that a service's automatic deploys are paused.
func pausedNote(a address, p *query.DeployPause) string {
	return fmt.Sprintf("Automatic deploys of %s are paused since %s by %s: %s\nResume them with: nebula service resume-deploys %s",
		a, when(p.PausedAt), cell(p.PausedBy), cell(p.Reason), a)
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
			flags: []cli.Flag{&cli.StringFlag{Name: "status", Usage: "only open, approved, rejected or expired ones"}},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				var cs []query.ChangeSet
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
				var cs query.ChangeSet
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
				var cs query.ChangeSet
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
	case query.DiffUnsetVariable, query.DiffRemoveDomain:
		return "-"
	case query.DiffAddDomain:
		return "+"
	}
	return "~"
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
					return usagef("give either --revision or --at, not both")
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
			if !x.Bool("summary") || x.machine() {
				return x.emitRaw(raw)
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
					var ts []query.JoinToken
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
