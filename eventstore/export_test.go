package eventstore

// PendingQuery is the subscriptions' check for events after a cursor.
const PendingQuery = pendingQuery

// Transient tells the errors a subscription retries without parking.
var Transient = transient
