package docs_test

import (
	"os/exec"
	"strings"
	"testing"
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
