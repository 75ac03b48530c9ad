package api

import (
	"time"
)

// InstanceSettings are the settings of the whole installation.
type InstanceSettings struct {
	AgentAutoUpgrade bool `json:"agentAutoUpgrade"`
	// UpdatedAt is nil while the settings were never changed.
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
}

// AuditTarget is what an audit entry is about, with the name people read
// (acme/shop/production/api).
type AuditTarget struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Name string `json:"name"`
}

// AuditEntry is one entry of the hash-chained audit log.
type AuditEntry struct {
	Seq        int64       `json:"seq"`
	Position   int64       `json:"position"`
	OrgID      string      `json:"orgId,omitempty"`
	Actor      Actor       `json:"actor"`
	Action     string      `json:"action"`
	Target     AuditTarget `json:"target"`
	Detail     string      `json:"detail"`
	OccurredAt time.Time   `json:"occurredAt"`
	RequestID  string      `json:"requestId"`
	// Via is how the change reached the control plane when not by the REST
	// API itself: "mcp" for a tool call of the MCP server (docs/mcp.md).
	Via  string `json:"via,omitempty"`
	Hash string `json:"hash"`
}
