// Package testclock is the tests' injected clock: time that moves only when
// the test says (Clock), or real time moved forward by the test (Offset).
// Both are safe for concurrent use; their methods fit the production code's
// clock seams as method values (Now, After, Sleep), which do not change.
package testclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a fake clock: Now stays where Set or Advance (or Sleep, or a
// step per reading) put it. After timers fire when the clock reaches them.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	step    time.Duration
	waiters []waiter
	sleeps  []time.Duration
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// New is a clock standing at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Stepping is a clock that moves step forward at every reading, before it
// is read: its first Now is start+step. Each event then has its own time.
func Stepping(start time.Time, step time.Duration) *Clock {
	return &Clock{now: start, step: step}
}

// Now is the clock's time (moved on by the step first, when stepping).
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.step != 0 {
		c.move(c.step)
	}
	return c.now
}

// Set puts the clock at t (backwards too), firing the timers it reaches.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.move(t.Sub(c.now))
}

// Advance moves the clock d forward, firing the timers it reaches.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.move(d)
}

// After is a timer of the clock: its channel gets the clock's time once the
// clock has moved d on (at once when d <= 0).
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Waiting is how many After timers are pending: a test waits for the code
// to arm its timer before it advances the clock.
func (c *Clock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

// Sleep is a sleep of the clock: it advances the clock by d at once and
// records d (Sleeps), then yields a millisecond of real time so that a
// retry loop does not spin. It returns false when ctx ended first (the
// shape of eventstore.ParkPolicy.Sleep).
func (c *Clock) Sleep(ctx context.Context, d time.Duration) bool {
	c.mu.Lock()
	c.move(d)
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Millisecond):
		return true
	}
}

// Sleeps are the durations Sleep was asked for, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// move moves the clock by d and fires the timers due; c.mu is held.
func (c *Clock) move(d time.Duration) {
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// Offset is real time plus an offset the test advances: for a whole control
// plane whose timers and deadlines must still run while the test jumps over
// a stall timeout or an expiry. The zero Offset is real time.
type Offset struct {
	mu  sync.Mutex
	off time.Duration
}

// Now is time.Now plus the offset.
func (o *Offset) Now() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return time.Now().Add(o.off)
}

// Advance moves the offset d forward.
func (o *Offset) Advance(d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.off += d
}
