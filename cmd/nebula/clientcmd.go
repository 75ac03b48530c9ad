package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/nebulactrl/nebulactrl/client"
)

// spec describes one command of the client: it becomes a *cli.Command with
// --url and --context (and -o/--json for commands that print what the API
// answers, --yes for destructive ones), whose flags may also come after the
// arguments (nebula member add acme a@b.c --role admin), which urfave/cli
// alone does not allow.
type spec struct {
	name, usage, argsUsage, description string
	flags                               []cli.Flag
	// json adds -o/--output and --json: print the API's answer as JSON or
	// YAML instead of the table or text.
	json bool
	// destructive commands ask for confirmation, or need --yes.
	destructive bool
	// public commands need no token (setup, login).
	public bool
	// noURL leaves out --url (logout works on the stored credentials).
	noURL bool
	// noContext leaves out --context (the context commands name theirs).
	noContext bool
	// nargs is the exact number of arguments; -1 is any number.
	nargs int
	run   func(x *cmdCtx) error
}

func (s spec) command() *cli.Command {
	flags := append([]cli.Flag{}, s.flags...)
	if !s.noURL {
		flags = append(flags, &cli.StringFlag{Name: "url", Usage: "the control plane's URL (overrides " + envURL + " and the stored one)"})
	}
	if !s.noContext {
		flags = append(flags, contextFlag())
	}
	if s.json {
		flags = append(flags, outputFlags()...)
	}
	if s.destructive {
		flags = append(flags, yesFlag())
	}
	return &cli.Command{
		Name: s.name, Usage: s.usage, ArgsUsage: s.argsUsage, Description: s.description, Flags: flags,
		// Without this every command gets a "help" subcommand, and
		// "nebula org create help" would print help instead of creating.
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			args, help, err := interspersed(c)
			if err != nil {
				return usagef("%v (see %s --help)", err, c.Command.HelpName)
			}
			if help {
				cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
				return nil
			}
			if s.nargs >= 0 && len(args) != s.nargs {
				return usagef("want %s, got %d argument(s) (see --help)", argsOrNothing(s.argsUsage), len(args))
			}
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if !s.json && format != outTable {
				return usagef("nebula %s prints no -o %s output", c.Command.HelpName[len(c.App.Name)+1:], format)
			}
			x := &cmdCtx{Context: c, args: args, out: c.App.Writer, errw: c.App.ErrWriter, in: c.App.Reader, public: s.public}
			err = s.run(x)
			var ae *client.Error
			if !s.public && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				err = exitError{exitForbidden, fmt.Errorf("%w (sign in again: nebula login --url %s)", err, x.url)}
			}
			return withExitCode(err)
		},
	}
}

func argsOrNothing(usage string) string {
	if usage == "" {
		return "no arguments"
	}
	return usage
}

// group is a command whose subcommands do the work (nebula project create).
// Without one it prints its help; with an unknown one it fails with exit
// code 2 and suggests the nearest (uniformUsage gives it unknownCommand).
func group(name, usage string, subs ...*cli.Command) *cli.Command {
	return &cli.Command{Name: name, Usage: usage, Subcommands: subs}
}

// unknownCommand is the action of the app and of a group: help without
// arguments, else "did you mean" and exit code 2.
func unknownCommand(c *cli.Context) error {
	if !c.Args().Present() {
		if c.Command == nil || c.Command.Name == "" {
			return cli.ShowAppHelp(c)
		}
		return cli.ShowSubcommandHelp(c)
	}
	name := c.Args().First()
	var subs []*cli.Command
	where := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		subs, where = c.Command.Subcommands, c.Command.HelpName
	} else {
		subs = c.App.Commands
	}
	msg := fmt.Sprintf("%q is not a command of %s", name, where)
	if s := suggest(subs, name); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	return usagef("%s (see %s --help)", msg, where)
}

// suggest returns the name of the command nearest to typed (by edit
// distance, or the one it begins), or "" when none is near enough.
func suggest(cmds []*cli.Command, typed string) string {
	var names []string
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		for _, n := range c.Names() {
			if n != "help" && n != "h" {
				names = append(names, n)
			}
		}
	}
	return nearest(names, typed, len(typed) >= 2, max(2, len(typed)/3))
}

// suggestFlag returns the flag nearest to typed (without dashes), written
// with its dashes, or "" when none is near enough.
func suggestFlag(flags []cli.Flag, typed string) string {
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	best := nearest(names, typed, false, max(1, len(typed)/3))
	switch {
	case best == "":
		return ""
	case len(best) == 1:
		return "-" + best
	}
	return "--" + best
}

