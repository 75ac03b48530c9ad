package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/client"
)

// -update rewrites the golden files under testdata/ (help and JSON shapes)
// from what the commands print now: go test ./cmd/nebula -run 'Golden|Shapes' -update
var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// commandPaths walks the app's command tree: every command's words after
// "nebula" (the app itself is the empty path).
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	app := appForTest()
	require.NotNil(t, app)
	var paths [][]string
	paths = append(paths, nil)
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			p := append(append([]string{}, prefix...), c.Name)
			paths = append(paths, p)
			walk(p, c.Subcommands)
		}
	}
	walk(nil, app.Commands)
	return paths
}

// appForTest builds the app as run does, without running it.
func appForTest() *cli.App {
	var built *cli.App
	buildHook = func(a *cli.App) { built = a }
	defer func() { buildHook = nil }()
	_ = run(context.Background(), []string{"nebula", "--version"}, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	return built
}

// TestHelpGolden checks every command's --help against
// testdata/help/<command words joined by _>.txt: a changed flag, usage or
// description shows in review, and no help shows a default twice.
func TestHelpGolden(t *testing.T) {
	paths := commandPaths(t)
	require.Greater(t, len(paths), 60, "the walk found the command tree")
	dir := filepath.Join("testdata", "help")
	if *update {
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.MkdirAll(dir, 0o755))
	}
	seen := map[string]bool{}
	for _, p := range paths {
		name := strings.Join(append([]string{"nebula"}, p...), "_") + ".txt"
		cmd := strings.Join(append([]string{"nebula"}, p...), " ")
		seen[name] = true
		var out, errb bytes.Buffer
		args := append(append([]string{"nebula"}, p...), "--help")
		err := run(t.Context(), args, strings.NewReader(""), &out, &errb)
		require.NoError(t, err, "%s --help: %s", cmd, errb.String())
		got := out.String()
		assert.NotContains(t, got, "(default: 0)", "%s --help shows a zero default", cmd)
		assert.NotRegexp(t, `\(default[^)]*\) \(default`, got, "%s --help shows a default twice", cmd)
		file := filepath.Join(dir, name)
		if *update {
			require.NoError(t, os.WriteFile(file, []byte(got), 0o644))
			continue
		}
		want, err := os.ReadFile(file)
		if !assert.NoError(t, err, "no golden help for %s: run go test ./cmd/nebula -run TestHelpGolden -update", cmd) {
			continue
		}
		assert.Equal(t, string(want), got, "%s --help changed: review it and run go test ./cmd/nebula -run TestHelpGolden -update", cmd)
	}
	if !*update {
		files, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, f := range files {
			assert.True(t, seen[f.Name()], "testdata/help/%s names no command any more: run with -update", f.Name())
		}
	}
}

func TestCompletionScripts(t *testing.T) {
	c := cliRun{t: t}
	bash := c.ok("completion", "bash")
	require.Contains(t, bash, "complete -o bashdefault -o default -F _nebula_complete nebula")
	sh, err := exec.LookPath("bash")
	require.NoError(t, err, "bash is needed to check the bash completion script")
	cmd := exec.Command(sh, "-n")
	cmd.Stdin = strings.NewReader(bash)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "bash -n rejects the completion script: %s", out)

	zsh := c.ok("completion", "zsh")
	require.True(t, strings.HasPrefix(zsh, "#compdef nebula\n"))
	require.Contains(t, zsh, "compdef _nebula nebula")
	fish := c.ok("completion", "fish")
	require.Contains(t, fish, "complete -c nebula")
	require.Contains(t, fish, "project")

	// What the scripts ask nebula for: the words that may follow (urfave/cli
	// reads the words typed from os.Args).
	defer func(a []string) { os.Args = a }(os.Args)
	os.Args = []string{"nebula", "--generate-bash-completion"}
	out2 := c.ok("--generate-bash-completion")
	require.Contains(t, strings.Fields(out2), "project")
	require.Contains(t, strings.Fields(out2), "context")
	os.Args = []string{"nebula", "cluster", "--generate-bash-completion"}
	out2 = c.ok("cluster", "--generate-bash-completion")
	require.Subset(t, strings.Fields(out2), []string{"create", "list", "get", "delete", "manifest", "token"})

	r := c.run("", "completion", "powershell")
	require.Equal(t, exitUsage, exitCode(r.failed))
	require.Contains(t, r.err, "want bash, zsh or fish")
}

