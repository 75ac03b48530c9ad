package eventstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Many appends in one round trip keep each stream's version check: one
// stale request fails them all, and nothing of any of them is written.
func TestAppendManyTxChecksEveryStreamAndIsAllOrNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Append(ctx, appendReq("revisions-b", 0, rec("revision.compiled", 1)))
	require.NoError(t, err)

	tx, err := s.Pool().Begin(ctx)
	require.NoError(t, err)
	got, err := s.AppendManyTx(ctx, tx, []eventstore.AppendRequest{
		appendReq("revisions-a", 0, rec("revision.compiled", 1)),
		appendReq("revisions-b", 1, rec("revision.compiled", 2), rec("revision.compiled", 3)),
		appendReq("revisions-c", 0, rec("revision.compiled", 1)),
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, got, 3)
	require.Equal(t, []int{1, 3, 1}, []int{got[0].Version, got[1].Version, got[2].Version})
	require.True(t, got[0].Last.Before(got[1].Last) && got[1].Last.Before(got[2].Last), "cursors follow the requests' order: %+v", got)
	for stream, want := range map[string]int{"revisions-a": 1, "revisions-b": 3, "revisions-c": 1} {
		v, err := eventstore.StreamVersion(ctx, s.Pool(), stream)
		require.NoError(t, err)
		require.Equal(t, want, v, stream)
	}
	evs, err := s.ReadStream(ctx, "revisions-b", 1)
	require.NoError(t, err)
	require.Equal(t, got[1].Last, evs[len(evs)-1].Cursor())

	// A stale version in the middle fails the whole call.
	tx, err = s.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = s.AppendManyTx(ctx, tx, []eventstore.AppendRequest{
		appendReq("revisions-a", 1, rec("revision.compiled", 2)),
		appendReq("revisions-b", 1, rec("revision.compiled", 4)),
		appendReq("revisions-d", 0, rec("revision.compiled", 1)),
	})
	require.ErrorIs(t, err, eventstore.ErrConflict)
	require.NoError(t, tx.Rollback(ctx))
	for stream, want := range map[string]int{"revisions-a": 1, "revisions-b": 3, "revisions-d": 0} {
		v, err := eventstore.StreamVersion(ctx, s.Pool(), stream)
		require.NoError(t, err)
		require.Equal(t, want, v, stream)
	}

	// A malformed request is refused before anything is sent.
	tx, err = s.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = s.AppendManyTx(ctx, tx, []eventstore.AppendRequest{appendReq("revisions-e", 0)})
	require.ErrorContains(t, err, "no events to append")
}
