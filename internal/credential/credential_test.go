package credential_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/credential"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	id, tok, hash, err := credential.New()
	require.NoError(t, err)
	gotID, secret, ok := credential.Parse(tok)
	require.True(t, ok)
	require.Equal(t, id, gotID)
	require.True(t, credential.Matches(hash, secret))
	require.False(t, credential.Matches(hash, secret[:len(secret)-1]+"x"))
	require.NotContains(t, hash, secret, "only the hash is stored")
	for _, bad := range []string{"", "nbl_", "nbl_xyz_" + strings.Repeat("a", 40), "abc_" + tok[4:], tok[:20], "nbl_" + strings.Repeat("g", 32) + "_" + strings.Repeat("a", 40)} {
		_, _, ok := credential.Parse(bad)
		require.False(t, ok, bad)
	}
}

func FuzzParse(f *testing.F) {
	_, tok, _, _ := credential.New()
	f.Add(tok)
	f.Add("nbl_00000000000000000000000000000000_" + strings.Repeat("x", 40))
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, ok := credential.Parse(s)
		if ok && (id == "" || len(secret) < 32) {
			t.Fatalf("accepted %q as %q/%q", s, id, secret)
		}
	})
}
