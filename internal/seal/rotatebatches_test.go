package seal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// A Sealer holding the new key and the previous one opens values of both,
// and seals new ones under the new key only.
func TestSealerWithPreviousKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b, c := newKey(t), newKey(t), newKey(t)
	old, pts := sealSome(t, seal.New(pool, a, nil), 3)

	both := seal.New(pool, b, nil, a)
	for i, v := range old {
		got, err := both.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, pts[i], got)
	}
	v, err := both.Seal(ctx, orgID, []byte("new"))
	require.NoError(t, err)
	counts, err := seal.CountByMasterKey(ctx, pool)
	require.NoError(t, err)
	require.ElementsMatch(t, []seal.KeyCount{{MasterKeyID: a.ID(), DataKeys: 3}, {MasterKeyID: b.ID(), DataKeys: 1}}, counts)
	got, err := seal.New(pool, b, nil).Open(ctx, v)
	require.NoError(t, err, "a new value is sealed under the new key")
	require.Equal(t, []byte("new"), got)

	ids := []string{old[0].DataKeyID, v.DataKeyID}
	readable, err := seal.New(pool, b, nil, a).Readable(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{ids[0]: true, ids[1]: true}, readable)

	// Neither key: refused, naming both variables and what the row needs.
	_, err = seal.New(pool, c, nil, b).Open(ctx, old[0])
	require.ErrorIs(t, err, seal.ErrUnreadable)
	require.ErrorContains(t, err, fmt.Sprintf("sealed with master key %s, but NEBULACTRL_SECRET_KEY is %s and NEBULACTRL_PREVIOUS_SECRET_KEY is %s", a.ID(), c.ID(), b.ID()))

	_, err = seal.ParseMasterKeyOf(seal.EnvPreviousKey, "short")
	require.ErrorIs(t, err, seal.ErrInvalidMasterKey)
	require.ErrorContains(t, err, "NEBULACTRL_PREVIOUS_SECRET_KEY")
}

// The rotation in small batches while values are opened and sealed
// concurrently by Sealers holding both keys (as every replica does during a
// rotation): no open fails, every key ends under the new master key, the
// new key alone opens every value, the old key alone opens none, the old
// key is retired, and running it again changes nothing.
func TestRotateBatchesUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	const n = 300
	vs, pts := sealSome(t, seal.New(pool, a, nil), n)

	var mu sync.Mutex
	all := map[string][]byte{}
	values := append([]domain.SealedValue{}, vs...)
	for i, v := range vs {
		all[v.DataKeyID] = pts[i]
	}
	done := make(chan struct{})
	var opens atomic.Int64
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				// A fresh Sealer caches nothing: each open reads its row.
				s := seal.New(pool, b, nil, a)
				mu.Lock()
				v := values[rand.IntN(len(values))]
				want := all[v.DataKeyID]
				mu.Unlock()
				got, err := s.Open(ctx, v)
				if err != nil {
					errs <- fmt.Errorf("opener %d: %w", g, err)
					return
				}
				if !bytes.Equal(got, want) {
					errs <- fmt.Errorf("opener %d opened %q, want %q", g, got, want)
					return
				}
				opens.Add(1)
			}
		})
	}
	// A replica sealing new values meanwhile.
	wg.Go(func() {
		s := seal.New(pool, b, nil, a)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			pt := fmt.Appendf(nil, "sealed during the rotation %d", i)
			v, err := s.Seal(ctx, orgID, pt)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			values = append(values, v)
			all[v.DataKeyID] = pt
			mu.Unlock()
		}
	})

	var batches int
	var opensDuring int64
	rewrapped, err := seal.RotateBatches(ctx, pool, a, b, seal.RotateOptions{BatchSize: 7, Progress: func(int) {
		batches++
		if batches == 2 {
			opensDuring = opens.Load()
		}
	}})
	mid := opens.Load()
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, err)
	require.Equal(t, n, rewrapped)
	require.Equal(t, (n+6)/7, batches)
	require.Greater(t, mid, opensDuring, "values were opened while the rotation ran")

	counts, err := seal.CountByMasterKey(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []seal.KeyCount{{MasterKeyID: b.ID(), DataKeys: len(values)}}, counts)
	onlyNew, onlyOld := seal.New(pool, b, nil), seal.New(pool, a, nil)
	for _, v := range values {
		got, err := onlyNew.Open(ctx, v)
		require.NoError(t, err)
		require.Equal(t, all[v.DataKeyID], got)
		_, err = onlyOld.Open(ctx, v)
		require.ErrorIs(t, err, seal.ErrUnreadable)
	}
	retired, err := seal.RetiredMasterKeys(ctx, pool)
	require.NoError(t, err)
	require.Len(t, retired, 1)
	require.Equal(t, a.ID(), retired[0].ID)
	require.Equal(t, b.ID(), retired[0].ReplacedBy)

	before := dataKeyRows(t, pool)
	again, err := seal.RotateBatches(ctx, pool, a, b, seal.RotateOptions{BatchSize: 7})
	require.NoError(t, err, "a finished rotation run again is done")
	require.Zero(t, again)
	require.Equal(t, before, dataKeyRows(t, pool))

	_, err = seal.Rotate(ctx, pool, b, a)
	require.ErrorIs(t, err, seal.ErrRetiredKey, "a retired key is never a new key again")
	require.Equal(t, before, dataKeyRows(t, pool))
}

