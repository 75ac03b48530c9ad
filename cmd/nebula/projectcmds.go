package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/query"
)

// maxSecretBytes bounds a secret read from stdin: the API's limit of a
// variable's value.
const maxSecretBytes = 64 << 10

func projectCommand() *cli.Command {
	return group("project", "create, list and delete projects; their push webhook and its deliveries",
		spec{
			name: "create", usage: "create a project", argsUsage: shapeProject,
			description: `Creates a project in an organisation.

Example:
   nebula project create acme/shop`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var p query.Project
				return x.read(&p, func(ctx context.Context) (err error) { p, err = cl.CreateProject(ctx, a.Org, a.Project); return }, func() error {
					x.printf("Created project %s/%s.\n", a.Org, p.Name)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the projects of an organisation", argsUsage: shapeOrg,
			description: `Lists the projects of an organisation.

Example:
   nebula project list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var ps []query.Project
				return x.read(&ps, func(ctx context.Context) (err error) { ps, err = cl.Projects(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, p := range ps {
						rows = append(rows, []string{p.Name, when(p.CreatedAt)})
					}
					x.table("NAME\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "delete", usage: "delete a project with its environments and services", argsUsage: shapeProject,
			description: `Deletes a project, its environments and its services. Asks first on a
terminal; give --yes otherwise.

Example:
   nebula project delete acme/shop --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete project " + a.String() + " with its environments and services"); err != nil {
					return err
				}
				cs, err := cl.DeleteProject(x.Context.Context, a.Org, a.Project)
				if err != nil {
					return err
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Deleting project "+a.String(), a.Org, a.Project, cs)
				}
				x.printf("Deleted project %s.\n", a)
				return nil
			},
		}.command(),
		webhookSpecs()[0],
		webhookSpecs()[1],
	)
}

