package api

import (
	"encoding/json"
	"time"
)

// LogPage is a page of a service's container logs, in the envelope of
// every list. Logs are followed, so Next is always present: the position
// to continue from (pass it as ?cursor=), the same as the cursor asked for
// when no new line came.
type LogPage struct {
	Items []LogLine `json:"items"`
	// Next is always present: where to continue following from.
	Next string `json:"next"`
}

// ClusterStatus is whether a cluster's agents are in touch.
type ClusterStatus struct {
	// State is Connected while one of its servers is live (a heartbeat
	// within the last 60 s), else Disconnected.
	State           string     `json:"state"`
	LastHeartbeatAt *time.Time `json:"lastHeartbeatAt,omitempty"`
	ConnectedAgents int        `json:"connectedAgents"`
}

// Acknowledgement is a server's last acknowledgement of an environment's revision.
type Acknowledgement struct {
	ServerID string          `json:"serverId"`
	Server   string          `json:"server"`
	Revision int             `json:"revision"`
	Ignored  bool            `json:"ignored"`
	Services json.RawMessage `json:"services"`
	AckedAt  time.Time       `json:"ackedAt"`
}

// Workload is what an agent reports of one process of one release.
type Workload struct {
	Service   string    `json:"service"`
	Release   int       `json:"release"`
	Process   string    `json:"process"`
	Desired   int       `json:"desired"`
	Ready     int       `json:"ready"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Node is a reported node.
type Node struct {
	Name      string            `json:"name"`
	Ready     bool              `json:"ready"`
	CPU       string            `json:"cpu"`
	Memory    string            `json:"memory"`
	Versions  map[string]string `json:"versions"`
	UpdatedAt time.Time         `json:"updatedAt"`
}

// ClusterEvent is a warning event about a managed object, as reported.
type ClusterEvent struct {
	EnvironmentID string    `json:"environmentId,omitempty"`
	Namespace     string    `json:"namespace"`
	Object        string    `json:"object"`
	Reason        string    `json:"reason"`
	Message       string    `json:"message"`
	Count         int       `json:"count"`
	LastSeen      time.Time `json:"lastSeen"`
}

// LogLine is a stored line.
type LogLine struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	Pod       string    `json:"pod"`
	Container string    `json:"container"`
	Release   int       `json:"release"`
	Stream    string    `json:"stream"`
	Text      string    `json:"text"`
}

// BuildLine is a stored line of a build's output.
type BuildLine struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	Container string    `json:"container"`
	Stream    string    `json:"stream"`
	Text      string    `json:"text"`
}

// Cluster states.
const (
	StateConnected    = "Connected"
	StateDisconnected = "Disconnected"
)