// TestUsageErrors: a wrong command line exits 2 with what would be right,
// and changes nothing (no control plane is even reachable here).
func TestUsageErrors(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "http://127.0.0.1:1")
	t.Setenv(envToken, "nbl_00000000000000000000000000000000_x")
	t.Setenv(envContext, "")
	c := cliRun{t: t}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"projct", "list"}, `"projct" is not a command of nebula; did you mean "project"?`},
		{[]string{"project", "lst", "acme"}, `"lst" is not a command of nebula project; did you mean "list"?`},
		{[]string{"cluster", "tokn", "list"}, `did you mean "token"?`},
		{[]string{"zzzzzz"}, `"zzzzzz" is not a command of nebula (see nebula --help)`},
		{[]string{"--jsn", "project", "list", "acme"}, "did you mean --json?"},
		{[]string{"project", "list", "acme", "--bogus"}, "flag provided but not defined: --bogus (see"},
		{[]string{"project", "list", "acme", "--jsn"}, "flag provided but not defined: --jsn; did you mean --json?"},
		{[]string{"env", "create", "acme/shop/qa", "--clustr", "eu-1"}, "did you mean --cluster?"},
		{[]string{"project", "list"}, "want ORG, got 0 argument(s)"},
		{[]string{"project", "list", "acme", "-o", "xml"}, "-o xml: want table, json, yaml or jsonl"},
		{[]string{"--json", "project", "list", "acme", "-o", "yaml"}, "--json is -o json"},
		{[]string{"env", "list", "acme"}, "want ORG/PROJECT, got 1 part"},
		{[]string{"project", "delete", "acme/shop"}, "Delete project acme/shop with its environments and services needs confirmation, and stdin is not a terminal to ask on: give --yes"},
		{[]string{"cluster", "delete", "acme/eu-1"}, "give --yes"},
		{[]string{"server", "revoke", "acme/eu-1", "3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d"}, "give --yes"},
		{[]string{"token", "revoke", "3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d"}, "give --yes"},
		{[]string{"member", "remove", "acme", "3f1e2d4c-5b6a-4789-8c9d-0e1f2a3b4c5d"}, "give --yes"},
		{[]string{"var", "unset", "acme/shop/staging", "A"}, "give --yes"},
		{[]string{"env", "update", "acme/shop/staging"}, "nothing to change"},
		{[]string{"-o", "json", "project", "delete", "acme/shop", "--yes"}, "nebula project delete prints no -o json output"},
		{[]string{"completion"}, "want bash, zsh or fish"},
	} {
		r := c.run("", tc.args...)
		require.Equal(t, exitUsage, exitCode(r.failed), "nebula %s: %s", strings.Join(tc.args, " "), r.err)
		require.Contains(t, r.err, tc.want, "nebula %s", strings.Join(tc.args, " "))
		require.Empty(t, r.out, "nebula %s prints nothing on stdout", strings.Join(tc.args, " "))
	}
	// Without arguments a group prints its help and succeeds.
	require.Contains(t, c.ok("project"), "nebula project command [command options]")
}

func TestExitCodeOfAPIErrors(t *testing.T) {
	for status, want := range map[int]int{
		http.StatusBadRequest: exitUsage, http.StatusUnprocessableEntity: exitUsage,
		http.StatusUnauthorized: exitForbidden, http.StatusForbidden: exitForbidden,
		http.StatusNotFound: exitNotFound, http.StatusConflict: exitConflict, http.StatusPreconditionFailed: exitConflict,
		http.StatusInternalServerError: exitFailure, http.StatusServiceUnavailable: exitFailure,
	} {
		err := &client.Error{Status: status, Message: "x"}
		require.Equal(t, want, exitCode(err), "HTTP %d", status)
		require.Equal(t, want, exitCode(withExitCode(errors.Join(errors.New("wrapped"), err))), "HTTP %d wrapped", status)
	}
	require.Equal(t, 0, exitCode(nil))
	require.Equal(t, exitFailure, exitCode(errors.New("anything else")))
	require.Equal(t, exitApproval, exitCode(exitError{exitApproval, errors.New("waits")}))
}

func TestRelativeTimes(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	defer func(f func() time.Time) { timeNow = f }(timeNow)
	timeNow = func() time.Time { return now }
	for in, want := range map[time.Duration]string{
		2 * time.Second: "just now", 40 * time.Second: "40 s ago", 3 * time.Minute: "3 min ago",
		59*time.Minute + 59*time.Second: "59 min ago", 5 * time.Hour: "5 h ago", 47 * time.Hour: "47 h ago",
		72 * time.Hour: "3 days ago", -2 * time.Hour: "in 2 h", -90 * time.Second: "in 1 min",
	} {
		require.Equal(t, want, when(now.Add(-in)), "%s back", in)
	}
	require.Equal(t, "-", when(time.Time{}))
	require.Equal(t, "-", whenPtr(nil))
	require.Equal(t, now.Local().Format(time.RFC3339), at(now))
}

// TestListsAreArrays: with -o json a list is an array (never null), with -o
// jsonl one value per line, with -o yaml YAML.
func TestListsAreArrays(t *testing.T) {
	type item struct {
		At time.Time `json:"at"`
	}
	var nilList []item
	var b bytes.Buffer
	require.NoError(t, emitTo(&b, outJSON, nilList))
	require.Equal(t, "[]\n", b.String())
	b.Reset()
	require.NoError(t, emitTo(&b, outJSON, &nilList))
	require.Equal(t, "[]\n", b.String())
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	b.Reset()
	require.NoError(t, emitTo(&b, outJSONL, []item{{at}, {at}}))
	require.Equal(t, "{\"at\":\"2026-12-01T12:00:00+01:00\"}\n{\"at\":\"2026-12-01T12:00:00+01:00\"}\n", b.String(), "RFC 3339 with the zone")
	b.Reset()
	require.NoError(t, emitTo(&b, outYAML, []item{{at}}))
	require.Equal(t, "- at: \"2026-12-01T12:00:00+01:00\"\n", b.String())
	var v []map[string]any
	b.Reset()
	require.NoError(t, emitTo(&b, outJSON, []item{{at}}))
	require.NoError(t, json.Unmarshal(b.Bytes(), &v))
	require.Len(t, v, 1)
}
