package api

import (
	"time"
)

// WebhookInfo is a project's push webhook: where forges deliver, and
// whether a secret is set (the secret itself is shown once, when made).
type WebhookInfo struct {
	URL       string     `json:"url"`
	SecretSet bool       `json:"secretSet"`
	RotatedAt *time.Time `json:"rotatedAt,omitempty"`
	// PreviousUntil is when the secret before the last rotation stops
	// being accepted.
	PreviousUntil *time.Time `json:"previousUntil,omitempty"`
	// ContentType is what the forge must send (application/json).
	ContentType string `json:"contentType"`
}

// WebhookSecret is a new webhook secret, shown once.
type WebhookSecret struct {
	WebhookInfo
	Secret string `json:"secret"`
}

// HookResponse answers a forge.
type HookResponse struct {
	// Outcome is building, ignored, ping or duplicate (a redelivery).
	Outcome    string   `json:"outcome"`
	Reason     string   `json:"reason,omitempty"`
	DeliveryID string   `json:"deliveryId,omitempty"`
	Builds     []string `json:"builds,omitempty"`
}

// TrackRequest sets the branch a Git service follows in an environment:
// a branch, or none.
type TrackRequest struct {
	Branch string `json:"branch,omitempty"`
	None   bool   `json:"none,omitempty"`
}

// TrackingView is the branch a service follows in an environment ("" with
// untracked true: none).
type TrackingView struct {
	Branch    string `json:"branch"`
	Untracked bool   `json:"untracked"`
}

// BuildLogPage is a page of a build's output; Next is the position to
// follow from (always present).
type BuildLogPage struct {
	Items []BuildLine `json:"items"`
	Next  string      `json:"next"`
}

// BuildLogEvent is the data of a build log stream's "line" event.
type BuildLogEvent = BuildLine

// Build is a build from Git: what it builds, where, and how it ended.
type Build struct {
	ID           string   `json:"id"`
	ProjectID    string   `json:"projectId"`
	ServiceID    string   `json:"serviceId"`
	Service      string   `json:"service"`
	Project      string   `json:"project"`
	ClusterID    string   `json:"clusterId"`
	Cluster      string   `json:"cluster"`
	Repository   string   `json:"repository"`
	Branch       string   `json:"branch"`
	Commit       string   `json:"commit"`
	Dockerfile   string   `json:"dockerfile"`
	Context      string   `json:"context"`
	Environments []string `json:"environments"`
	Automatic    bool     `json:"automatic"`
	// Trigger is push or deploy; DeliveryID the push's delivery.
	Trigger        string `json:"trigger"`
	DeliveryID     string `json:"deliveryId,omitempty"`
	Attempt        int    `json:"attempt"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
	// Status is queued, running, succeeded, failed, cancelled or timed_out.
	Status string `json:"status"`
	// Image and Digest are the pushed image (succeeded).
	Image  string `json:"image,omitempty"`
	Digest string `json:"digest,omitempty"`
	// ExitCode, Reason and LogTail say why it failed (or was cancelled).
	ExitCode    int        `json:"exitCode,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	LogTail     []string   `json:"logTail"`
	CancelledBy string     `json:"cancelledBy,omitempty"`
	QueuedAt    time.Time  `json:"queuedAt"`
	StartedAt   *time.Time `json:"startedAt,omitempty"`
	FinishedAt  *time.Time `json:"finishedAt,omitempty"`
}

// Delivery is a push webhook delivery a project's endpoint accepted.
type Delivery struct {
	ID         string          `json:"id"`
	Provider   string          `json:"provider"`
	ForgeID    string          `json:"forgeId"`
	Event      string          `json:"event"`
	Repository string          `json:"repository"`
	Ref        string          `json:"ref"`
	Branch     string          `json:"branch"`
	Commit     string          `json:"commit"`
	Outcome    string          `json:"outcome"`
	Reason     string          `json:"reason,omitempty"`
	Builds     []DeliveryBuild `json:"builds"`
	ReceivedAt time.Time       `json:"receivedAt"`
}

// Tracking is the branch each Git service follows in each environment of a
// project (an environment missing for a service follows its default branch).
type Tracking struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Branch        string `json:"branch"`
	Untracked     bool   `json:"untracked"`
}
