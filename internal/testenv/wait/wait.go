// Package wait is the tests' eventually-style wait: a condition polled at a
// fixed interval until it holds or a deadline passes, which fails the test
// with what was awaited.
//
// Unlike testify's require.Eventually, the condition runs on the test's
// own goroutine, so it may call require (t.FailNow) itself.
package wait

import (
	"testing"
	"time"
)

// Poll is how often a condition is tried.
const Poll = 50 * time.Millisecond

// Patience is Eventually's deadline: long, because reaching it is a failure
// and a loaded CI machine is slow (a PostgreSQL restart, a pod's start).
const Patience = 90 * time.Second

// Until tries cond every Poll until it holds (true) or within has passed
// (false). cond is tried at least once.
func Until(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
}

// Eventually waits, for up to Patience, until cond holds, and otherwise
// fails t with what.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Within(t, Patience, what, cond)
}

// Within is Eventually with a deadline of its own.
func Within(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}
