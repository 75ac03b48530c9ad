package console

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// TestDocumentDiffVariables: the diff between two revisions names a secret
// variable set to another value and a variable that became secret or plain
// (it said nothing of either), never a value; an unchanged secret is not a
// change.
func TestDocumentDiffVariables(t *testing.T) {
	sealed := func(ct string) *desiredstate.Sealed {
		return &desiredstate.Sealed{DataKeyID: "k1", Ciphertext: []byte(ct)}
	}
	doc := func(vars ...desiredstate.Variable) desiredstate.Document {
		return desiredstate.Document{Services: []desiredstate.Service{{Name: "api", Variables: vars}}}
	}
	a := doc(
		desiredstate.Variable{Name: "DB_PASSWORD", Secret: sealed("old-ciphertext")},
		desiredstate.Variable{Name: "TOKEN", Value: "plain-token"},
		desiredstate.Variable{Name: "KEY", Secret: sealed("key-ciphertext")},
		desiredstate.Variable{Name: "STILL", Secret: sealed("same")},
	)
	b := doc(
		desiredstate.Variable{Name: "DB_PASSWORD", Secret: sealed("new-ciphertext")},
		desiredstate.Variable{Name: "TOKEN", Secret: sealed("token-ciphertext")},
		desiredstate.Variable{Name: "KEY", Value: "now-plain"},
		desiredstate.Variable{Name: "STILL", Secret: sealed("same")},
	)
	got := documentDiff(a, b)
	require.Equal(t, []string{
		"api: secret variable DB_PASSWORD changed",
		"api: variable KEY changed (now plain)",
		"api: variable TOKEN changed (now secret)",
	}, got)
	for _, line := range got {
		require.NotContains(t, line, "ciphertext")
		require.NotContains(t, line, "plain-token")
		require.NotContains(t, line, "now-plain")
	}
	require.Empty(t, documentDiff(a, a))
}
