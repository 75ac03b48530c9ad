package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
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
