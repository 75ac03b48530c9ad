package lockedbuf_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
)

// Writers and a reader at once: every write is kept whole (go test -race
// finds no race here).
func TestConcurrentWritesAreKept(t *testing.T) {
	t.Parallel()
	var b lockedbuf.Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "writer %d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 800)
	for i := range 8 {
		require.Equal(t, 100, strings.Count(b.String(), fmt.Sprintf("writer %d\n", i)))
	}
}
