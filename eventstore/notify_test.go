package eventstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// The notifier paces its transactions (one a millisecond at most) but loses
// no append: under a burst of 8 writers every append's own stream@version
// is notified, once.
func TestNotifierNotifiesEveryAppendOfABurst(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool := pgtest.Pool(t)
	listener, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig.Copy())
	require.NoError(t, err)
	defer listener.Close(context.Background())
	_, err = listener.Exec(ctx, "LISTEN "+eventstore.NotifyChannel)
	require.NoError(t, err)

	s := eventstore.New(pool, nil)
	go s.RunNotifier(ctx)
	// Appends made before it runs notify on their own (also right): give
	// it a moment so that the burst goes through it.
	time.Sleep(100 * time.Millisecond)

	const writers, each = 8, 250
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			stream := fmt.Sprintf("burst-%d", w)
			for v := range each {
				_, err := s.Append(ctx, appendReq(stream, v, rec("a", v)))
				require.NoError(t, err)
			}
		})
	}
	seen := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(seen) < writers*each && time.Now().Before(deadline) {
		wctx, stop := context.WithDeadline(ctx, deadline)
		n, err := listener.WaitForNotification(wctx)
		stop()
		if err != nil {
			break
		}
		seen[n.Payload]++
	}
	wg.Wait()
	require.Len(t, seen, writers*each, "every append is notified")
	for w := range writers {
		for v := 1; v <= each; v++ {
			p := fmt.Sprintf("burst-%d@%d", w, v)
			require.Equal(t, 1, seen[p], "%s notified %d times", p, seen[p])
		}
	}
}
