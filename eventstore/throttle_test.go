package eventstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// A wake that comes inside the interval after a look is deferred to the
// interval's end, never dropped (the delivery of builds waited for the next
// poll when it was), and a burst of wakes makes one more look, not one each.
func TestThrottleDefersAWakeInsideTheInterval(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	var looks atomic.Int32
	go eventstore.Throttle(ctx, wake, 50*time.Millisecond, time.Hour, func(context.Context) { looks.Add(1) })
	wake <- struct{}{}
	require.Eventually(t, func() bool { return looks.Load() == 1 }, 5*time.Second, time.Millisecond)
	for range 5 {
		select {
		case wake <- struct{}{}:
		default:
		}
		time.Sleep(2 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return looks.Load() == 2 }, 5*time.Second, time.Millisecond, "the burst inside the interval is not dropped")
	time.Sleep(150 * time.Millisecond)
	require.Equal(t, int32(2), looks.Load(), "the burst made one look")
}
