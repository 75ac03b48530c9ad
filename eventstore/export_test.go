package eventstore

import (
	"context"
	"time"
)

// PendingQuery is the subscriptions' check for events after a cursor.
const PendingQuery = pendingQuery

// Transient tells the errors a subscription retries without parking.
var Transient = transient

// RunTopic runs only the waker's watermill subscription of the events
// topic, polling every poll: no LISTEN, so every wake-up is the topic's.
func (w *Waker) RunTopic(ctx context.Context, poll time.Duration) { w.topic(ctx, poll) }
