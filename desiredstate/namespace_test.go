package desiredstate

import (
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
		{"64 chars cut and hashed", a20, a20, a20 + "bc", a20 + "-" + a20 + "-" + strings.Repeat("a", 12) + "-c6cf8cc0"},
		{
			"cut on a dash drops it",
			strings.Repeat("o", 27), strings.Repeat("p", 25), "production",
			strings.Repeat("o", 27) + "-" + strings.Repeat("p", 25) + "-cb4e4a10",
		},
		{
			"three maximal labels",
			strings.Repeat("o", 63), strings.Repeat("p", 63), strings.Repeat("e", 63),
			strings.Repeat("o", 54) + "-7dccec42",
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

// Two long names that differ only after the cut must not share a namespace.
func TestNamespaceLongNamesStayUnique(t *testing.T) {
	org, project := strings.Repeat("o", 30), strings.Repeat("p", 30)
	a := Namespace(org, project, "staging")
	b := Namespace(org, project, "production")
	require.NotEqual(t, a, b)
	require.Equal(t, a[:54], b[:54], "the readable prefix is shared")
	for _, ns := range []string{a, b} {
		require.Len(t, ns, 63)
		require.Regexp(t, dnsLabel, ns)
	}
}
