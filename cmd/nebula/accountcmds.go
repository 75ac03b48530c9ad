package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/query"
)

// password reads a new password: one line of stdin with --password-stdin,
// else twice from the terminal.
func (x *cmdCtx) newPassword() (string, error) {
	if x.Bool("password-stdin") {
		return x.line()
	}
	const instead = "pipe it in with --password-stdin"
	pw, err := x.askSecret("Password (at least 12 characters): ", instead)
	if err != nil {
		return "", err
	}
	again, err := x.askSecret("The same password again: ", instead)
	if err != nil {
		return "", err
	}
	if pw != again {
		return "", errors.New("the two passwords differ")
	}
	return pw, nil
}

func passwordStdinFlag() cli.Flag {
	return &cli.BoolFlag{Name: "password-stdin", Usage: "read the password from one line of stdin instead of asking for it"}
}

func setupCommand() *cli.Command {
	return spec{
		name: "setup", usage: "create the first user (the instance administrator) and organisation of a new control plane",
		description: `Creates the first user, who becomes the instance administrator, and the first
organisation, and prints the user's API token once. The token is also stored
like nebula login stores one, so the following commands use it. Refused once
the control plane has any user. The password is asked for twice on the
terminal, or read from one line of stdin with --password-stdin.

Example:
   nebula setup --url https://nebula.example.com --email ada@example.com --org acme
   printf '%s\n' "$PASSWORD" | nebula setup --url http://127.0.0.1:8080 --email ada@example.com --org acme --password-stdin`,
		flags: []cli.Flag{
			&cli.StringFlag{Name: "email", Usage: "the administrator's e-mail address (required)"},
			&cli.StringFlag{Name: "org", Usage: "the first organisation's name (required)"},
			&cli.StringFlag{Name: "name", Usage: "the administrator's name"},
			passwordStdinFlag(),
		},
		json: true, public: true, nargs: 0,
		run: func(x *cmdCtx) error {
			if x.String("email") == "" || x.String("org") == "" {
				return usagef("setup needs --email and --org")
			}
			cl, err := x.client()
			if err != nil {
				return err
			}
			pw, err := x.newPassword()
			if err != nil {
				return err
			}
			var raw []byte
			res, err := cl.Setup(client.CaptureBody(x.Context.Context, &raw), api.SetupRequest{
				Email: x.String("email"), Name: x.String("name"), Password: pw, Organisation: x.String("org")})
			if err != nil {
				return err
			}
			ctxName := firstNonEmpty(lineageString(x.Context, "context"), contextName(cl.URL()))
			path, saveErr := "", validContextName(ctxName)
			if saveErr == nil {
				path, saveErr = saveCredentials(ctxName, credentials{URL: cl.URL(), Token: res.Token})
			}
			if x.machine() {
				if err := x.emitRaw(raw); err != nil {
					return err
				}
			} else {
				x.printf("NebulaCtrl at %s is set up: %s is its instance administrator and owns the organisation %s.\n\n",
					cl.URL(), res.User.Email, res.Organisation.Name)
				x.printf("Your API token, shown only this once (keep it somewhere safe):\n\n    %s\n\n", res.Token)
				if saveErr == nil {
					x.printf("It is stored in %s as the context %s, so nebula commands here use it already:\n\n    nebula whoami\n\n", path, ctxName)
				}
				x.printf("Elsewhere (CI, another machine), give it in the environment:\n\n    export %s=%s\n    export %s=<the token>\n",
					envURL, cl.URL(), envToken)
			}
			if saveErr != nil {
				return fmt.Errorf("the control plane is set up, but storing the token failed (it is printed above): %w", saveErr)
			}
			return nil
		},
	}.command()
}

