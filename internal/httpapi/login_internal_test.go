package httpapi

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The gate runs at most its concurrency of hashes at once, queues a
// bounded number, and answers the rest 429 at once: a flood of sign-ins
// cannot take every processor from the rest of the API.
func TestHashGateBoundsConcurrentHashing(t *testing.T) {
	t.Parallel()
	g := newHashGate(2, 3)
	var running, most, hashed atomic.Int32
	release := make(chan struct{})
	g.hashed = func() { hashed.Add(1) }
	work := func() {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		running.Add(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 24)
	for range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- g.do(context.Background(), work)
		}()
	}
	// 5 are admitted (2 running, 3 waiting); the other 19 are refused at once.
	refused := 0
	for refused < 19 {
		err := <-errs
		require.Error(t, err)
		ae, ok := err.(*apiError)
		require.True(t, ok)
		require.Equal(t, http.StatusTooManyRequests, ae.status)
		require.Equal(t, 1, ae.retryAfter)
		refused++
	}
	require.Eventually(t, func() bool { return running.Load() == 2 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int32(2), most.Load(), "never more than the concurrency at once")
	require.Equal(t, int32(5), hashed.Load())

	// A waiting sign-in whose client gives up leaves the queue.
	g = newHashGate(1, 1)
	block := make(chan struct{})
	go func() { _ = g.do(context.Background(), func() { <-block }) }()
	require.Eventually(t, func() bool { return len(g.slots) == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, g.do(ctx, func() {}), context.Canceled)
	close(block)
	require.Eventually(t, func() bool { return len(g.queue) == 0 }, 5*time.Second, time.Millisecond)
}
