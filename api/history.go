package api

import (
	"encoding/json"
	"time"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// Release is a release of a service in an environment: an image with the
// configuration it froze. Variables lists names only.
type Release struct {
	ID            string    `json:"id"`
	EnvironmentID string    `json:"environmentId"`
	ServiceID     string    `json:"serviceId"`
	Number        int       `json:"number"`
	Image         string    `json:"image"`
	Reason        string    `json:"reason"`
	Processes     []Process `json:"processes"`
	// Variables are the names of the frozen variables, a secret's with
	// SecretSuffix appended; values are never returned.
	Variables []string  `json:"variables"`
	CreatedAt time.Time `json:"createdAt"`
	CreatedBy string    `json:"createdBy"`
	// Current is set on the release the service's latest deployment in the
	// environment asked for.
	Current bool `json:"current"`
}

// Deployment is a request to run a release, and how far it got. Status is
// the rollout stage (requested, delivering, starting, probing, switching,
// retiring) or the outcome (succeeded, failed, superseded); Reason says why a
// deployment failed.
type Deployment struct {
	ID            string    `json:"id"`
	EnvironmentID string    `json:"environmentId"`
	ServiceID     string    `json:"serviceId"`
	ReleaseID     string    `json:"releaseId"`
	ReleaseNumber int       `json:"releaseNumber"`
	Image         string    `json:"image"`
	Status        string    `json:"status"`
	Reason        string    `json:"reason,omitempty"`
	RequestedAt   time.Time `json:"requestedAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
	RequestedBy   string    `json:"requestedBy"`
	// Rollback marks a deployment of an earlier release.
	Rollback bool `json:"rollback"`
	// Revision is the desired-state revision that carried the deployment
	// to its cluster (0 until then).
	Revision int `json:"revision"`
	// Ready and Desired count the new release's pods, as last reported;
	// Detail says what holds unready pods up.
	Ready   int    `json:"ready"`
	Desired int    `json:"desired"`
	Detail  string `json:"detail,omitempty"`
	// Stalled is set while the rollout made no progress for the stall
	// timeout; StalledSince is its last progress.
	Stalled      bool       `json:"stalled"`
	StalledSince *time.Time `json:"stalledSince,omitempty"`
	// SupersededBy is the newer deployment that replaced this one.
	SupersededBy string     `json:"supersededBy,omitempty"`
	FinishedAt   *time.Time `json:"finishedAt,omitempty"`
}

// Terminal reports whether the deployment is over (succeeded, failed or superseded).
func (d Deployment) Terminal() bool { return terminal(d.Status) }

// ChangeSet is a set of changes to a protected environment waiting for, or
// having had, someone else's decision. Changes is the stored list of
// domain.Change with every secret reduced to {"name": ..., "secret": true}.
// Status is open, approved, rejected or expired; Version counts the changes
// that joined it, and an approval names the version it approves.
type ChangeSet struct {
	ID            string          `json:"id"`
	EnvironmentID string          `json:"environmentId"`
	Status        string          `json:"status"`
	Version       int             `json:"version"`
	Description   string          `json:"description"`
	OpenedBy      string          `json:"openedBy"`
	DecidedBy     string          `json:"decidedBy,omitempty"`
	OpenedAt      time.Time       `json:"openedAt"`
	DecidedAt     *time.Time      `json:"decidedAt,omitempty"`
	Changes       json.RawMessage `json:"changes"`
}

// Revision is one desired-state revision of an environment.
type Revision struct {
	EnvironmentID string                `json:"environmentId"`
	Number        int                   `json:"number"`
	Hash          string                `json:"hash"`
	CompiledAt    time.Time             `json:"compiledAt"`
	Document      desiredstate.Document `json:"document"`
}
