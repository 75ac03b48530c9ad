package seal_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func sealSome(t *testing.T, s *seal.Sealer, n int) ([]domain.SealedValue, [][]byte) {
	t.Helper()
	var vs []domain.SealedValue
	var pts [][]byte
	for i := range n {
		pt := fmt.Appendf(nil, "secret number %d", i)
		org := orgID
		if i%2 == 1 {
			org = ""
		}
		v, err := s.Seal(context.Background(), org, pt)
		require.NoError(t, err)
		vs = append(vs, v)
		pts = append(pts, pt)
	}
	return vs, pts
}

func TestRotate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	vs, pts := sealSome(t, seal.New(pool, a, nil), 5)
	ids := make([]string, len(vs))
	for i, v := range vs {
		ids[i] = v.DataKeyID
	}
	var eventsBefore int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&eventsBefore))

	n, err := seal.Rotate(ctx, pool, a, b)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	sb := seal.New(pool, b, nil)
	for i, v := range vs {
		got, err := sb.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, pts[i], got)
	}
	readable, err := sb.Readable(ctx, ids)
	require.NoError(t, err)
	for _, id := range ids {
		require.True(t, readable[id])
	}

	sa := seal.New(pool, a, nil)
	for _, v := range vs {
		_, err := sa.Open(ctx, v)
		require.ErrorIs(t, err, seal.ErrUnreadable)
		require.ErrorContains(t, err, fmt.Sprintf("sealed with master key %s, but NEBULACTRL_SECRET_KEY is %s", b.ID(), a.ID()))
	}
	readable, err = sa.Readable(ctx, ids)
	require.NoError(t, err)
	for _, id := range ids {
		require.False(t, readable[id])
	}

	mks, err := seal.MasterKeyIDs(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{b.ID()}, mks)

	// New values sealed with B rotate onward to C along with the old ones.
	more, _ := sealSome(t, sb, 2)
	c := newKey(t)
	n, err = seal.Rotate(ctx, pool, b, c)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	sc := seal.New(pool, c, nil)
	for _, v := range append(vs, more...) {
		_, err := sc.Open(ctx, v)
		require.NoError(t, err)
	}

	var eventsAfter int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&eventsAfter))
	require.Equal(t, eventsBefore, eventsAfter)
}

func TestRotateWithWrongFromChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b, wrong := newKey(t), newKey(t), newKey(t)
	vs, pts := sealSome(t, seal.New(pool, a, nil), 4)
	before := dataKeyRows(t, pool)

	n, err := seal.Rotate(ctx, pool, wrong, b)
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, wrong.ID())
	require.ErrorContains(t, err, a.ID(), "the error names the key the database holds")
	require.Zero(t, n)
	require.Equal(t, before, dataKeyRows(t, pool))

	sa := seal.New(pool, a, nil)
	for i, v := range vs {
		got, err := sa.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, pts[i], got)
	}
}

func TestRotateAbortsOnUnopenableKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	vs, _ := sealSome(t, seal.New(pool, a, nil), 4)

	// One row claims to be wrapped by A but A cannot unwrap it.
	_, err := pool.Exec(ctx, `UPDATE data_keys SET wrapped_key = set_byte(wrapped_key, 59, get_byte(wrapped_key, 59) # 128) WHERE id = $1`, vs[2].DataKeyID)
	require.NoError(t, err)
	before := dataKeyRows(t, pool)

	n, err := seal.Rotate(ctx, pool, a, b)
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, vs[2].DataKeyID)
	require.Zero(t, n)
	require.Equal(t, before, dataKeyRows(t, pool), "a failed rotation changes no row")
}

func TestRotateRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	encoded, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	a, err := seal.ParseMasterKey(encoded)
	require.NoError(t, err)
	raw, err := base64.StdEncoding.DecodeString(encoded)
	require.NoError(t, err)
	sameA, err := seal.ParseMasterKey(base64.RawURLEncoding.EncodeToString(raw))
	require.NoError(t, err)
	sealSome(t, seal.New(pool, a, nil), 2)
	before := dataKeyRows(t, pool)

	_, err = seal.Rotate(ctx, pool, a, a)
	require.ErrorContains(t, err, "same")
	_, err = seal.Rotate(ctx, pool, a, sameA)
	require.ErrorContains(t, err, "same")
	_, err = seal.Rotate(ctx, pool, a, seal.MasterKey{})
	require.Error(t, err)
	_, err = seal.Rotate(ctx, pool, seal.MasterKey{}, a)
	require.Error(t, err)
	require.Equal(t, before, dataKeyRows(t, pool))
}

func TestRotateEmptyDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	n, err := seal.Rotate(context.Background(), pool, newKey(t), newKey(t))
	require.NoError(t, err)
	require.Zero(t, n)
}
