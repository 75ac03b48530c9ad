package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
)

// Builds from Git: nebula builds, nebula service track, nebula project
// webhook and deliveries, and the Git flags of service create/update.

func gitFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "dockerfile", Usage: "the Dockerfile's path in the repository (default Dockerfile)"},
		&cli.StringFlag{Name: "build-context", Usage: "the build context directory in the repository (default: its root)"},
		&cli.BoolFlag{Name: "git-token-stdin", Usage: "read an HTTPS token that reads the repository from one line of stdin (sealed; never shown again)"},
		&cli.StringFlag{Name: "git-user", Usage: "the user name that goes with the token (default: the forge's own, such as x-access-token)"},
		&cli.StringFlag{Name: "git-ssh-key", Usage: "a file with an SSH deploy key (PEM) that reads the repository (sealed; never shown again)"},
		&cli.StringFlag{Name: "git-known-hosts", Usage: "a file of the forge's SSH host keys (known_hosts lines, as ssh-keyscan prints them) that the build accepts, and no other (default: the key met first)"},
		&cli.BoolFlag{Name: "no-git-credential", Usage: "remove the repository's credential"},
	}
}

// applyGitFlags puts the Git flags into the request.
func (x *cmdCtx) applyGitFlags(req *api.ServiceRequest) error {
	req.Dockerfile, req.Context, req.GitUsername = x.String("dockerfile"), x.String("build-context"), x.String("git-user")
	req.GitCredentialNone = x.Bool("no-git-credential")
	if x.Bool("git-token-stdin") {
		if x.String("git-ssh-key") != "" {
			return exitError{exitUsage, errors.New("give --git-token-stdin or --git-ssh-key, not both")}
		}
		t, err := x.line()
		if err != nil {
			return err
		}
		if req.GitToken = strings.TrimSpace(t); req.GitToken == "" {
			return exitError{exitUsage, errors.New("--git-token-stdin read no token")}
		}
	}
	if f := x.String("git-ssh-key"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return exitError{exitUsage, fmt.Errorf("--git-ssh-key: %w", err)}
		}
		req.GitSSHKey = string(b)
	}
	if f := x.String("git-known-hosts"); f != "" {
		if req.GitSSHKey == "" {
			return exitError{exitUsage, errors.New("--git-known-hosts goes with --git-ssh-key")}
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return exitError{exitUsage, fmt.Errorf("--git-known-hosts: %w", err)}
		}
		req.GitKnownHosts = strings.TrimSpace(string(b))
	}
	if req.GitUsername != "" && req.GitToken == "" {
		return exitError{exitUsage, errors.New("--git-user goes with --git-token-stdin")}
	}
	return nil
}

