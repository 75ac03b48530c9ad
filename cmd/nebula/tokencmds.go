package main

import (
	"context"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

func joinScopes(s []string) string {
	if len(s) == 0 {
		return "(none)"
	}
	if len(s) == len(domain.Scopes) && !slices.ContainsFunc(domain.Scopes, func(d domain.Scope) bool { return !slices.Contains(s, string(d)) }) {
		return "(all)"
	}
	return strings.Join(s, ",")
}

func tokenCommand() *cli.Command {
	return group("token", "manage your API tokens",
		spec{
			name: "create", usage: "create an API token with scopes", argsUsage: "NAME",
			description: `Creates an API token of yours that carries only the given scopes (and never
more than the token in use). Its secret is printed once.

Scopes: projects:read, projects:write, deployments:write, approvals:write,
servers:read, servers:write, audit:read, members:write, tokens:write,
builds:read, builds:write, webhooks:write, instance:admin.

Example:
   nebula token create ci --scope projects:read --scope deployments:write --expires-in-days 90`,
			flags: []cli.Flag{
				&cli.StringSliceFlag{Name: "scope", Usage: "a scope the token carries (repeat, or separate with commas)"},
				&cli.IntFlag{Name: "expires-in-days", Usage: "the token expires after this many days (1-3650); never when absent"},
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				if len(x.StringSlice("scope")) == 0 {
					return usagef("give the token at least one --scope")
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				var t api.CreatedToken
				return x.read(&t, func(ctx context.Context) (err error) {
					t, err = cl.CreateToken(ctx, api.CreateTokenRequest{Name: x.args[0], Scopes: x.StringSlice("scope"), ExpiresInDays: x.Int("expires-in-days")})
					return
				}, func() error {
					x.printf("Created API token %s (id %s) with scopes %s", t.Name, t.ID, joinScopes(t.Scopes))
					if t.ExpiresAt != nil {
						x.printf(", expiring %s", at(*t.ExpiresAt))
					}
					x.printf(".\n\nThe token, shown only this once (keep it somewhere safe):\n\n    %s\n", t.Secret)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list your API tokens and sessions",
			description: `Lists your API tokens and sessions (never their secrets), the ones in force first.

Example:
   nebula token list`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var toks []api.Token
				return x.read(&toks, func(ctx context.Context) (err error) { toks, err = cl.Tokens(ctx); return }, func() error {
					var rows [][]string
					for _, t := range toks {
						status := "active"
						switch {
						case t.RevokedAt != nil:
							status = "revoked"
						case t.ExpiresAt != nil && t.ExpiresAt.Before(timeNow()):
							status = "expired"
						}
						scopes := joinScopes(t.Scopes)
						if t.Session {
							scopes = "(session)"
						}
						rows = append(rows, []string{t.ID, t.Name, scopes, when(t.CreatedAt), whenPtr(t.ExpiresAt), status})
					}
					x.table("ID\tNAME\tSCOPES\tCREATED\tEXPIRES\tSTATUS", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "revoke", usage: "revoke one of your API tokens or sessions", argsUsage: "TOKEN_ID",
			description: `Revokes a token by id (nebula token list shows the ids); it stops working at
once. Asks first on a terminal; give --yes otherwise.

Example:
   nebula token revoke 0b6f9d1e-8a55-4a57-9d36-0f2c2f0c9c1a --yes`,
			nargs: 1, destructive: true,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				if err := x.confirm("Revoke token " + x.args[0]); err != nil {
					return err
				}
				if err := cl.RevokeToken(x.Context.Context, x.args[0]); err != nil {
					return err
				}
				x.printf("Revoked token %s.\n", x.args[0])
				return nil
			},
		}.command(),
	)
}

func settingsCommand() *cli.Command {
	show := func(x *cmdCtx, s api.InstanceSettings) error {
		on := "off"
		if s.AgentAutoUpgrade {
			on = "on"
		}
		x.printf("agent auto-upgrade: %s\n", on)
		return nil
	}
	return group("settings", "read and change the instance settings (instance administrator)",
		spec{
			name: "get", usage: "show the instance settings",
			description: `Shows the settings of the whole installation.

Example:
   nebula settings get`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var s api.InstanceSettings
				return x.read(&s, func(ctx context.Context) (err error) { s, err = cl.Settings(ctx); return }, func() error { return show(x, s) })
			},
		}.command(),
		spec{
			name: "set", usage: "change the instance settings",
			description: `Changes the settings of the whole installation.

Example:
   nebula settings set --agent-auto-upgrade=false`,
			flags: []cli.Flag{&cli.BoolFlag{Name: "agent-auto-upgrade", Usage: "whether agents upgrade themselves to the control plane's version"}},
			json:  true, nargs: 0,
			run: func(x *cmdCtx) error {
				if !x.IsSet("agent-auto-upgrade") {
					return usagef("nothing to set: give --agent-auto-upgrade=true or --agent-auto-upgrade=false")
				}
				cl, err := x.client()
				if err != nil {
					return err
				}
				v := x.Bool("agent-auto-upgrade")
				var s api.InstanceSettings
				return x.read(&s, func(ctx context.Context) (err error) {
					s, err = cl.UpdateSettings(ctx, api.SettingsRequest{AgentAutoUpgrade: &v})
					return
				}, func() error { return show(x, s) })
			},
		}.command(),
	)
}

func userCommand() *cli.Command {
	return group("user", "create and list users (instance administrator)",
		spec{
			name: "create", usage: "create a user, who can then be added to organisations", argsUsage: "EMAIL",
			description: `Creates a user account. The password is asked for twice on the terminal, or
read from one line of stdin with --password-stdin. Add the user to an
organisation with nebula member add.

Example:
   nebula user create grace@example.com --name "Grace Hopper"
   nebula member add acme grace@example.com --role admin`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "name", Usage: "the user's name"},
				&cli.BoolFlag{Name: "admin", Usage: "make the user an instance administrator too"},
				passwordStdinFlag(),
			},
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				pw, err := x.newPassword()
				if err != nil {
					return err
				}
				var u api.User
				return x.read(&u, func(ctx context.Context) (err error) {
					u, err = cl.CreateUser(ctx, api.CreateUserRequest{Email: x.args[0], Name: x.String("name"), Password: pw, InstanceAdmin: x.Bool("admin")})
					return
				}, func() error {
					x.printf("Created user %s (id %s).\n", u.Email, u.ID)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list every user",
			description: `Lists every user of the installation.

Example:
   nebula user list`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var us []api.User
				return x.read(&us, func(ctx context.Context) (err error) { us, err = cl.Users(ctx); return }, func() error {
					var rows [][]string
					for _, u := range us {
						admin := "no"
						if u.InstanceAdmin {
							admin = "yes"
						}
						rows = append(rows, []string{u.Email, cell(u.Name), u.ID, admin, when(u.CreatedAt)})
					}
					x.table("EMAIL\tNAME\tID\tINSTANCE ADMIN\tCREATED", rows)
					return nil
				})
			},
		}.command(),
	)
}
