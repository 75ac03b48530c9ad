package eventstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Via is stored with every event of the append and read back; a malformed
// one is refused and writes nothing.
func TestAppendRecordsVia(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()

	req := appendReq("project-via", 0, rec("project.created", 1), rec("service.created", 2))
	req.Via = "mcp"
	_, err := s.Append(ctx, req)
	require.NoError(t, err)
	_, err = s.Append(ctx, appendReq("project-via", 2, rec("service.created", 3)))
	require.NoError(t, err)
	evs, err := s.ReadStream(ctx, "project-via", 0)
	require.NoError(t, err)
	require.Len(t, evs, 3)
	require.Equal(t, []string{"mcp", "mcp", ""}, []string{evs[0].Via, evs[1].Via, evs[2].Via})

	for _, bad := range []string{"MCP", "m cp", "-mcp", "1mcp", "mcp\x00", "mcp\n", strings.Repeat("a", 33), "ünï"} {
		r := appendReq("project-bad-via", 0, rec("a", 1))
		r.Via = bad
		_, err := s.Append(ctx, r)
		require.Error(t, err, "via %q", bad)
		require.Contains(t, err.Error(), "via")
	}
	n, err := eventstore.StreamVersion(ctx, s.Pool(), "project-bad-via")
	require.NoError(t, err)
	require.Zero(t, n, "a refused via writes nothing")
}