// A run stopped between batches (its context cancelled: what a crash
// leaves, since each batch is a transaction) leaves some keys under each
// master key; a second run re-wraps exactly the rest.
func TestRotateBatchesResumes(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	const n = 50
	vs, pts := sealSome(t, seal.New(pool, a, nil), n)

	ctx, cancel := context.WithCancel(context.Background())
	first, err := seal.RotateBatches(ctx, pool, a, b, seal.RotateOptions{BatchSize: 5, Progress: func(done int) {
		if done >= 15 {
			cancel()
		}
	}})
	require.Error(t, err)
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	require.Equal(t, 15, first)
	counts, err := seal.CountByMasterKey(context.Background(), pool)
	require.NoError(t, err)
	require.ElementsMatch(t, []seal.KeyCount{{MasterKeyID: a.ID(), DataKeys: n - 15}, {MasterKeyID: b.ID(), DataKeys: 15}}, counts)
	retired, err := seal.RetiredMasterKeys(context.Background(), pool)
	require.NoError(t, err)
	require.Empty(t, retired, "an unfinished rotation retires nothing")

	second, err := seal.RotateBatches(context.Background(), pool, a, b, seal.RotateOptions{BatchSize: 5})
	require.NoError(t, err)
	require.Equal(t, n, first+second, "every key re-wrapped once")
	s := seal.New(pool, b, nil)
	for i, v := range vs {
		got, err := s.Open(context.Background(), v)
		require.NoError(t, err, "wrapped once, by the new key")
		require.Equal(t, pts[i], got)
	}
}

// A replica still running with the old key alone seals under it while the
// rotation runs (what the runbook forbids): what it sealed between batches
// is re-wrapped by the same run, and what it seals after the run ended is
// left under the retired key, counted, and re-wrapped by the next run.
func TestRotatePicksUpKeysSealedUnderTheOldKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	a, b := newKey(t), newKey(t)
	sealSome(t, seal.New(pool, a, nil), 10)
	stale := seal.New(pool, a, nil)
	calls := 0
	n, err := seal.RotateBatches(ctx, pool, a, b, seal.RotateOptions{BatchSize: 20, Progress: func(int) {
		calls++
		if calls == 1 {
			_, err := stale.Seal(ctx, orgID, []byte("late"))
			require.NoError(t, err)
		}
	}})
	require.NoError(t, err)
	require.Equal(t, 11, n, "the value sealed under the old key between batches is re-wrapped too")

	late, err := stale.Seal(ctx, orgID, []byte("later"))
	require.NoError(t, err)
	counts, err := seal.CountByMasterKey(ctx, pool)
	require.NoError(t, err)
	require.ElementsMatch(t, []seal.KeyCount{{MasterKeyID: a.ID(), DataKeys: 1}, {MasterKeyID: b.ID(), DataKeys: 11}}, counts)
	n, err = seal.Rotate(ctx, pool, a, b)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err := seal.New(pool, b, nil).Open(ctx, late)
	require.NoError(t, err)
	require.Equal(t, []byte("later"), got)
}
