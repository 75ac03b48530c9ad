package image

import (
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/stretchr/testify/require"
)

// FuzzResolveReference drives the offline half of Resolve: whatever parse
// accepts must be something go-containerregistry reads back identically, so
// the pinned string stored in a release always parses again.
func FuzzResolveReference(f *testing.F) {
	for _, s := range []string{
		"nginx",
		"localhost:5000/api:v2",
		"registry.example.com:443/team/api@sha256:" + strings.Repeat("0", 64),
		"a b",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := parse(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidReference)
			require.False(t, IsPinned(s))
			return
		}
		require.NotEmpty(t, s)
		require.LessOrEqual(t, len(s), MaxReferenceLength)
		require.Negative(t, strings.IndexFunc(s, unicode.IsSpace))

		again, err := name.ParseReference(ref.Name())
		require.NoError(t, err)
		require.Equal(t, ref.Name(), again.Name())
		require.Equal(t, ref.Context().Name(), again.Context().Name())

		_, isDigest := ref.(name.Digest)
		require.Equal(t, isDigest, IsPinned(s))

		// The form Resolve returns must parse back to itself.
		pinned := ref.Context().Digest("sha256:" + strings.Repeat("a", 64)).String()
		back, err := name.ParseReference(pinned)
		require.NoError(t, err)
		require.Equal(t, pinned, back.Name())
		require.Equal(t, pinned, back.String())
		if len(pinned) <= MaxReferenceLength {
			// Longer only when the input was near the limit and the
			// canonical form grew (implicit index.docker.io/library/).
			require.True(t, IsPinned(pinned))
		}
	})
}
