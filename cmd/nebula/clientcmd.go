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
// --url (and --json for commands that print what the API answers), whose
// flags may also come after the arguments (nebula member add acme a@b.c
// --role admin), which urfave/cli alone does not allow.
type spec struct {
	name, usage, argsUsage, description string
	flags                               []cli.Flag
	// json adds --json: print the API's JSON instead of the table or text.
	json bool
	// public commands need no token (setup, login).
	public bool
	// noURL leaves out --url (logout works on the stored credentials).
	noURL bool
	// nargs is the exact number of arguments; -1 is any number.
	nargs int
	run   func(x *cmdCtx) error
}

func (s spec) command() *cli.Command {
	flags := append([]cli.Flag{}, s.flags...)
	if !s.noURL {
		flags = append(flags, &cli.StringFlag{Name: "url", Usage: "the control plane's URL (overrides " + envURL + " and the stored one)"})
	}
	if s.json {
		flags = append(flags, &cli.BoolFlag{Name: "json", Usage: "print the API's JSON"})
	}
	return &cli.Command{
		Name: s.name, Usage: s.usage, ArgsUsage: s.argsUsage, Description: s.description, Flags: flags,
		// Without this every command gets a "help" subcommand, and
		// "nebula org create help" would print help instead of creating.
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			args, help, err := interspersed(c)
			if err != nil {
				return err
			}
			if help {
				cli.HelpPrinter(c.App.Writer, cli.CommandHelpTemplate, c.Command)
				return nil
			}
			if s.nargs >= 0 && len(args) != s.nargs {
				return fmt.Errorf("want %s, got %d argument(s) (see --help)", argsOrNothing(s.argsUsage), len(args))
			}
			x := &cmdCtx{Context: c, args: args, out: c.App.Writer, errw: c.App.ErrWriter, in: c.App.Reader, public: s.public}
			err = s.run(x)
			var ae *client.Error
			if !s.public && errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
				return fmt.Errorf("%w (sign in again: nebula login --url %s)", err, x.url)
			}
			return err
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
func group(name, usage string, subs ...*cli.Command) *cli.Command {
	return &cli.Command{Name: name, Usage: usage, Subcommands: subs}
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
		if err := c.Set(name, value); err != nil {
			return nil, false, fmt.Errorf("invalid value %q for flag %s: %v", value, a, err)
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
	url, token, err := effective(x.String("url"))
	if err != nil {
		return nil, err
	}
	x.url = url
	if token == "" && !x.public {
		return nil, fmt.Errorf("not signed in to %s: run nebula login --url %s (or set %s)", url, url, envToken)
	}
	return client.New(url, token, client.WithVersion(version))
}

// address parses argument i.
func (x *cmdCtx) address(i int, shape string) (address, error) {
	return parseAddress(x.args[i], shape)
}

// read calls the API and prints either the API's JSON (--json) or, through
// human, text for people.
func (x *cmdCtx) read(call func(ctx context.Context) error, human func() error) error {
	var raw []byte
	if err := call(client.CaptureBody(x.Context.Context, &raw)); err != nil {
		return err
	}
	if x.Bool("json") {
		return writeJSON(x.out, raw)
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

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t)
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