func loginCommand() *cli.Command {
	return spec{
		name: "login", usage: "sign in to a control plane and store the token for the following commands",
		description: `With --token (or --token-stdin) stores an API token after checking it. Without,
asks for e-mail address and password, opens a session (which expires) and
stores its token. The URL and token are kept as a named context (--context
NAME; by default the host, such as nebula.example.com) in
$XDG_CONFIG_HOME/nebulactrl/credentials.json (mode 0600), which becomes the
current one; nebula context list|use switches between control planes.
NEBULACTRL_URL and NEBULACTRL_TOKEN override the stored ones, and --url
overrides everything.

Example:
   nebula login --url https://nebula.example.com
   nebula login --url https://staging.nebula.example.com --context staging
   nebula login --url https://nebula.example.com --token nbl_...
   printf '%s\n' "$PASSWORD" | nebula login --url https://nebula.example.com --email ada@example.com --password-stdin`,
		flags: []cli.Flag{
			&cli.StringFlag{Name: "token", Usage: "an API token to use (it shows in the shell history; --token-stdin does not)"},
			&cli.BoolFlag{Name: "token-stdin", Usage: "read the API token from one line of stdin"},
			&cli.StringFlag{Name: "email", Usage: "the e-mail address to sign in with (asked for when absent)"},
			passwordStdinFlag(),
		},
		public: true, nargs: 0,
		run: func(x *cmdCtx) error {
			ctxName := strings.TrimSpace(lineageString(x.Context, "context"))
			url := firstNonEmpty(x.String("url"), os.Getenv(envURL))
			if url == "" && ctxName != "" {
				// Signing in again to a stored context.
				if u, _, _, err := effective("", ctxName); err == nil {
					url = u
				}
			}
			if url == "" {
				return usagef("login needs --url URL (or %s)", envURL)
			}
			url, err := client.NormalizeURL(url)
			if err != nil {
				return exitError{exitUsage, err}
			}
			if ctxName == "" {
				ctxName = contextName(url)
			}
			if err := validContextName(ctxName); err != nil {
				return err
			}
			token := strings.TrimSpace(x.String("token"))
			if x.Bool("token-stdin") {
				if token, err = x.line(); err != nil {
					return err
				}
				token = strings.TrimSpace(token)
			}
			if token != "" {
				cl, err := client.New(url, token, client.WithVersion(version))
				if err != nil {
					return err
				}
				me, err := cl.Me(x.Context.Context)
				if err != nil {
					return fmt.Errorf("the token does not work at %s: %w", url, err)
				}
				path, err := saveCredentials(ctxName, credentials{URL: url, Token: token})
				if err != nil {
					return err
				}
				x.printf("Signed in to %s as %s with the token; it is stored in %s as the context %s.\n", url, me.User.Email, path, ctxName)
				return nil
			}
			email := x.String("email")
			if email == "" {
				if email, err = x.ask("E-mail address: "); err != nil {
					return err
				}
			}
			var pw string
			if x.Bool("password-stdin") {
				pw, err = x.line()
			} else {
				pw, err = x.askSecret("Password: ", "pipe the password in with --password-stdin, or give --token")
			}
			if err != nil {
				return err
			}
			cl, err := client.New(url, "", client.WithVersion(version))
			if err != nil {
				return err
			}
			sess, err := cl.Login(x.Context.Context, strings.TrimSpace(email), pw)
			if err != nil {
				return err
			}
			path, err := saveCredentials(ctxName, credentials{URL: url, Token: sess.Token})
			if err != nil {
				return err
			}
			x.printf("Signed in to %s as %s until %s; the session token is stored in %s as the context %s.\n", url, sess.User.Email, at(sess.ExpiresAt), path, ctxName)
			return nil
		},
	}.command()
}

