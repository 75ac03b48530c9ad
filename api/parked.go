package api

// ParkedEvents lists the events the subscriptions set aside because they
// could not handle them.
type ParkedEvents struct {
	Events []ParkedEvent `json:"events"`
}

// RetryParkedRequest names what to retry: one parked event's stream
// (position) or every parked stream (all), in one subscription or in every
// one.
type RetryParkedRequest struct {
	Subscription string `json:"subscription,omitempty"`
	Position     int64  `json:"position,omitempty"`
	All          bool   `json:"all,omitempty"`
}

// RetryParkedResponse says, per stream, what the retry handled or why it
// failed (then the events stay parked).
type RetryParkedResponse struct {
	Retried []RetriedEvents `json:"retried"`
	// Failed is true when any stream's retry failed.
	Failed bool `json:"failed"`
}
