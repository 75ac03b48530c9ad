package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	"sigs.k8s.io/yaml"

	"github.com/nebulactrl/nebulactrl/client"
)

// Output formats of -o/--output.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
	outJSONL = "jsonl"
)

// Exit codes, the same on every command (docs/cli.md). Following a
// deployment (deploy --wait, rollback --wait, deployments watch) gives 3, 4
// and 5 the deployment's meanings as well: see exitCodesHelp in watch.go.
const (
	exitFailure   = 1
	exitUsage     = 2
	exitNotFound  = 3
	exitForbidden = 4
	exitConflict  = 5
	// exitApproval (6, watch.go): the change waits for approval.
)

// usagef is an error in the command line: exit code 2.
func usagef(format string, args ...any) error {
	return exitError{exitUsage, fmt.Errorf(format, args...)}
}

// exitCode is the exit code an error ends the command with: its own when it
// carries one, else the API error's by HTTP status, else 1.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	var ae *client.Error
	if errors.As(err, &ae) {
		switch ae.Status {
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			return exitUsage
		case http.StatusUnauthorized, http.StatusForbidden:
			return exitForbidden
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusConflict, http.StatusPreconditionFailed:
			return exitConflict
		}
	}
	return exitFailure
}

// withExitCode gives an error the exit code exitCode finds for it, so that
// it survives wrapping in messages.
func withExitCode(err error) error {
	if err == nil {
		return nil
	}
	var ee exitError
	if errors.As(err, &ee) {
		return err
	}
	return exitError{exitCode(err), err}
}

// outputFlags are -o/--output and --json. They are global flags of the app
// and flags of every command that prints what the API answers, so that they
// go anywhere on the line.
func outputFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "print as table (for people), json, yaml, or jsonl (one JSON value per line)", DefaultText: outTable},
		&cli.BoolFlag{Name: "json", Usage: "the same as -o json"},
	}
}

// contextFlag is --context, global and on every command that talks to a
// control plane.
func contextFlag() cli.Flag {
	return &cli.StringFlag{Name: "context", Usage: "the stored control plane to use (nebula context list; default: " + envContext + ", else the current one)"}
}

// yesFlag is --yes, which confirms a destructive command without asking.
func yesFlag() cli.Flag {
	return &cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do it without asking (needed when stdin is not a terminal)"}
}

// aliases are the short names of the flags read through the lineage.
var aliases = map[string]string{"output": "o", "yes": "y"}

// setHere reports whether flag name (or its short name) was given on ctx's
// own part of the line.
func setHere(ctx *cli.Context, name string) bool {
	for _, n := range ctx.LocalFlagNames() {
		if n == name || (aliases[name] != "" && n == aliases[name]) {
			return true
		}
	}
	return false
}

// lineageString returns the value of a string flag from the innermost
// command that was given it (a command's own flag over the global one).
func lineageString(c *cli.Context, name string) string {
	for _, ctx := range c.Lineage() {
		if ctx != nil && setHere(ctx, name) {
			return ctx.String(name)
		}
	}
	return ""
}

// lineageBool is lineageString for a boolean flag.
func lineageBool(c *cli.Context, name string) bool {
	for _, ctx := range c.Lineage() {
		if ctx != nil && setHere(ctx, name) {
			return ctx.Bool(name)
		}
	}
	return false
}

// outputFormat is the effective output format: table unless -o or --json
// says otherwise anywhere on the line.
func outputFormat(c *cli.Context) (string, error) {
	o := strings.ToLower(strings.TrimSpace(lineageString(c, "output")))
	if lineageBool(c, "json") {
		if o != "" && o != outJSON {
			return "", usagef("--json is -o json: it does not go with -o %s", o)
		}
		return outJSON, nil
	}
	switch o {
	case "", outTable, "wide":
		return outTable, nil
	case outJSON, outYAML, outJSONL:
		return o, nil
	}
	return "", usagef("-o %s: want table, json, yaml or jsonl", o)
}

// format is the command's output format (checked before it ran).
func (x *cmdCtx) format() string {
	f, err := outputFormat(x.Context)
	if err != nil {
		return outTable
	}
	return f
}

// machine reports whether the output is for programs (json, yaml, jsonl).
func (x *cmdCtx) machine() bool { return x.format() != outTable }

// emit prints v in the output format; lists are arrays (never null), and
// -o jsonl prints a list one element per line.
func (x *cmdCtx) emit(v any) error {
	return emitTo(x.out, x.format(), v)
}

func emitTo(w io.Writer, format string, v any) error {
	v = nonNil(v)
	switch format {
	case outJSONL:
		rv := reflect.ValueOf(v)
		if rv.Kind() == reflect.Slice {
			for i := 0; i < rv.Len(); i++ {
				b, err := json.Marshal(rv.Index(i).Interface())
				if err != nil {
					return err
				}
				if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
					return err
				}
			}
			return nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case outYAML:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	default:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
}

// emitRaw prints JSON as it came (the API's document) in the output format.
func (x *cmdCtx) emitRaw(raw []byte) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("null")
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return err
	}
	if x.format() == outJSON || x.format() == outTable {
		return writeJSON(x.out, raw)
	}
	return x.emit(v)
}

// nonNil turns a nil slice (or a pointer to one) into an empty one, so a
// list is printed as [] and never as null.
func nonNil(v any) any {
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return v
	}
	if rv.Kind() == reflect.Slice && rv.IsNil() {
		return reflect.MakeSlice(rv.Type(), 0, 0).Interface()
	}
	return rv.Interface()
}

// stdinIsTerminal reports whether a destructive command may ask on stdin
// (tests fake it).
var stdinIsTerminal = func(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// confirm asks before a destructive change: --yes confirms; on a terminal
// the user answers y or yes; otherwise it refuses with exit code 2, since a
// script must say --yes.
func (x *cmdCtx) confirm(what string) error {
	if lineageBool(x.Context, "yes") {
		return nil
	}
	if !stdinIsTerminal(x.in) {
		return usagef("%s needs confirmation, and stdin is not a terminal to ask on: give --yes", what)
	}
	answer, err := x.ask(what + "? [y/N] ")
	if err != nil {
		return err
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return exitError{exitFailure, errors.New("not confirmed: nothing was changed")}
}

// when writes a time for a table: how long ago (or how far ahead) it is.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return relative(timeNow().Sub(t))
}

func whenPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t)
}

// at writes a time in a sentence: RFC 3339 with the local zone.
func at(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// relative writes d back from now ("3 min ago"); a negative d is ahead ("in 2 h").
func relative(d time.Duration) string {
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}
