package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/urfave/cli/v2"
)

// maxSecretBytes bounds a secret read from stdin: the API's limit of a
// variable's value.
const maxSecretBytes = 64 << 10

// varsOutcome is what var set prints with -o json: the same shape whether
// the variables are set or the change waits in a change set.
type varsOutcome struct {
	Status    string         `json:"status"`
	Variables []api.Variable `json:"variables"`
	ChangeSet *api.ChangeSet `json:"changeSet"`
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
				var vs []api.Variable
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
				var cs *api.ChangeSet
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
