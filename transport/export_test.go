package transport

import (
	"context"
	"time"
)

// CheckText exposes the frame text rule to the external tests.
var CheckText = checkText

// SetClock replaces the client's wait between attempts and its jitter's
// source (the reconnect tests).
func SetClock(c *Client, sleep func(context.Context, time.Duration) bool, randN func(int64) int64) {
	c.sleep, c.randN = sleep, randN
}