func buildsCommand() *cli.Command {
	return group("builds", "list, show, follow and cancel builds from Git",
		spec{
			name: "list", usage: "list a project's builds, newest first", argsUsage: shapeProject,
			description: `Lists the builds of a project's Git services: queued, running, succeeded (with
the image's digest), failed (with the exit code), cancelled or timed_out.

Example:
   nebula builds list acme/shop --service api`,
			flags: []cli.Flag{&cli.StringFlag{Name: "service", Usage: "only this service's builds"},
				&cli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many"}},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var bs []api.Build
				return x.read(&bs, func(ctx context.Context) (err error) {
					bs, err = cl.Builds(ctx, a.Org, a.Project, x.String("service"), x.Int("limit"))
					return
				}, func() error {
					var rows [][]string
					for _, b := range bs {
						rows = append(rows, []string{b.ID, b.Service, b.Branch, cell(short(b.Commit)), b.Status, b.Trigger, b.Cluster, when(b.QueuedAt)})
					}
					x.table("ID\tSERVICE\tBRANCH\tCOMMIT\tSTATUS\tTRIGGER\tCLUSTER\tQUEUED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "show", usage: "show a build: its status, image, or why it failed", argsUsage: "ORG BUILD",
			description: `Shows a build: what it builds (repository, branch, commit, Dockerfile), where,
its status, the image and digest it pushed, or the reason, exit code and the
last lines of its log when it failed.

Example:
   nebula builds show acme 0b7c3a5e-...`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var b api.Build
				return x.read(&b, func(ctx context.Context) (err error) { b, err = cl.Build(ctx, a.Org, x.Args().Get(1)); return }, func() error {
					x.printBuild(b)
					return nil
				})
			},
		}.command(),
		spec{
			name: "logs", usage: "print a build's output (kept 7 days)", argsUsage: "ORG BUILD",
			description: `Prints a build's output: the clone, then BuildKit's progress. --follow keeps
printing until the build is over, then exits as deploy --wait does for it (0
succeeded, 7 failed, cancelled or timed out).

Example:
   nebula builds logs acme 0b7c3a5e-... --follow`,
			flags: []cli.Flag{&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing until the build is over"}},
			nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				return followBuild(x.Context.Context, cl, a.Org, x.Args().Get(1), x.out, x.Bool("follow"), 0)
			},
		}.command(),
		spec{
			name: "cancel", usage: "cancel a build that has not finished", argsUsage: "ORG BUILD",
			description: `Cancels a queued or running build: a running build's Job is stopped in its
cluster, and nothing is deployed. A build that is over cannot be cancelled
(exit 5).

Example:
   nebula builds cancel acme 0b7c3a5e-...`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var b api.Build
				return x.read(&b, func(ctx context.Context) (err error) { b, err = cl.CancelBuild(ctx, a.Org, x.Args().Get(1)); return }, func() error {
					x.printf("Cancelled build %s (%s).\n", b.ID, b.Status)
					return nil
				})
			},
		}.command(),
	)
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

func (x *cmdCtx) printBuild(b api.Build) {
	x.printf("Build %s of %s/%s (attempt %d, by %s)\n", b.ID, b.Project, b.Service, b.Attempt, b.Trigger)
	x.printf("  repository  %s\n  branch      %s\n  commit      %s\n  dockerfile  %s in %s\n  cluster     %s\n  status      %s\n",
		b.Repository, b.Branch, or(b.Commit, "(the branch's head)"), or(b.Dockerfile, domain.DefaultDockerfile), or(b.Context, domain.DefaultContext),
		b.Cluster, b.Status)
	if b.Digest != "" {
		x.printf("  image       %s@%s\n", b.Image, b.Digest)
	}
	if b.Reason != "" {
		x.printf("  reason      %s\n", b.Reason)
	}
	if b.ExitCode != 0 {
		x.printf("  exit code   %d\n", b.ExitCode)
	}
	for _, l := range b.LogTail {
		x.printf("  | %s\n", l)
	}
}

// followBuild prints a build's output from the start, and with follow
// until the build is over; a build that did not succeed exits 7.
func followBuild(ctx context.Context, cl *client.Client, org, id string, out io.Writer, follow bool, timeout time.Duration) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cursor := ""
	for {
		b, err := cl.Build(ctx, org, id)
		if err != nil {
			return timedOut(ctx, err)
		}
		for {
			page, err := cl.BuildLogs(ctx, org, id, cursor, 1000)
			if err != nil {
				return timedOut(ctx, err)
			}
			for _, l := range page.Items {
				fmt.Fprintln(out, l.Text)
			}
			cursor = page.Next
			if len(page.Items) < 1000 {
				break
			}
		}
		st := domain.BuildStatus(b.Status)
		if st.Terminal() {
			if st != domain.BuildSucceeded {
				return exitError{exitFailed, fmt.Errorf("build %s %s: %s", id, b.Status, or(b.Reason, "no reason given"))}
			}
			return nil
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return timedOut(ctx, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func timedOut(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return exitError{exitTimedOut, errors.New("timed out waiting for the build")}
	}
	return err
}

// awaitBuildDeploy follows a deploy's build and then the deployment it
// starts (its id derives from the build, its attempt and the environment).
func (x *cmdCtx) awaitBuildDeploy(cl *client.Client, a address, env string, b api.Build) error {
	ctx := x.Context.Context
	timeout := x.Duration("timeout")
	start := time.Now()
	out := x.out
	if x.machine() {
		out = io.Discard
	}
	if err := followBuild(ctx, cl, a.Org, b.ID, out, true, timeout); err != nil {
		return err
	}
	b, err := cl.Build(ctx, a.Org, b.ID)
	if err != nil {
		return err
	}
	dep := domain.DeriveID(b.ID, "deployment", env, strconv.Itoa(b.Attempt))
	for {
		_, err := cl.Deployment(ctx, a.Org, a.Project, a.Env, a.Service, dep)
		if err == nil {
			break
		}
		if !client.IsStatus(err, 404) {
			return err
		}
		if time.Since(start) > 30*time.Second && !x.IsSet("timeout") || timeout > 0 && time.Since(start) > timeout {
			return exitError{exitApproval, fmt.Errorf("build %s succeeded; its deployment waits (automatic deploys paused, or a change set): nebula changeset list %s/%s/%s",
				b.ID, a.Org, a.Project, a.Env)}
		}
		time.Sleep(500 * time.Millisecond)
	}
	rest := time.Duration(0)
	if timeout > 0 {
		if rest = timeout - time.Since(start); rest <= 0 {
			return exitError{exitTimedOut, errors.New("timed out waiting for the deployment")}
		}
	}
	return watchDeployment(x, cl, a, dep, rest)
}

func trackSpec() spec {
	return spec{
		name: "track", usage: "set the branch a Git service follows in an environment", argsUsage: shapeTarget,
		description: `Sets the branch whose pushes build and deploy the service in the environment
(the service's default branch unless set). Branch names match exactly:
feature/x is that branch, not x. --none follows no branch: pushes deploy
nothing there.

Example:
   nebula service track acme/shop/staging/api --branch develop
   nebula service track acme/shop/production/api --none`,
		flags: []cli.Flag{&cli.StringFlag{Name: "branch", Usage: "the branch to follow"},
			&cli.BoolFlag{Name: "none", Usage: "follow no branch"}},
		json: true, nargs: 1,
		run: func(x *cmdCtx) error {
			a, err := x.address(0, shapeTarget)
			if err != nil {
				return err
			}
			if (x.String("branch") == "") == !x.Bool("none") {
				return usagef("give --branch BRANCH or --none")
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			var v api.TrackingView
			return x.read(&v, func(ctx context.Context) (err error) {
				v, err = cl.Track(ctx, a.Org, a.Project, a.Env, a.Service, x.String("branch"), x.Bool("none"))
				return
			}, func() error {
				if v.Untracked {
					x.printf("%s follows no branch: pushes deploy nothing there.\n", a)
				} else {
					x.printf("%s follows branch %s.\n", a, v.Branch)
				}
				return nil
			})
		},
	}
}

func webhookSpecs() []*cli.Command {
	return []*cli.Command{
		spec{
			name: "webhook", usage: "print the project's push webhook URL, and its secret once", argsUsage: shapeProject,
			description: `Prints the URL forges deliver push webhooks to (content type application/json).
The first time, it makes the secret and prints it: it is shown this once.
--rotate makes a new one; the one before is still accepted for 24 hours, so
that the forge's setting can be changed meanwhile. Set the secret as GitHub's
and Gitea's/Forgejo's webhook secret, GitLab's secret token, or Bitbucket's
secret.

Example:
   nebula project webhook acme/shop
   nebula project webhook acme/shop --rotate`,
			flags: []cli.Flag{&cli.BoolFlag{Name: "rotate", Usage: "make a new secret (the old one is accepted 24 hours more)"}},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				ctx := x.Context.Context
				info, err := cl.Webhook(ctx, a.Org, a.Project)
				if err != nil {
					return err
				}
				if info.SecretSet && !x.Bool("rotate") {
					return x.read(&info, func(context.Context) error { return nil }, func() error {
						x.printf("URL     %s\nSecret  set %s (shown once when made; --rotate for a new one)\n", info.URL, whenPtr(info.RotatedAt))
						return nil
					})
				}
				var s api.WebhookSecret
				return x.read(&s, func(ctx context.Context) (err error) { s, err = cl.RotateWebhook(ctx, a.Org, a.Project); return }, func() error {
					x.printf("URL     %s\nSecret  %s\n", s.URL, s.Secret)
					x.printf("The secret is shown this once. Content type: application/json; events: push.\n")
					if s.PreviousUntil != nil {
						x.printf("The previous secret is accepted until %s.\n", s.PreviousUntil.UTC().Format(time.RFC3339))
					}
					return nil
				})
			},
		}.command(),
		spec{
			name: "deliveries", usage: "list the deliveries the project's webhook received", argsUsage: shapeProject,
			description: `Lists the webhook's recent deliveries, newest first: the forge, the event and
ref, and what came of it (building, ping, or ignored and why: an untracked
branch, a tag push, a branch deletion, another repository).

Example:
   nebula project deliveries acme/shop`,
			flags: []cli.Flag{&cli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many"}},
			json:  true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var ds []api.Delivery
				return x.read(&ds, func(ctx context.Context) (err error) {
					ds, err = cl.Deliveries(ctx, a.Org, a.Project, x.Int("limit"))
					return
				}, func() error {
					var rows [][]string
					for _, d := range ds {
						rows = append(rows, []string{when(d.ReceivedAt), d.Provider, d.Event, cell(d.Ref), cell(short(d.Commit)), d.Outcome, cell(d.Reason)})
					}
					x.table("RECEIVED\tFORGE\tEVENT\tREF\tCOMMIT\tOUTCOME\tREASON", rows)
					return nil
				})
			},
		}.command(),
	}
}
