package api

import "time"

// Actor is who caused an audit log entry: a user, an API token, an agent
// (server) or a system job.
type Actor struct {
	// Kind is "user", "token", "agent" or "system".
	Kind string `json:"kind"`
	ID   string `json:"id"`
	// Name is what people read: an email, a token name, a server name or a
	// job name.
	Name string `json:"name"`
}

// Process is one kind of process of a service: web, worker, ...
type Process struct {
	Name        string       `json:"name"`
	Command     []string     `json:"command,omitempty"`
	Port        int          `json:"port,omitempty"`
	Replicas    int          `json:"replicas"`
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// HealthCheck is how a process is probed: an HTTP GET of Path on Port, or a
// TCP connect to Port when Path is empty.
type HealthCheck struct {
	Path                string `json:"path,omitempty"`
	Port                int    `json:"port"`
	InitialDelaySeconds int    `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int    `json:"periodSeconds,omitempty"`
}

// DeliveryBuild is a build a push delivery queued: for one service on one
// cluster, shared by the environments it names.
type DeliveryBuild struct {
	ServiceID    string   `json:"serviceId"`
	ClusterID    string   `json:"clusterId"`
	Environments []string `json:"environments"`
	// Repository, Dockerfile and Context are the service's source when the
	// delivery came (the clone URL the service names, not the payload's).
	Repository string `json:"repository,omitempty"`
	Dockerfile string `json:"dockerfile,omitempty"`
	Context    string `json:"context,omitempty"`
}

// ParkedEvent is an event a subscription set aside after it failed, or
// behind one that failed in its stream.
type ParkedEvent struct {
	Subscription  string `json:"subscription"`
	Position      int64  `json:"position"`
	StreamID      string `json:"stream"`
	StreamVersion int    `json:"streamVersion"`
	OrgID         string `json:"orgId,omitempty"`
	Type          string `json:"type"`
	// Reason is "failed" for the event that failed, "behind" for the later
	// events of its stream parked after it.
	Reason         string    `json:"reason"`
	Error          string    `json:"error"`
	Attempts       int       `json:"attempts"`
	ParkedAt       time.Time `json:"parkedAt"`
	LastRetryError string    `json:"lastRetryError,omitempty"`
}

// RetriedEvents is the outcome of retrying parked events of one
// subscription and stream.
type RetriedEvents struct {
	Subscription string `json:"subscription"`
	StreamID     string `json:"stream"`
	// Positions are the events handled, in order (none when it failed).
	Positions []int64 `json:"positions"`
	// Error is why the retry failed; the events stay parked.
	Error string `json:"error,omitempty"`
}

// The statuses in which a deployment (or its last stage) is over.
const (
	StatusSucceeded  = "succeeded"
	StatusFailed     = "failed"
	StatusSuperseded = "superseded"
)

func terminal(status string) bool {
	return status == StatusSucceeded || status == StatusFailed || status == StatusSuperseded
}
