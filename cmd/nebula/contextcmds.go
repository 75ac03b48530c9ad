package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/urfave/cli/v2"
)

// contextView is a stored context as nebula context list shows it: never
// its token.
type contextView struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Current  bool   `json:"current"`
	SignedIn bool   `json:"signedIn"`
}

// namedContext returns the stored contexts and checks that name is one.
func namedContext(name string) (contextsFile, error) {
	cf, err := loadContexts()
	if err != nil {
		return cf, err
	}
	if _, ok := cf.Contexts[name]; !ok {
		return cf, exitError{exitNotFound, fmt.Errorf("no context %q is stored (nebula context list)", name)}
	}
	return cf, nil
}

func contextCommand() *cli.Command {
	return group("context", "list, switch, rename and delete the stored control planes (contexts)",
		spec{
			name: "list", usage: "list the stored contexts",
			description: `Lists the control planes nebula login stored, by name; CURRENT marks the one
commands use unless --context NAME or NEBULACTRL_CONTEXT names another.
Tokens are never shown.

Example:
   nebula context list`,
			json: true, noURL: true, noContext: true, public: true, nargs: 0,
			run: func(x *cmdCtx) error {
				cf, err := loadContexts()
				if err != nil {
					return err
				}
				views := []contextView{}
				for name, c := range cf.Contexts {
					views = append(views, contextView{Name: name, URL: c.URL, Current: name == cf.Current, SignedIn: c.Token != ""})
				}
				sort.Slice(views, func(i, j int) bool { return views[i].Name < views[j].Name })
				if x.machine() {
					return x.emit(views)
				}
				var rows [][]string
				for _, v := range views {
					cur := ""
					if v.Current {
						cur = "*"
					}
					rows = append(rows, []string{cur, v.Name, v.URL, yesNo(v.SignedIn)})
				}
				x.table("CURRENT\tNAME\tURL\tSIGNED IN", rows)
				if n := os.Getenv(envContext); n != "" {
					x.warnf("nebula: %s=%s is set and wins over the current context\n", envContext, n)
				}
				return nil
			},
		}.command(),
		spec{
			name: "use", usage: "make a stored context the current one", argsUsage: "NAME",
			description: `Makes the context NAME the one the following commands use.

Example:
   nebula context use staging`,
			noURL: true, noContext: true, public: true, nargs: 1,
			run: func(x *cmdCtx) error {
				name := x.args[0]
				cf, err := namedContext(name)
				if err != nil {
					return err
				}
				cf.Current = name
				if _, err := saveContexts(cf); err != nil {
					return err
				}
				x.printf("Using the context %s (%s).\n", name, cf.Contexts[name].URL)
				return nil
			},
		}.command(),
		spec{
			name: "rename", usage: "rename a stored context", argsUsage: "NAME NEW_NAME",
			description: `Renames a context; when it is the current one it stays current.

Example:
   nebula context rename 127.0.0.1:8080 local`,
			noURL: true, noContext: true, public: true, nargs: 2,
			run: func(x *cmdCtx) error {
				from, to := x.args[0], x.args[1]
				if err := validContextName(to); err != nil {
					return err
				}
				cf, err := namedContext(from)
				if err != nil {
					return err
				}
				if _, taken := cf.Contexts[to]; taken && to != from {
					return exitError{exitConflict, fmt.Errorf("a context %q is stored already (nebula context delete %s first)", to, to)}
				}
				c := cf.Contexts[from]
				delete(cf.Contexts, from)
				cf.Contexts[to] = c
				if cf.Current == from {
					cf.Current = to
				}
				if _, err := saveContexts(cf); err != nil {
					return err
				}
				x.printf("Renamed the context %s to %s.\n", from, to)
				return nil
			},
		}.command(),
		spec{
			name: "delete", usage: "forget a stored context and its token", argsUsage: "NAME",
			description: `Forgets a context and its token here. The token itself stays valid: a session
ends with nebula logout --context NAME, an API token with nebula token
revoke. Asks first on a terminal; give --yes otherwise.

Example:
   nebula context delete staging --yes`,
			noURL: true, noContext: true, public: true, destructive: true, nargs: 1,
			run: func(x *cmdCtx) error {
				name := x.args[0]
				if _, err := namedContext(name); err != nil {
					return err
				}
				if err := x.confirm("Forget the context " + name); err != nil {
					return err
				}
				if _, err := removeContext(name); err != nil {
					return err
				}
				x.printf("Forgot the context %s.\n", name)
				return nil
			},
		}.command(),
	)
}
