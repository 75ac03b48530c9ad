package docs_test

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/nebulactrl/nebulactrl/"

// deps lists the non-standard packages pkg depends on, transitively.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", module+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	var res []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && l != module+pkg {
			res = append(res, l)
		}
	}
	return res
}

// serverOnly are the modules that only the control plane's server side
// links: the database, the message router, metrics and Kubernetes.
var serverOnly = []string{"github.com/jackc/", "github.com/ThreeDotsLabs/", "github.com/lib/pq", "github.com/prometheus/", "k8s.io/"}

func TestDependencyDirection(t *testing.T) {
	t.Parallel()
	rules := []struct {
		pkg     string
		allowed []string // prefixes; everything else is forbidden
		denied  []string // prefixes that are forbidden even if allowed above
	}{
		{pkg: "domain"},
		{pkg: "desiredstate"},
		{pkg: "compiler", allowed: []string{module + "domain", module + "desiredstate"}},
		{pkg: "eventstore", allowed: []string{module + "domain", "github.com/jackc/", "github.com/ThreeDotsLabs/", "github.com/google/uuid",
			"github.com/lib/pq", "github.com/pkg/errors", "github.com/oklog/ulid", "github.com/lithammer/shortuuid", "github.com/sony/gobreaker",
			"github.com/cenkalti/backoff", "golang.org/x/"}},
		{pkg: "projections", allowed: []string{""}, denied: []string{module + "internal/dispatch", module + "cmd/", module + "internal/httpapi"}},
		// Reactions issue commands; they never write projections or answer HTTP.
		{pkg: "internal/reactions", allowed: []string{""}, denied: []string{module + "projections", module + "internal/httpapi", module + "internal/query", module + "cmd/", module + "transport", module + "internal/agentlink"}},
		// The API's wire types and the Go client: a program that calls the
		// API links no database driver, no Kubernetes client, no metrics.
		{pkg: "api", allowed: []string{module + "desiredstate"}},
		{pkg: "client", allowed: []string{module + "api", module + "desiredstate"}},
		// The console calls the API in process: it renders the wire types.
		{pkg: "internal/console", allowed: []string{""}, denied: append([]string{module + "internal/httpapi", module + "internal/query",
			module + "projections", module + "eventstore"}, serverOnly...)},
		{pkg: "transport", allowed: []string{module + "desiredstate", "github.com/gorilla/websocket", "golang.org/x/net/"}},
		// The agent never reaches the control plane's store: only the link.
		{pkg: "agent", allowed: []string{""}, denied: []string{module + "eventstore", module + "projections", module + "internal/dispatch", module + "internal/httpapi", module + "internal/query", module + "internal/database", module + "internal/seal"}},
	}
	for _, r := range rules {
		for _, d := range deps(t, r.pkg) {
			ok := false
			for _, a := range r.allowed {
				if strings.HasPrefix(d, a) {
					ok = true
				}
			}
			for _, x := range r.denied {
				if strings.HasPrefix(d, x) {
					ok = false
				}
			}
			if !ok {
				t.Errorf("%s must not depend on %s", r.pkg, d)
			}
		}
	}
}

// The CLI's commands that call the API (the files that use package client)
// never reach the server's packages; only the local tools that work on the
// database itself (nebula serve, audit replay and verify, backups) do.
func TestClientCommandsUseOnlyTheWireTypes(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../cmd/nebula/*.go")
	require.NoError(t, err)
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		require.NoError(t, err)
		var imports []string
		for _, im := range parsed.Imports {
			imports = append(imports, strings.Trim(im.Path.Value, `"`))
		}
		if !slices.Contains(imports, module+"client") {
			continue
		}
		n++
		for _, im := range imports {
			for _, x := range []string{module + "internal/httpapi", module + "internal/query", module + "projections", module + "eventstore"} {
				require.False(t, im == x || strings.HasPrefix(im, x+"/"), "%s calls the API and imports %s", f, im)
			}
		}
	}
	require.Greater(t, n, 10, "the client commands were found")
}

// A program that imports the client builds in a module of its own with
// nothing but this module: the standard library, api, desiredstate, client.
func TestClientBuildsInAFreshModule(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("go.mod", "module example.com/caller\n\ngo 1.26\n\nrequire github.com/nebulactrl/nebulactrl v0.0.0\n\nreplace github.com/nebulactrl/nebulactrl => "+root+"\n")
	write("main.go", `package main

import (
	"context"
	"fmt"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

func main() {
	c, err := client.New("http://127.0.0.1:1", "nbl_x")
	if err != nil {
		panic(err)
	}
	var orgs []api.Organisation
	orgs, err = c.Organisations(context.Background())
	fmt.Println(len(orgs), err != nil)
}
`)
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	run("build", "-o", filepath.Join(dir, "caller"), ".")
	mods := strings.Fields(run("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "."))
	for _, m := range mods {
		require.Contains(t, []string{"example.com/caller", "github.com/nebulactrl/nebulactrl"}, m, "the client pulls in another module")
	}
	pkgs := strings.Fields(run("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "."))
	require.ElementsMatch(t, []string{"example.com/caller", module + "api", module + "client", module + "desiredstate"}, pkgs)
}
