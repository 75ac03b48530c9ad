// Package layout holds no code: its test keeps the dependency direction of
// the architecture (the pure core imports no I/O; the agent never reaches the
// event store), so a wrong import fails the build's tests, not a review.
package layout
