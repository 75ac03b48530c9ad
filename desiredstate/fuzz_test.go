package desiredstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds arbitrary frames to Decode, as a hostile or broken network
// peer could. Whatever Decode accepts must have a canonical form, and that
// form must decode back to the same value and re-encode to the same bytes:
// otherwise the hash of a received document would not be stable.
//
// Seeds live in testdata/fuzz/FuzzDecode; the valid sample is added here too
// so the seed set follows the format when fields are added.
func FuzzDecode(f *testing.F) {
	b, err := sample().Canonical()
	require.NoError(f, err)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := Decode(in)
		if err != nil {
			return
		}
		c, err := d.Canonical()
		require.NoError(t, err, "a decoded document must have a canonical form")
		again, err := Decode(c)
		require.NoError(t, err, "the canonical form must decode: %s", c)
		require.Equal(t, d, again)
		c2, err := again.Canonical()
		require.NoError(t, err)
		require.Equal(t, string(c), string(c2))
	})
}
