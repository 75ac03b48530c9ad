package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// sqlOwners are the packages that write SQL, each for its own tables (issue
// 16, item 3): the rest of the control plane calls their functions, with
// typed arguments, never SQL of its own.
var sqlOwners = map[string]string{
	"eventstore":                    "events (also the watermill topic), checkpoints, parked events, snapshots, name claims",
	"projections":                   "the read models it builds (and their reads for the agent link, the reactions, the metrics)",
	"internal/query":                "the API's reads of the read models and the telemetry",
	"internal/telemetry":            "agents' status, acknowledgements, logs and their partitions",
	"internal/seal":                 "data_keys, retired_master_keys",
	"internal/backup":               "control_plane_version, pre_upgrade_backups, the pre-upgrade check",
	"internal/jobs":                 "job_runs and the leader lock",
	"internal/database":             "the managed database itself and the migrations",
	"internal/reactions/reactstore": "reaction_timers, build_queue",
	"internal/apistate":             "idempotency_keys, login_throttle",
	"internal/webhooks/hookstore":   "outbound webhook endpoints as the webhooks' subscription saw them, deliveries, attempts",
}

// sqlExempt are packages that may keep SQL of their own.
var sqlExempt = map[string]string{
	// The benchmark measures raw SQL as a baseline, beside the product's
	// own functions.
	"cmd/nebula-bench": "the benchmark's baseline measurements",
	// The locally built PostgreSQL image's entry point creates its user and
	// database, as the official image does: no table of the product.
	"tools/ociimage": "the PostgreSQL image's first start",
}

// sqlExemptPrefixes are trees whose packages may write SQL.
var sqlExemptPrefixes = []string{
	"internal/testenv/", // test harnesses
}

// sqlKeywords find SQL in a string literal: statements, not words.
var sqlKeywords = regexp.MustCompile(`\bSELECT\b|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b|\bDELETE\s+FROM\b|\bTRUNCATE\s+\S+|` +
	`\b(CREATE|ALTER|DROP)\s+(UNIQUE\s+)?(TABLE|INDEX|VIEW|SCHEMA|SEQUENCE|FUNCTION|TRIGGER|TYPE|ROLE|DATABASE|EXTENSION)\b`)

// TestSQLHasOwners fails on a string literal holding SQL in a non-test Go
// file of a package that is not one of the owners.
func TestSQLHasOwners(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}},{{join .CgoFiles ","}},{{join .IgnoredGoFiles ","}}`,
		module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.SplitN(line, "|", 3)
		if len(parts) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkg, dir := strings.TrimPrefix(parts[0], module), parts[1]
		if _, ok := sqlOwners[pkg]; ok {
			continue
		}
		if _, ok := sqlExempt[pkg]; ok {
			continue
		}
		exempt := false
		for _, p := range sqlExemptPrefixes {
			exempt = exempt || strings.HasPrefix(pkg, p)
		}
		if exempt {
			continue
		}
		for _, name := range strings.Split(parts[2], ",") {
			if name == "" || strings.HasSuffix(name, "_test.go") || !strings.HasSuffix(name, ".go") {
				continue
			}
			seen++
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Errorf("parsing %s/%s: %v", pkg, name, err)
				continue
			}
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					return true
				}
				if m := sqlKeywords.FindString(s); m != "" {
					t.Errorf("%s: SQL (%q) outside its owners: package %s must call a function of the table's owner (docs/sqlowners_test.go lists them)",
						fset.Position(lit.Pos()), m, pkg)
				}
				return true
			})
		}
	}
	if seen == 0 {
		t.Fatal("no file was looked at")
	}
}

// TestSQLKeywords checks what counts as SQL.
func TestSQLKeywords(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"SELECT 1":                                   true,
		"INSERT INTO t (a) VALUES ($1)":              true,
		"UPDATE server_status SET connected = false": true,
		"DELETE FROM t WHERE k = $1":                 true,
		"CREATE TABLE IF NOT EXISTS t (a int)":       true,
		"CREATE UNIQUE INDEX i ON t (a)":             true,
		"DROP TABLE t":                               true,
		"select a deployment to update":              false,
		"the update sets the version":                false,
		"delete the cluster from the organisation":   false,
	} {
		if got := sqlKeywords.MatchString(s); got != want {
			t.Errorf("%q: SQL %v, want %v", s, got, want)
		}
	}
}