// nearest is the name at the least edit distance from typed (the first of
// equals), "" when even that is over most; with prefixes, a name that
// begins with typed counts as distance 1.
func nearest(names []string, typed string, prefixes bool, most int) string {
	typed = strings.ToLower(typed)
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(typed, n)
		if prefixes && strings.HasPrefix(n, typed) {
			d = 1
		}
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > most {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, a transposition of
// two neighbours counting once.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// interspersed parses the flags that follow the arguments, which urfave/cli
// left among them, and returns the arguments alone. Everything after "--"
// is an argument.
func interspersed(c *cli.Context) (args []string, help bool, err error) {
	raw := c.Args().Slice()
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		if a == "--" {
			return append(args, raw[i+1:]...), false, nil
		}
		if len(a) < 2 || a[0] != '-' {
			args = append(args, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name == "help" || name == "h" {
			return nil, true, nil
		}
		f := findFlag(c.Command.Flags, name)
		if f == nil {
			if s := suggestFlag(c.Command.Flags, name); s != "" {
				return nil, false, fmt.Errorf("flag provided but not defined: %s; did you mean %s?", a, s)
			}
			return nil, false, fmt.Errorf("flag provided but not defined: %s", a)
		}
		if !hasValue {
			if _, isBool := f.(*cli.BoolFlag); isBool {
				value = "true"
			} else {
				if i+1 >= len(raw) {
					return nil, false, fmt.Errorf("flag needs an argument: %s", a)
				}
				i++
				value = raw[i]
			}
		}
		// Every name of the flag, so that -o json reads as --output json
		// (a slice flag's names share one value: set it once).
		names := f.Names()
		if _, slice := f.(*cli.StringSliceFlag); slice {
			names = names[:1]
		}
		for _, n := range names {
			if err := c.Set(n, value); err != nil {
				return nil, false, fmt.Errorf("invalid value %q for flag %s: %v", value, a, err)
			}
		}
	}
	return args, false, nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// timeNow is the clock of the client's commands.
var timeNow = time.Now

// cmdCtx is what a client command runs with.
type cmdCtx struct {
	*cli.Context
	args   []string
	in     io.Reader
	out    io.Writer
	errw   io.Writer
	public bool
	url    string
	stdin  *bufio.Reader
}

// client returns a client of the effective control plane with the effective
// token; commands that need one fail here when there is none.
func (x *cmdCtx) client() (*client.Client, error) {
	url, token, _, err := effective(x.String("url"), lineageString(x.Context, "context"))
	if err != nil {
		return nil, err
	}
	x.url = url
	if token == "" && !x.public {
		return nil, exitError{exitForbidden, fmt.Errorf("not signed in to %s: run nebula login --url %s (or set %s)", url, url, envToken)}
	}
	return client.New(url, token, client.WithVersion(version))
}

// address parses argument i.
func (x *cmdCtx) address(i int, shape string) (address, error) {
	a, err := parseAddress(x.args[i], shape)
	if err != nil {
		return a, exitError{exitUsage, err}
	}
	return a, nil
}

// addressClient parses argument i and returns the client that reaches it:
// what nearly every command does first.
func (x *cmdCtx) addressClient(i int, shape string) (address, *client.Client, error) {
	a, err := x.address(i, shape)
	if err != nil {
		return a, nil, err
	}
	cl, err := x.client()
	return a, cl, err
}

// read calls the API, which fills *out, and prints *out in the output
// format (-o json, yaml, jsonl) or, through human, as text for people.
func (x *cmdCtx) read(out any, call func(ctx context.Context) error, human func() error) error {
	if err := call(x.Context.Context); err != nil {
		return err
	}
	if x.machine() {
		return x.emit(out)
	}
	return human()
}

// writeJSON prints the API's JSON, indented.
func writeJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := buf.WriteTo(w)
	return err
}

// printf writes to stdout.
func (x *cmdCtx) printf(format string, args ...any) { fmt.Fprintf(x.out, format, args...) }

// warnf writes to stderr.
func (x *cmdCtx) warnf(format string, args ...any) { fmt.Fprintf(x.errw, format, args...) }

// table prints aligned columns; header's columns are tab-separated.
func (x *cmdCtx) table(header string, rows [][]string) {
	w := tabwriter.NewWriter(x.out, 0, 4, 2, ' ', 0)
	if header != "" {
		fmt.Fprintln(w, header)
	}
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	w.Flush()
}

// cell makes a value safe for one table cell: no tabs or line breaks.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", `\t`, "\n", `\n`, "\r", `\r`).Replace(s)
}

// terminal returns the file descriptor of stdin when it is a terminal.
func (x *cmdCtx) terminal() (int, bool) {
	f, ok := x.in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

func (x *cmdCtx) reader() *bufio.Reader {
	if x.stdin == nil {
		x.stdin = bufio.NewReader(x.in)
	}
	return x.stdin
}

// line reads one line of stdin, without its line break.
func (x *cmdCtx) line() (string, error) {
	s, err := x.reader().ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && s != "") {
		if errors.Is(err, io.EOF) {
			return "", errors.New("stdin ended before a line was read")
		}
		return "", err
	}
	return strings.TrimRight(s, "\r\n"), nil
}

// ask prompts on stderr and reads a line.
func (x *cmdCtx) ask(prompt string) (string, error) {
	x.warnf("%s", prompt)
	return x.line()
}

// askSecret prompts on stderr and reads a line without echo; it needs a terminal.
func (x *cmdCtx) askSecret(prompt, instead string) (string, error) {
	fd, ok := x.terminal()
	if !ok {
		return "", fmt.Errorf("stdin is not a terminal to ask for it on: %s", instead)
	}
	x.warnf("%s", prompt)
	b, err := term.ReadPassword(fd)
	x.warnf("\n")
	return string(b), err
}

// parseWhen reads a point in time: RFC 3339, a date, or a duration back from now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02", s, time.Local); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want RFC 3339 (2026-11-30T12:00:00Z), a date (2026-11-30) or a duration back from now (90m)", s)
}
