package wait_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

// fatals records a Fatalf instead of ending the test.
type fatals struct {
	testing.TB
	msgs []string
}

func (f *fatals) Helper() {}
func (f *fatals) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// A condition that comes true is waited for, polled at the fixed interval.
func TestEventuallyWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	var tries atomic.Int64
	begun := time.Now()
	f := &fatals{TB: t}
	wait.Eventually(f, "the fourth try", func() bool { return tries.Add(1) == 4 })
	require.Empty(t, f.msgs)
	require.EqualValues(t, 4, tries.Load())
	require.GreaterOrEqual(t, time.Since(begun), 3*wait.Poll, "three polls between four tries")
}

// A condition that never holds fails the test, naming what was awaited,
// after the deadline and not long before.
func TestWithinFailsWithWhat(t *testing.T) {
	t.Parallel()
	f := &fatals{TB: t}
	begun := time.Now()
	wait.Within(f, 300*time.Millisecond, "the pod is ready", func() bool { return false })
	took := time.Since(begun)
	require.Equal(t, []string{"not within 300ms: the pod is ready"}, f.msgs)
	require.GreaterOrEqual(t, took, 300*time.Millisecond)
	require.Less(t, took, 300*time.Millisecond+10*wait.Poll)
}

// Until tries once even with no time, and reports the outcome.
func TestUntil(t *testing.T) {
	t.Parallel()
	n := 0
	require.True(t, wait.Until(0, func() bool { n++; return true }))
	require.Equal(t, 1, n)
	require.False(t, wait.Until(0, func() bool { n++; return false }))
	require.Equal(t, 2, n, "tried once, past its deadline at once")
}
