package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
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
func (x *cmdCtx) waitsForApproval(cl *client.Client, what, org, project string, cs *api.ChangeSet) error {
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
	Status     string          `json:"status"`
	Deployment *api.Deployment `json:"deployment"`
	Release    *api.Release    `json:"release"`
	ChangeSet  *api.ChangeSet  `json:"changeSet"`
	// Build is what a Git service's deploy builds first (status building).
	Build *api.Build `json:"build,omitempty"`
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
func (x *cmdCtx) building(cl *client.Client, a address, b api.Build) error {
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
