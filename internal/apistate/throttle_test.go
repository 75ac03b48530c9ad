package apistate_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/apistate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The limit holds under a burst: fifty attempts on one key at once, from
// as many connections (as replicas would), count exactly ten; the refused
// ones count nothing, and every refusal says when to come back.
func TestThrottleHoldsUnderConcurrentAttempts(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	pair := apistate.Throttle{Key: "pair:127.0.0.9 a@example.com", Limit: 10, Window: 15 * time.Minute}
	address := apistate.Throttle{Key: "client:127.0.0.9", Limit: 100, Window: 15 * time.Minute}
	var allowed, refused atomic.Int32
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait, err := apistate.TakeLoginAttempt(context.Background(), pool, now, pair, address)
			if err != nil {
				t.Errorf("attempt %d: %v", i, err)
				return
			}
			if wait == 0 {
				allowed.Add(1)
				return
			}
			refused.Add(1)
			if wait <= 0 || wait > pair.Window {
				t.Errorf("attempt %d: come back in %s", i, wait)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 10, allowed.Load())
	require.EqualValues(t, 40, refused.Load())
	var pairCount, addressCount int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT cardinality(attempts) FROM login_throttle WHERE key = $1`, pair.Key).Scan(&pairCount))
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT cardinality(attempts) FROM login_throttle WHERE key = $1`, address.Key).Scan(&addressCount))
	require.Equal(t, 10, pairCount)
	require.Equal(t, 10, addressCount, "a refused attempt counts on no throttle")
}
