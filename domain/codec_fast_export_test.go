package domain

// fastReaderOf returns the fast reader of an event type, for the tests that
// compare it with the strict decoder (nil for a type without one).
func fastReaderOf(eventType string) func([]byte) (Event, bool) {
	switch eventType {
	case "variables.set":
		return func(p []byte) (Event, bool) { return fastVariablesSet(p) }
	case "release.created":
		return func(p []byte) (Event, bool) { return fastReleaseCreated(p) }
	case "deployment.requested":
		return func(p []byte) (Event, bool) { return fastDeploymentRequested(p) }
	case "deployment.delivering":
		return func(p []byte) (Event, bool) { return fastDeploymentDelivering(p) }
	case "deployment.stage":
		return func(p []byte) (Event, bool) { return fastDeploymentStageReached(p) }
	case "deployment.succeeded":
		return func(p []byte) (Event, bool) { return fastDeploymentSucceeded(p) }
	case "deployment.failed":
		return func(p []byte) (Event, bool) { return fastDeploymentFailed(p) }
	case "revision.compiled":
		return func(p []byte) (Event, bool) { return fastRevisionCompiled(p) }
	}
	return nil
}

// FastReaderOf exposes the fast readers to the external tests.
var FastReaderOf = fastReaderOf