func logoutCommand() *cli.Command {
	return spec{
		name: "logout", usage: "forget the stored token (and end it when it is a session)",
		description: `Removes the stored credentials of the current context (or of --context NAME).
A session token (from nebula login with e-mail and password) is revoked at the
control plane as well; an API token is only forgotten here, since it may be in
use elsewhere (revoke it with nebula token revoke).

Example:
   nebula logout
   nebula logout --context staging`,
		public: true, noURL: true, nargs: 0,
		run: func(x *cmdCtx) error {
			cf, err := loadContexts()
			if err != nil {
				return err
			}
			name := firstNonEmpty(lineageString(x.Context, "context"), os.Getenv(envContext), cf.Current)
			stored, known := cf.Contexts[name]
			if name != "" && !known && name != cf.Current {
				return exitError{exitNotFound, fmt.Errorf("no context %q is stored (nebula context list)", name)}
			}
			if stored.Token == "" {
				x.printf("Not signed in: there are no stored credentials.\n")
			} else {
				revoked := false
				if cl, err := client.New(stored.URL, stored.Token, client.WithVersion(version)); err == nil {
					me, err := cl.Me(x.Context.Context)
					switch {
					case client.IsStatus(err, http.StatusUnauthorized):
						// Expired or revoked already: nothing to end.
					case err != nil:
						x.warnf("nebula: could not end the session at %s (%v); it expires by itself\n", stored.URL, err)
					case me.Scopes == nil:
						if err := cl.Logout(x.Context.Context); err != nil && !client.IsStatus(err, http.StatusUnauthorized) {
							x.warnf("nebula: could not end the session at %s (%v); it expires by itself\n", stored.URL, err)
						} else {
							revoked = err == nil
						}
					}
				}
				if _, err := removeContext(name); err != nil {
					return err
				}
				if revoked {
					x.printf("Signed out of %s: the session is ended and the stored credentials are removed.\n", stored.URL)
				} else {
					x.printf("Signed out of %s: the stored credentials are removed.\n", stored.URL)
				}
			}
			if os.Getenv(envToken) != "" {
				x.warnf("nebula: %s is still set in the environment and is still used\n", envToken)
			}
			return nil
		},
	}.command()
}

func whoamiCommand() *cli.Command {
	return spec{
		name: "whoami", usage: "show who the token in use belongs to",
		description: `Prints the user, the control plane, whether a session or an API token (and
its scopes) is in use, and the user's organisations with the user's role.

Example:
   nebula whoami
   nebula whoami --json`,
		json: true, nargs: 0,
		run: func(x *cmdCtx) error {
			cl, err := x.client()
			if err != nil {
				return err
			}
			var me api.MeResponse
			return x.read(&me, func(ctx context.Context) (err error) { me, err = cl.Me(ctx); return }, func() error {
				name := me.User.Email
				if me.User.Name != "" {
					name += " (" + me.User.Name + ")"
				}
				x.printf("%s at %s\n", name, cl.URL())
				x.printf("user id: %s\n", me.User.ID)
				if me.User.InstanceAdmin {
					x.printf("instance administrator: yes\n")
				}
				if me.Scopes == nil {
					x.printf("signed in with: a session\n")
				} else {
					x.printf("signed in with: an API token with scopes %s\n", joinScopes(me.Scopes))
				}
				if len(me.Organisations) == 0 {
					x.printf("organisations: none\n")
					return nil
				}
				x.printf("\n")
				var rows [][]string
				for _, o := range me.Organisations {
					rows = append(rows, []string{o.Name, string(o.Role)})
				}
				x.table("ORGANISATION\tROLE", rows)
				return nil
			})
		},
	}.command()
}

func joinScopes(s []domain.Scope) string {
	if len(s) == 0 {
		return "(none)"
	}
	if len(s) == len(domain.Scopes) && !slices.ContainsFunc(domain.Scopes, func(d domain.Scope) bool { return !slices.Contains(s, d) }) {
		return "(all)"
	}
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return strings.Join(out, ",")
}

