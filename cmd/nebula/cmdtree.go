package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/urfave/cli/v2"
)

// zeroDefault is the "(default: 0)" urfave/cli appends to a flag whose zero
// value means "not given"; usages say what that means themselves.
var zeroDefault = regexp.MustCompile(` \(default: (0|0s|false|"")\)`)

func init() {
	stringify := cli.FlagStringer
	cli.FlagStringer = func(f cli.Flag) string {
		return zeroDefault.ReplaceAllString(stringify(f), "")
	}
}

// buildHook is told of the app run builds (the tests walk its commands).
var buildHook func(*cli.App)

// uniformUsage makes every command of the app answer a wrong command line
// the same way: a flag error or an unknown subcommand exits with code 2 and
// says what would have been right.
func uniformUsage(app *cli.App) {
	if buildHook != nil {
		buildHook(app)
	}
	app.OnUsageError = onUsageError(nil)
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = onUsageError(c)
			if len(c.Subcommands) > 0 && c.Action == nil {
				c.Action = unknownCommand
				if c.UsageText == "" {
					c.UsageText = prefix + " " + c.Name + " command [command options] [arguments...]"
				}
			}
			walk(prefix+" "+c.Name, c.Subcommands)
		}
	}
	walk(app.Name, app.Commands)
}

func onUsageError(cmd *cli.Command) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		flags, where := c.App.Flags, c.App.Name
		if cmd != nil {
			flags, where = cmd.Flags, "nebula "+commandPath(c, cmd)
		}
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			if s := suggestFlag(flags, strings.TrimLeft(name, "-")); s != "" {
				msg += fmt.Sprintf("; did you mean %s?", s)
			}
		}
		return usagef("%s (see %s --help)", msg, where)
	}
}

// commandPath is a command's name with its parents' (project list).
func commandPath(c *cli.Context, cmd *cli.Command) string {
	if cmd.HelpName != "" {
		return strings.TrimPrefix(cmd.HelpName, c.App.Name+" ")
	}
	return cmd.Name
}
