package server

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A subscription behind an old event is stuck only when it handles nothing:
// one catching up (the webhooks' subscription after an upgrade starts at
// the instance's first event) keeps the replica ready. Before, /readyz
// judged by the age of the oldest unhandled event alone: every replica of
// an instance with more than 2 minutes of history answered 503 until the
// new subscription had replayed it all.
func TestACatchingUpSubscriptionIsNotStuck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := newProgress()
	p.sample = time.Millisecond
	now := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	var handled int64
	working := func(context.Context) (int64, error) { handled += 100; return handled, nil }
	idle := func(context.Context) (int64, error) { return handled, nil }

	stuck, err := p.stuck(ctx, "webhooks", now, working)
	require.NoError(t, err)
	require.False(t, stuck, "a first look sees it move")
	stuck, err = p.stuck(ctx, "webhooks", now.Add(time.Minute), idle)
	require.NoError(t, err)
	require.False(t, stuck, "a minute without progress: not yet")
	stuck, err = p.stuck(ctx, "webhooks", now.Add(2*time.Minute+time.Second), idle)
	require.NoError(t, err)
	require.True(t, stuck, "more than 2 minutes since it last moved")
	stuck, err = p.stuck(ctx, "webhooks", now.Add(3*time.Minute), working)
	require.NoError(t, err)
	require.False(t, stuck, "moving again")

	// One that does not move between the two samples of a first look is
	// stuck at once (a poison event: the projections' stuck test).
	stuck, err = p.stuck(ctx, "projections", now, idle)
	require.NoError(t, err)
	require.True(t, stuck)
}
