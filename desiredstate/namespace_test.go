package desiredstate

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func TestNamespace(t *testing.T) {
	a20 := strings.Repeat("a", 20)
	tests := []struct {
		name              string
		org, project, env string
		want              string
	}{
		{"short", "acme", "shop", "production", "acme-shop-production"},
		{"62 chars kept", a20, a20, a20, a20 + "-" + a20 + "-" + a20},
		{"exactly 63 kept", a20, a20, a20 + "b", a20 + "-" + a20 + "-" + a20 + "b"},
		{"a name with a dash gets a suffix", "acme", "shop", "prod-eu", "acme-shop-prod-eu-9agplx66hy"},
		{"64 chars cut and hashed", a20, a20, a20 + "bc", a20 + "-" + a20 + "-" + strings.Repeat("a", 10) + "-5puzd235es"},
		{
			"cut on a dash drops it",
			strings.Repeat("o", 27), strings.Repeat("p", 25), "production",
			strings.Repeat("o", 27) + "-" + strings.Repeat("p", 24) + "-4k6mwqwyxw",
		},
		{
			"three maximal labels",
			strings.Repeat("o", 63), strings.Repeat("p", 63), strings.Repeat("e", 63),
			strings.Repeat("o", 52) + "-8mmbprfs5s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Namespace(tt.org, tt.project, tt.env)
			require.Equal(t, tt.want, got)
			require.LessOrEqual(t, len(got), 63)
			require.Regexp(t, dnsLabel, got)
		})
	}
}

// orga/x-y/z and orga/x/y-z both joined to orga-x-y-z: their agents would
// have overwritten each other's objects.
func TestNamespacesOfDifferentEnvironmentsDiffer(t *testing.T) {
	a, b := Namespace("orga", "x-y", "z"), Namespace("orga", "x", "y-z")
	require.NotEqual(t, a, b)
	require.True(t, strings.HasPrefix(a, "orga-x-y-z-") && strings.HasPrefix(b, "orga-x-y-z-"), "a readable prefix: %s %s", a, b)
	// Nor does a suffixed namespace equal a plain one: an environment named
	// like another's suffix stays apart.
	suffix := a[strings.LastIndexByte(a, '-')+1:]
	require.NotEqual(t, a, Namespace("orga", "x", "y-z-"+suffix))
	long := strings.Repeat("o", 40)
	cut := Namespace(long, "p-q", "e")
	require.NotEqual(t, cut, Namespace(long, "p", cut[len(long)+3:]))
}

// Two long names that differ only after the cut must not share a namespace.
func TestNamespaceLongNamesStayUnique(t *testing.T) {
	org, project := strings.Repeat("o", 30), strings.Repeat("p", 30)
	a := Namespace(org, project, "staging")
	b := Namespace(org, project, "production")
	require.NotEqual(t, a, b)
	require.Equal(t, a[:52], b[:52], "the readable prefix is shared")
	for _, ns := range []string{a, b} {
		require.Len(t, ns, 63)
		require.Regexp(t, dnsLabel, ns)
	}
}

// Distinct name triples, built from few letters and many dashes so that
// their joins coincide often, always get distinct namespaces, each a DNS label.
func TestNamespaceIsInjective(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 4))
	name := func() string {
		n := 1 + rng.IntN(8)
		if rng.IntN(20) == 0 {
			n = 40 + rng.IntN(24)
		}
		b := []byte{"ab"[rng.IntN(2)]}
		for len(b) < n {
			b = append(b, "ab-1"[rng.IntN(4)])
		}
		b[len(b)-1] = "ab1"[rng.IntN(3)]
		return string(b)
	}
	seen := map[string][3]string{}
	joins := map[string]map[[3]string]bool{}
	for range 50000 {
		k := [3]string{name(), name(), name()}
		ns := Namespace(k[0], k[1], k[2])
		if prev, ok := seen[ns]; ok {
			require.Equal(t, prev, k, "two environments share namespace %s", ns)
		}
		seen[ns] = k
		j := k[0] + "-" + k[1] + "-" + k[2]
		if joins[j] == nil {
			joins[j] = map[[3]string]bool{}
		}
		joins[j][k] = true
		require.LessOrEqual(t, len(ns), 63)
		require.Regexp(t, dnsLabel, ns)
	}
	shared := 0
	for _, ks := range joins {
		if len(ks) > 1 {
			shared++
		}
	}
	require.Greater(t, shared, 50, "the generator makes distinct environments whose joins coincide")
}