func orgCommand() *cli.Command {
	return group("org", "create and list organisations",
		spec{
			name: "create", usage: "create an organisation you own", argsUsage: "ORG",
			description: `Creates an organisation; you become its owner.

Example:
   nebula org create acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var o query.Organisation
				return x.read(&o, func(ctx context.Context) (err error) { o, err = cl.CreateOrganisation(ctx, a.Org); return }, func() error {
					x.printf("Created organisation %s; you own it.\n", o.Name)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list your organisations",
			description: `Lists the organisations you are a member of, with your role.

Example:
   nebula org list`,
			json: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cl, err := x.client()
				if err != nil {
					return err
				}
				var orgs []query.Organisation
				return x.read(&orgs, func(ctx context.Context) (err error) { orgs, err = cl.Organisations(ctx); return }, func() error {
					var rows [][]string
					for _, o := range orgs {
						rows = append(rows, []string{o.Name, string(o.Role), when(o.CreatedAt)})
					}
					x.table("NAME\tROLE\tCREATED", rows)
					return nil
				})
			},
		}.command(),
	)
}

func memberCommand() *cli.Command {
	return group("member", "manage the members of an organisation",
		spec{
			name: "add", usage: "add a user to an organisation with a role", argsUsage: "ORG EMAIL",
			description: `Adds an existing user, by e-mail address, with a role: owner, admin, member or
viewer (only an owner makes owners). The instance administrator creates users
with nebula user create.

Example:
   nebula member add acme grace@example.com --role admin`,
			flags: []cli.Flag{&cli.StringFlag{Name: "role", Value: "member", Usage: "owner, admin, member or viewer"}},
			json:  true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var m query.Member
				err = x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.AddMember(ctx, a.Org, x.args[1], x.String("role"))
					return
				}, func() error {
					x.printf("Added %s to %s as %s.\n", m.Email, a.Org, m.Role)
					return nil
				})
				if client.IsStatus(err, http.StatusConflict) {
					return exitError{exitConflict, fmt.Errorf("%w: change the role with nebula member set-role %s %s %s", err, a.Org, x.args[1], x.String("role"))}
				}
				return err
			},
		}.command(),
		spec{
			name: "list", usage: "list the members of an organisation", argsUsage: "ORG",
			description: `Lists the members of an organisation with their roles.

Example:
   nebula member list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var ms []query.Member
				return x.read(&ms, func(ctx context.Context) (err error) { ms, err = cl.Members(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, m := range ms {
						rows = append(rows, []string{m.Email, cell(m.Name), string(m.Role), m.UserID, when(m.Since)})
					}
					x.table("EMAIL\tNAME\tROLE\tUSER ID\tSINCE", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "set-role", usage: "change a member's role", argsUsage: "ORG USER_ID|EMAIL ROLE",
			description: `Changes the role of a member, named by user id or by e-mail address, to owner,
admin, member or viewer (only an owner makes owners).

Example:
   nebula member set-role acme grace@example.com viewer`,
			json: true, nargs: 3,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				userID, err := memberID(x, cl, a.Org, x.args[1])
				if err != nil {
					return err
				}
				var m query.Member
				return x.read(&m, func(ctx context.Context) (err error) {
					m, err = cl.ChangeMemberRole(ctx, a.Org, userID, x.args[2])
					return
				}, func() error {
					x.printf("%s is now %s of %s.\n", m.Email, m.Role, a.Org)
					return nil
				})
			},
		}.command(),
		spec{
			name: "remove", usage: "remove a member from an organisation", argsUsage: "ORG USER_ID|EMAIL",
			description: `Removes a member, named by user id or by e-mail address. Asks first on a
terminal; give --yes otherwise.

Example:
   nebula member remove acme grace@example.com --yes`,
			nargs: 2, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				who := x.args[1]
				userID, err := memberID(x, cl, a.Org, who)
				if err != nil {
					return err
				}
				if err := x.confirm("Remove " + who + " from " + a.Org); err != nil {
					return err
				}
				if err := cl.RemoveMember(x.Context.Context, a.Org, userID); err != nil {
					return err
				}
				x.printf("Removed %s from %s.\n", who, a.Org)
				return nil
			},
		}.command(),
	)
}

// memberID names a member by user id, or finds the id of an e-mail address.
func memberID(x *cmdCtx, cl *client.Client, org, who string) (string, error) {
	if !strings.Contains(who, "@") {
		return who, nil
	}
	ms, err := cl.Members(x.Context.Context, org)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if strings.EqualFold(m.Email, who) {
			return m.UserID, nil
		}
	}
	return "", exitError{exitNotFound, fmt.Errorf("%s is not a member of %s", who, org)}
}

func tokenCommand() *cli.Command {
	return group("token", "manage your API tokens",
		spec{
			name: "create", usage: "create an API token with scopes", argsUsage: "NAME",
			description: `Creates an API token of yours that carries only the given scopes (and never
more than the token in use). Its secret is printed once.

Scopes: projects:read, projects:write, deployments:write, approvals:write,
servers:read, servers:write, audit:read, members:write, tokens:write,
builds:read, builds:write, instance:admin.

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
				var toks []query.Token
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
	show := func(x *cmdCtx, s query.InstanceSettings) error {
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
				var s query.InstanceSettings
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
				var s query.InstanceSettings
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
				var u query.User
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
				var us []query.User
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
