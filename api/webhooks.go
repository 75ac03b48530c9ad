package api

import (
	"encoding/json"
	"time"
)

// Outbound webhooks: an organisation's endpoints, which the control plane
// tells what happened, signed per the Standard Webhooks specification
// (docs/webhooks.md).

// WebhookEventTypes are the event types an endpoint can ask for (or "*":
// every one, also those added later). The control plane sends nothing else.
var WebhookEventTypes = []string{
	"deployment.succeeded", "deployment.failed", "deployment.superseded",
	"build.succeeded", "build.failed",
	"changeset.opened", "changeset.approved", "changeset.rejected", "changeset.expired",
	"cluster.connected", "cluster.disconnected",
	"agent.upgraded", "agent.rolled_back",
}

// WebhookAllEvents asks for every event type.
const WebhookAllEvents = "*"

// WebhookEndpoint is an organisation's outbound webhook endpoint. Its
// signing secret is never returned, except once (WebhookEndpointSecret)
// when it is made.
type WebhookEndpoint struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	Description string `json:"description"`
	// EventTypes are those of WebhookEventTypes the endpoint receives, or
	// ["*"].
	EventTypes []string `json:"eventTypes"`
	// Enabled is false once the endpoint was disabled: DisabledReason says
	// why (its receiver answered 410 Gone, or 5 days of failed deliveries).
	Enabled        bool       `json:"enabled"`
	DisabledReason string     `json:"disabledReason,omitempty"`
	DisabledAt     *time.Time `json:"disabledAt,omitempty"`
	CreatedAt      time.Time  `json:"createdAt"`
	// SecretRotatedAt is the last rotation; until PreviousSecretUntil the
	// secret before it signs too (a second signature).
	SecretRotatedAt     *time.Time `json:"secretRotatedAt,omitempty"`
	PreviousSecretUntil *time.Time `json:"previousSecretUntil,omitempty"`
}

// CreateWebhookRequest creates an endpoint: an http or https URL (no user
// name or password in it; at most 2048 bytes), a description (at most 500
// bytes) and the event types it receives (from WebhookEventTypes, or "*").
type CreateWebhookRequest struct {
	URL         string   `json:"url" input:"max=2048"`
	Description string   `json:"description,omitempty" input:"text,max=500"`
	EventTypes  []string `json:"eventTypes"`
}

// WebhookEndpointSecret is an endpoint with its signing secret
// (whsec_<base64>), shown this once: at creation and at each rotation.
type WebhookEndpointSecret struct {
	WebhookEndpoint
	Secret string `json:"secret"`
}

// Delivery statuses.
const (
	// WebhookPending: not delivered yet; NextAttemptAt says when it is tried.
	WebhookPending = "pending"
	// WebhookSucceeded: the receiver answered 2xx.
	WebhookSucceeded = "succeeded"
	// WebhookFailed: every attempt failed (or the endpoint answered 410, or
	// was disabled or deleted meanwhile): no more attempts unless
	// redelivered by hand.
	WebhookFailed = "failed"
)

// WebhookDelivery is one event sent to one endpoint. ID is its webhook-id
// header: the same for every attempt and redelivery.
type WebhookDelivery struct {
	ID         string `json:"id"`
	EndpointID string `json:"endpointId"`
	EventType  string `json:"eventType"`
	// Status is pending, succeeded or failed; Reason says why it failed
	// for good.
	Status        string     `json:"status"`
	Reason        string     `json:"reason,omitempty"`
	Attempts      int        `json:"attempts"`
	CreatedAt     time.Time  `json:"createdAt"`
	NextAttemptAt *time.Time `json:"nextAttemptAt,omitempty"`
	LastAttemptAt *time.Time `json:"lastAttemptAt,omitempty"`
	// LastStatusCode is the receiver's last answer (0: none, such as a
	// refused or timed-out connection).
	LastStatusCode int `json:"lastStatusCode"`
}

// WebhookAttempt is one attempt of a delivery (kept 30 days).
type WebhookAttempt struct {
	N          int       `json:"n"`
	At         time.Time `json:"at"`
	DurationMs int64     `json:"durationMs"`
	// StatusCode is the receiver's answer, 0 when there was none (Error
	// says why: a refused address, a timeout, a connection error).
	StatusCode int    `json:"statusCode"`
	Error      string `json:"error,omitempty"`
	// Response is the first 1 KiB of the receiver's answer.
	Response string `json:"response"`
	// Manual says the attempt followed a redelivery by hand.
	Manual bool `json:"manual"`
}

// WebhookDeliveryDetail is a delivery with its payload (the body sent) and
// every attempt, oldest first.
type WebhookDeliveryDetail struct {
	Delivery    WebhookDelivery  `json:"delivery"`
	Payload     json.RawMessage  `json:"payload"`
	AttemptList []WebhookAttempt `json:"attemptList"`
}

// WebhookPayload is the body of every delivery, per Standard Webhooks:
// the event type, when it happened, and its data (docs/webhooks.md has the
// JSON Schema of each type's data).
type WebhookPayload struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}
