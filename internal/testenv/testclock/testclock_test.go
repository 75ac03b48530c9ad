package testclock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
)

var t0 = time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)

func fired(ch <-chan time.Time) (time.Time, bool) {
	select {
	case at := <-ch:
		return at, true
	default:
		return time.Time{}, false
	}
}

// Time stands still until the test moves it; a timer fires when the clock
// reaches it, not before, with the clock's time.
func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	c := testclock.New(t0)
	require.Equal(t, t0, c.Now())
	time.Sleep(2 * time.Millisecond)
	require.Equal(t, t0, c.Now(), "real time does not move it")

	now := c.After(0)
	at, ok := fired(now)
	require.True(t, ok, "a timer of zero fires at once")
	require.Equal(t, t0, at)

	soon, later := c.After(time.Minute), c.After(time.Hour)
	require.Equal(t, 2, c.Waiting())
	c.Advance(59 * time.Second)
	_, ok = fired(soon)
	require.False(t, ok, "not due yet")
	c.Advance(time.Second)
	at, ok = fired(soon)
	require.True(t, ok, "due when the clock reaches it")
	require.Equal(t, t0.Add(time.Minute), at)
	_, ok = fired(later)
	require.False(t, ok)
	require.Equal(t, 1, c.Waiting())

	c.Set(t0.Add(2 * time.Hour))
	require.Equal(t, t0.Add(2*time.Hour), c.Now())
	at, ok = fired(later)
	require.True(t, ok, "Set fires the timers it passes")
	require.Equal(t, t0.Add(2*time.Hour), at)
	require.Zero(t, c.Waiting())

	c.Set(t0)
	require.Equal(t, t0, c.Now(), "Set may go back")
}

// A stepping clock gives each reading its own time.
func TestSteppingClock(t *testing.T) {
	t.Parallel()
	c := testclock.Stepping(t0, time.Minute)
	require.Equal(t, t0.Add(time.Minute), c.Now())
	require.Equal(t, t0.Add(2*time.Minute), c.Now())
	c.Advance(time.Hour)
	require.Equal(t, t0.Add(63*time.Minute), c.Now())
}

// Sleep moves the clock at once and is recorded; it reports a context that
// ended.
func TestSleep(t *testing.T) {
	t.Parallel()
	c := testclock.New(t0)
	begun := time.Now()
	require.True(t, c.Sleep(context.Background(), time.Hour))
	require.True(t, c.Sleep(context.Background(), 2*time.Hour))
	require.Less(t, time.Since(begun), time.Second, "no real hour passes")
	require.Equal(t, t0.Add(3*time.Hour), c.Now())
	require.Equal(t, []time.Duration{time.Hour, 2 * time.Hour}, c.Sleeps())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.False(t, c.Sleep(ctx, time.Second), "an ended context ends the sleep")
}

// Concurrent readers, timers and movers: every move counts and every timer
// fires (go test -race finds no race here).
func TestClockConcurrentUse(t *testing.T) {
	t.Parallel()
	c := testclock.New(t0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ch := c.After(time.Second)
			c.Advance(time.Second)
			<-ch
			_ = c.Now()
		})
	}
	wg.Wait()
	require.Equal(t, t0.Add(8*time.Second), c.Now())
	require.Zero(t, c.Waiting())
}

// An Offset is real time, moved on by what the test advanced.
func TestOffset(t *testing.T) {
	t.Parallel()
	var o testclock.Offset
	require.WithinDuration(t, time.Now(), o.Now(), time.Second)
	o.Advance(time.Hour)
	o.Advance(30 * time.Minute)
	require.WithinDuration(t, time.Now().Add(90*time.Minute), o.Now(), time.Second)
	a := o.Now()
	time.Sleep(5 * time.Millisecond)
	require.True(t, o.Now().After(a), "real time still flows")
}