func envCommand() *cli.Command {
	return group("env", "create, list, change and delete environments",
		spec{
			name: "create", usage: "create an environment on a cluster", argsUsage: shapeEnv,
			description: `Creates an environment of a project on a cluster of the organisation. In a
protected environment every change waits in a change set until someone else
approves it.

Example:
   nebula env create acme/shop/production --cluster eu-1 --protected`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "cluster", Usage: "the cluster the environment runs on (required)"},
				&cli.BoolFlag{Name: "protected", Usage: "changes wait for someone else's approval"},
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				if x.String("cluster") == "" {
					return exitError{exitUsage, errors.New("give the cluster the environment runs on: --cluster CLUSTER (nebula cluster list " + a.Org + ")")}
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var e query.Environment
				return x.read(&e, func(ctx context.Context) (err error) {
					e, err = cl.CreateEnvironment(ctx, a.Org, a.Project, api.CreateEnvironmentRequest{Name: a.Env, Cluster: x.String("cluster"), Protected: x.Bool("protected")})
					return
				}, func() error {
					prot := ""
					if e.Protected {
						prot = " (protected: changes wait for approval)"
					}
					x.printf("Created environment %s on cluster %s%s.\n", a, e.ClusterName, prot)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the environments of a project", argsUsage: shapeProject,
			description: `Lists the environments of a project with their clusters.

Example:
   nebula env list acme/shop`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeProject)
				if err != nil {
					return err
				}
				var es []query.Environment
				return x.read(&es, func(ctx context.Context) (err error) { es, err = cl.Environments(ctx, a.Org, a.Project); return }, func() error {
					var rows [][]string
					for _, e := range es {
						rows = append(rows, []string{e.Name, cell(e.ClusterName), yesNo(e.Protected), when(e.CreatedAt)})
					}
					x.table("NAME\tCLUSTER\tPROTECTED\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "update", usage: "change an environment's cluster or protection", argsUsage: shapeEnv,
			description: `Moves an environment to another cluster of the organisation, or protects or
unprotects it. Unprotecting a protected environment, like any change to it,
waits in a change set for someone else's approval (exit code 6).

Example:
   nebula env update acme/shop/staging --protected
   nebula env update acme/shop/production --protected=false
   nebula env update acme/shop/staging --cluster eu-2`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "cluster", Usage: "the cluster to run on"},
				&cli.BoolFlag{Name: "protected", Usage: "changes wait for someone else's approval (--protected=false to lift it)"},
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeEnv)
				if err != nil {
					return err
				}
				var req api.UpdateEnvironmentRequest
				if x.IsSet("cluster") {
					c := x.String("cluster")
					req.Cluster = &c
				}
				if x.IsSet("protected") {
					p := x.Bool("protected")
					req.Protected = &p
				}
				if req.Cluster == nil && req.Protected == nil {
					return usagef("nothing to change: give --cluster CLUSTER, --protected or --protected=false")
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				e, cs, err := cl.UpdateEnvironment(x.Context.Context, a.Org, a.Project, a.Env, req)
				if err != nil {
					return err
				}
				out := envUpdate{Status: statusDone, ChangeSet: cs}
				if cs == nil {
					out.Environment = &e
				} else {
					out.Status = statusWaiting
				}
				if x.machine() {
					if err := x.emit(out); err != nil {
						return err
					}
					if cs != nil {
						return exitError{exitApproval, fmt.Errorf("the change of %s waits for approval in change set %s", a, cs.ID)}
					}
					return nil
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Changing environment "+a.String(), a.Org, a.Project, cs)
				}
				prot := "not protected"
				if e.Protected {
					prot = "protected: changes wait for approval"
				}
				x.printf("Updated environment %s: cluster %s, %s.\n", a, e.ClusterName, prot)
				return nil
			},
		}.command(),
		spec{
			name: "delete", usage: "delete an environment", argsUsage: shapeEnv,
			description: `Deletes an environment; what runs for it is removed from its cluster. Asks
first on a terminal; give --yes otherwise.

Example:
   nebula env delete acme/shop/staging --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnv)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete environment " + a.String() + " and remove what runs for it"); err != nil {
					return err
				}
				cs, err := cl.DeleteEnvironment(x.Context.Context, a.Org, a.Project, a.Env)
				if err != nil {
					return err
				}
				if cs != nil {
					return x.waitsForApproval(cl, "Deleting environment "+a.String(), a.Org, a.Project, cs)
				}
				x.printf("Deleted environment %s.\n", a)
				return nil
			},
		}.command(),
	)
}

// Statuses of a change that may wait in a change set (the JSON's "status").
const (
	statusDone    = "done"
	statusWaiting = "waiting-for-approval"
)

// varsOutcome is what var set prints with -o json: the same shape whether
// the variables are set or the change waits in a change set.
type varsOutcome struct {
	Status    string           `json:"status"`
	Variables []query.Variable `json:"variables"`
	ChangeSet *query.ChangeSet `json:"changeSet"`
}

// domainOutcome is what domain add prints with -o json: the same shape
// whether the host is routed or the change waits in a change set.
type domainOutcome struct {
	Status    string           `json:"status"`
	Domain    *query.Domain    `json:"domain"`
	ChangeSet *query.ChangeSet `json:"changeSet"`
}

// envUpdate is what env update prints with -o json: the same shape whether
// the change is done or waits in a change set.
type envUpdate struct {
	Status      string             `json:"status"`
	Environment *query.Environment `json:"environment"`
	ChangeSet   *query.ChangeSet   `json:"changeSet"`
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

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
				var s query.Service
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
				var s query.Service
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
				var ss []query.Service
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

func source(s query.ServiceSource) string {
	if s.Image != "" {
		return s.Image
	}
	if s.GitURL != "" {
		return s.GitURL + "#" + s.GitBranch
	}
	return "-"
}

func processes(ps []domain.Process) string {
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

// waiting is the error of a change that waits in a change set: exit code 6.
func waiting(cs *query.ChangeSet) error {
	return exitError{exitApproval, fmt.Errorf("the change waits for approval in change set %s (version %d)", cs.ID, cs.Version)}
}

// changeSetNote tells that a change waits in a change set.
func (x *cmdCtx) changeSetNote(a address, cs *query.ChangeSet) {
	env := address{Org: a.Org, Project: a.Project, Env: a.Env}
	x.printf("%s is protected: the change waits in change set %s (version %d) for someone else's review and approval:\n\n    nebula changeset show %s %s\n    nebula changeset approve %s %s --version %d\n",
		env, cs.ID, cs.Version, env, cs.ID, env, cs.ID, cs.Version)
}

func varCommand() *cli.Command {
	return group("var", "set, list and unset configuration variables",
		spec{
			name: "set", usage: "set variables of an environment or of a service in it", argsUsage: shapeEnvOrTarget + " KEY=VALUE...",
			description: `Sets variables environment-wide (ORG/PROJECT/ENV) or for one service
(ORG/PROJECT/ENV/SERVICE). A value may reference another service's variable in
the same environment: ${{ db.HOST }}. With --secret the values are sealed and
never shown again; give a single KEY without =VALUE and the value is read from
stdin (asked for without echo on a terminal), so it appears in neither the
shell history nor the process list.

Example:
   nebula var set acme/shop/production/api LOG_LEVEL=info 'DB_HOST=${{ db.HOST }}'
   nebula var set acme/shop/production/api --secret STRIPE_KEY < stripe.key`,
			flags: []cli.Flag{&cli.BoolFlag{Name: "secret", Usage: "the values are secrets: sealed, never shown"}},
			json:  true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 2 {
					return usagef("want %s KEY=VALUE..., got %d argument(s)", shapeEnvOrTarget, len(x.args))
				}
				a, err := x.address(0, shapeEnvOrTarget)
				if err != nil {
					return err
				}
				secret := x.Bool("secret")
				var vars []api.VariableInput
				kvs := x.args[1:]
				if k := kvs[0]; secret && len(kvs) == 1 && !strings.Contains(k, "=") {
					v, err := x.secretValue(k)
					if err != nil {
						return err
					}
					vars = append(vars, api.VariableInput{Name: k, Value: v, Secret: true})
				} else {
					for _, kv := range kvs {
						k, v, ok := strings.Cut(kv, "=")
						if !ok {
							hint := ""
							if len(kvs) == 1 {
								hint = " (to read a secret's value from stdin: --secret " + kv + ")"
							}
							return usagef("want KEY=VALUE, got %q%s", kv, hint)
						}
						vars = append(vars, api.VariableInput{Name: k, Value: v, Secret: secret})
					}
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var res api.VariablesResponse
				var out varsOutcome
				err = x.read(&out, func(ctx context.Context) (err error) {
					res, err = cl.SetVariables(ctx, a.Org, a.Project, a.Env, a.Service, vars)
					out = varsOutcome{Status: statusDone, Variables: res.Variables, ChangeSet: res.ChangeSet}
					if res.ChangeSet != nil {
						out.Status = statusWaiting
					}
					return
				}, func() error {
					if res.ChangeSet != nil {
						x.changeSetNote(a, res.ChangeSet)
						return nil
					}
					names := make([]string, len(vars))
					for i, v := range vars {
						names[i] = v.Name
						if v.Secret {
							names[i] += " (secret)"
						}
					}
					x.printf("Set %s on %s.\n", strings.Join(names, ", "), a)
					return nil
				})
				if err == nil && res.ChangeSet != nil {
					return waiting(res.ChangeSet)
				}
				return err
			},
		}.command(),
		spec{
			name: "list", usage: "list variables (secret values are never shown)", argsUsage: shapeEnvOrTarget,
			description: `Lists the environment-wide variables, or those a service sees (its own over
the environment-wide ones; SCOPE tells which). Secret values are never shown.

Example:
   nebula var list acme/shop/production/api`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeEnvOrTarget)
				if err != nil {
					return err
				}
				var vs []query.Variable
				return x.read(&vs, func(ctx context.Context) (err error) {
					vs, err = cl.Variables(ctx, a.Org, a.Project, a.Env, a.Service)
					return
				}, func() error {
					var rows [][]string
					for _, v := range vs {
						value := cell(v.Value)
						if v.Secret {
							value = "(secret)"
						}
						rows = append(rows, []string{v.Name, value, v.Scope, when(v.UpdatedAt)})
					}
					x.table("NAME\tVALUE\tSCOPE\tUPDATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "unset", usage: "unset variables", argsUsage: shapeEnvOrTarget + " KEY...",
			description: `Unsets variables environment-wide or of one service. Asks first on a terminal;
give --yes otherwise.

Example:
   nebula var unset acme/shop/production/api LOG_LEVEL DEBUG --yes`,
			nargs: -1, destructive: true,
			run: func(x *cmdCtx) error {
				if len(x.args) < 2 {
					return usagef("want %s KEY..., got %d argument(s)", shapeEnvOrTarget, len(x.args))
				}
				a, cl, err := x.addressClient(0, shapeEnvOrTarget)
				if err != nil {
					return err
				}
				if err := x.confirm("Unset " + strings.Join(x.args[1:], ", ") + " on " + a.String()); err != nil {
					return err
				}
				var cs *query.ChangeSet
				for _, k := range x.args[1:] {
					res, err := cl.UnsetVariable(x.Context.Context, a.Org, a.Project, a.Env, a.Service, k)
					if err != nil {
						return fmt.Errorf("unsetting %s: %w", k, err)
					}
					if res.ChangeSet != nil {
						cs = res.ChangeSet
						x.changeSetNote(a, res.ChangeSet)
					} else {
						x.printf("Unset %s on %s.\n", k, a)
					}
				}
				if cs != nil {
					return waiting(cs)
				}
				return nil
			},
		}.command(),
	)
}

// secretValue reads a secret's value from stdin: without echo from a
// terminal, else all of stdin without its final line break.
func (x *cmdCtx) secretValue(name string) (string, error) {
	if _, ok := x.terminal(); ok {
		return x.askSecret("Value of "+name+" (not shown): ", "")
	}
	b, err := io.ReadAll(io.LimitReader(x.reader(), maxSecretBytes+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("the value of %s on stdin is longer than %d bytes", name, maxSecretBytes)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("no value for %s on stdin", name)
	}
	return s, nil
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
				var ds []query.Domain
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
