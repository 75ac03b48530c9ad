package domain

// fastReaderOf returns the fast reader of an event type, for the tests that
// compare it with the strict decoder (nil for a type without one).
func fastReaderOf(eventType string) func([]byte) (Event, bool) {
	switch eventType {
	case "variables.set":
		return func(p []byte) (Event, bool) { return readFast(p, readVariablesSet) }
	case "release.created":
		return func(p []byte) (Event, bool) { return readFast(p, readReleaseCreated) }
	case "deployment.requested":
		return func(p []byte) (Event, bool) { return readFast(p, readDeploymentRequested) }
	case "deployment.delivering":
		return func(p []byte) (Event, bool) { return readFast(p, readDeploymentDelivering) }
	case "deployment.stage":
		return func(p []byte) (Event, bool) { return readFast(p, readDeploymentStageReached) }
	case "deployment.succeeded":
		return func(p []byte) (Event, bool) { return readFast(p, readDeploymentSucceeded) }
	case "deployment.failed":
		return func(p []byte) (Event, bool) { return readFast(p, readDeploymentFailed) }
	case "revision.compiled":
		return func(p []byte) (Event, bool) { return readFast(p, readRevisionCompiled) }
	}
	return nil
}

// FastReaderOf exposes the fast readers to the external tests.
var FastReaderOf = fastReaderOf
