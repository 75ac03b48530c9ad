package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
)

// deadlineFlag is --progress-deadline.
func deadlineFlag() cli.Flag {
	return &cli.DurationFlag{Name: "progress-deadline", Usage: "how long a release may take to become ready once its pods start, in whole seconds up to 24h " +
		"(0: the default, 10m); a release not ready by then fails and the one before it runs again"}
}

// deadline sets the request's progress deadline from --progress-deadline.
func (x *cmdCtx) deadline(req *api.ServiceRequest) error {
	if !x.IsSet("progress-deadline") {
		return nil
	}
	d := x.Duration("progress-deadline")
	if d < 0 || d%time.Second != 0 {
		return usagef("--progress-deadline %s: give whole seconds (such as 90s or 10m), or 0 for the default", d)
	}
	secs := int(d / time.Second)
	req.ProgressDeadlineSeconds = &secs
	return nil
}

// progressDeadline writes a service's progress deadline.
func progressDeadline(secs int) string {
	if secs == 0 {
		return "10m0s (default)"
	}
	return (time.Duration(secs) * time.Second).String()
}

func serviceCommand() *cli.Command {
	return group("service", "create, change, scale, list and delete services; the branch a Git service tracks; resume their automatic deploys",
		serviceScaleSpec().command(),
		trackSpec().command(),
		spec{
			name: "create", usage: "create a service from an image or a Git branch", argsUsage: shapeService,
			description: `Creates a service of a project, in every environment of it. It runs one "web"
process with --port and --replicas. Deploy it with nebula deploy.

Example:
   nebula service create acme/shop/api --image ghcr.io/acme/api:1.4 --port 8080 --replicas 2
   nebula service create acme/shop/web --git https://github.com/acme/web --branch main --progress-deadline 15m
   echo -n "$TOKEN" | nebula service create acme/shop/app --git https://git.example.com/acme/app.git --branch main --git-token-stdin --port 8080

A Git service is built in the cluster of each environment (nebula deploy, or a
push to the branch an environment tracks: nebula project webhook, nebula
service track).`,
			flags: append([]cli.Flag{
				&cli.StringFlag{Name: "image", Usage: "the image to run (a tag is pinned to its digest when deployed)"},
				&cli.StringFlag{Name: "git", Usage: "the Git repository to build from"},
				&cli.StringFlag{Name: "branch", Usage: "the default branch of --git (environments track it unless set otherwise)"},
				&cli.IntFlag{Name: "port", Usage: "the port the web process listens on"},
				&cli.IntFlag{Name: "replicas", Usage: "how many web processes run (default 1)"},
				deadlineFlag(),
			}, gitFlags()...),
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeService)
				if err != nil {
					return err
				}
				req := api.ServiceRequest{Name: a.Service, Image: x.String("image"), GitURL: x.String("git"), GitBranch: x.String("branch")}
				switch {
				case req.Image != "" && req.GitURL != "":
					return exitError{exitUsage, errors.New("give either --image or --git, not both")}
				case req.Image == "" && req.GitURL == "":
					return exitError{exitUsage, errors.New("give the service's source: --image IMAGE, or --git URL --branch BRANCH")}
				case req.GitURL != "" && req.GitBranch == "":
					return exitError{exitUsage, errors.New("--git needs --branch")}
				case req.Image != "" && req.GitBranch != "":
					return exitError{exitUsage, errors.New("--branch goes with --git, not --image")}
				}
				if err := x.applyGitFlags(&req); err != nil {
					return err
				}
				if x.IsSet("port") {
					p := x.Int("port")
					req.Port = &p
				}
				if x.IsSet("replicas") {
					r := x.Int("replicas")
					req.Replicas = &r
				}
				if err := x.deadline(&req); err != nil {
					return err
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var s api.Service
				return x.read(&s, func(ctx context.Context) (err error) { s, err = cl.CreateService(ctx, a.Org, a.Project, req); return }, func() error {
					x.printf("Created service %s (%s).\n", a, source(s.Source))
					return nil
				})
			},
		}.command(),
		spec{
			name: "update", usage: "change a service's source, web process or progress deadline", argsUsage: shapeService,
			description: `Changes a service; what is not given stays. Running releases keep what they
froze until the next deployment.

Example:
   nebula service update acme/shop/api --progress-deadline 10m
   nebula service update acme/shop/api --image ghcr.io/acme/api:1.5 --replicas 3`,
			flags: append([]cli.Flag{
				&cli.StringFlag{Name: "image", Usage: "the image to run"},
				&cli.StringFlag{Name: "git", Usage: "the Git repository to build from"},
				&cli.StringFlag{Name: "branch", Usage: "the default branch of the Git source"},
				&cli.IntFlag{Name: "port", Usage: "the port the web process listens on"},
				&cli.IntFlag{Name: "replicas", Usage: "how many web processes run"},
				deadlineFlag(),
			}, gitFlags()...),
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeService)
				if err != nil {
					return err
				}
				req := api.ServiceRequest{Image: x.String("image"), GitURL: x.String("git"), GitBranch: x.String("branch")}
				switch {
				case req.Image != "" && req.GitURL != "":
					return exitError{exitUsage, errors.New("give either --image or --git, not both")}
				case req.GitURL != "" && req.GitBranch == "":
					return exitError{exitUsage, errors.New("--git needs --branch")}
				}
				if err := x.applyGitFlags(&req); err != nil {
					return err
				}
				if x.IsSet("port") {
					p := x.Int("port")
					req.Port = &p
				}
				if x.IsSet("replicas") {
					r := x.Int("replicas")
					req.Replicas = &r
				}
				if err := x.deadline(&req); err != nil {
					return err
				}
				if req.Image == "" && req.GitURL == "" && req.Port == nil && req.Replicas == nil && req.ProgressDeadlineSeconds == nil {
					return exitError{exitUsage, errors.New("nothing to change: give --image, --git/--branch, --port, --replicas or --progress-deadline")}
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var s api.Service
				return x.read(&s, func(ctx context.Context) (err error) {
					s, err = cl.UpdateService(ctx, a.Org, a.Project, a.Service, req)
					return
				}, func() error {
					x.printf("Updated service %s (%s; %s; progress deadline %s).\n", a, source(s.Source), processes(s.Processes), progressDeadline(s.ProgressDeadlineSeconds))
					return nil
				})
			},
		}.command(),
		spec{
			name: "resume-deploys", usage: "resume a service's automatic deploys in an environment after a rollback", argsUsage: shapeTarget,
			description: `A rollback pauses the automatic deploys of the service in its environment,
so that the next push does not undo it. This resumes them.

Example:
   nebula service resume-deploys acme/shop/production/api`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeTarget)
				if err != nil {
					return err
				}
				var t api.TargetView
				return x.read(&t, func(ctx context.Context) (err error) {
					t, err = cl.ResumeDeploys(ctx, a.Org, a.Project, a.Env, a.Service)
					return
				}, func() error {
					if t.DeploysPaused != nil {
						return errors.New("the automatic deploys are still paused")
					}
					x.printf("Automatic deploys of %s are resumed.\n", a)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the services of a project", argsUsage: shapeProject,
			description: `Lists the services of a project with their source and processes.

Example:
   nebula service list acme/shop`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var ss []api.Service
				return x.read(&ss, func(ctx context.Context) (err error) { ss, err = cl.Services(ctx, a.Org, a.Project); return }, func() error {
					var rows [][]string
					for _, s := range ss {
						rows = append(rows, []string{s.Name, source(s.Source), processes(s.Processes), when(s.CreatedAt)})
					}
					x.table("NAME\tSOURCE\tPROCESSES\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "delete", usage: "delete a service everywhere", argsUsage: shapeService,
			description: `Deletes a service from every environment of its project; services whose
variables reference it are held until the references are fixed. Asks first on
a terminal; give --yes otherwise.

Example:
   nebula service delete acme/shop/worker --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeService)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete service " + a.String() + " from every environment"); err != nil {
					return err
				}
				cs, err := cl.DeleteService(x.Context.Context, a.Org, a.Project, a.Service)
				if err != nil {
					return err
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Deleting service "+a.String(), a.Org, a.Project, cs)
				}
				x.printf("Deleted service %s.\n", a)
				return nil
			},
		}.command(),
	)
}

func source(s api.ServiceSource) string {
	if s.Image != "" {
		return s.Image
	}
	if s.GitURL != "" {
		return s.GitURL + "#" + s.GitBranch
	}
	return "-"
}

func processes(ps []api.Process) string {
	var out []string
	for _, p := range ps {
		s := p.Name
		if p.Port > 0 {
			s += ":" + strconv.Itoa(p.Port)
		}
		s += fmt.Sprintf(" x%d", p.Replicas)
		out = append(out, s)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}
