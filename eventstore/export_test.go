package eventstore

// PendingQuery is the subscriptions' check for events after a cursor.
const PendingQuery = pendingQuery
