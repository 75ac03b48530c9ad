package api

import "time"

// DeploymentStageEvent is the data of a deployment stream's "stage" event:
// one stage of the rollout (its id is Seq), with where the deployment stands
// as it is sent (status, stalled, reason, blockers). The stream closes after
// the stage that ends the deployment (succeeded, failed or superseded).
type DeploymentStageEvent struct {
	DeploymentID string `json:"deploymentId"`
	DeploymentStage
	Status       string     `json:"status"`
	Stalled      bool       `json:"stalled"`
	StalledSince *time.Time `json:"stalledSince,omitempty"`
	Reason       string     `json:"reason,omitempty"`
	SupersededBy string     `json:"supersededBy,omitempty"`
	Blockers     []string   `json:"blockers"`
	// Terminal is set on the stage that ends the deployment: the last event.
	Terminal bool `json:"terminal"`
}

// EnvironmentEvent is the data of an environment stream's "audit" event: an
// audit log entry about the environment, its services there, its
// deployments or its change sets. Its id is the entry's Seq.
type EnvironmentEvent = AuditEntry

// AuditEvent is the data of an organisation's audit stream's "audit"
// event: a new entry of its audit log. Its id is the entry's Seq.
type AuditEvent = AuditEntry

// StreamMediaType is the media type of the server-sent event streams.
const StreamMediaType = "text/event-stream"
