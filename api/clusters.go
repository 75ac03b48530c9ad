package api

import "time"

// CreateClusterRequest creates a cluster with its first join token.
type CreateClusterRequest struct {
	Name string `json:"name"`
	// ExpiresInHours bounds the join token's life (default 24, at most 720).
	ExpiresInHours int `json:"expiresInHours,omitempty"`
}

// JoinTokenRequest issues another join token.
type JoinTokenRequest struct {
	ExpiresInHours int `json:"expiresInHours,omitempty"`
}

// CreatedJoinToken is a join token; its secret is shown only here.
type CreatedJoinToken struct {
	JoinToken
	Token string `json:"token"`
}

// ClusterResponse is a cluster, with its first join token when just created.
type ClusterResponse struct {
	Cluster
	Status    ClusterStatus     `json:"status"`
	JoinToken *CreatedJoinToken `json:"joinToken,omitempty"`
}

// Cluster is a K3s cluster of an organisation.
type Cluster struct {
	ID        string    `json:"id"`
	OrgID     string    `json:"orgId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// Servers counts the cluster's servers whose credential is not revoked.
	Servers int `json:"servers"`
}

// JoinToken is a token a server joins a cluster with, without its hash.
type JoinToken struct {
	ID        string     `json:"id"`
	ClusterID string     `json:"clusterId"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt time.Time  `json:"expiresAt"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
}

// Server is a server registered in a cluster, without its credential hash.
type Server struct {
	ID           string     `json:"id"`
	ClusterID    string     `json:"clusterId"`
	Name         string     `json:"name"`
	RegisteredAt time.Time  `json:"registeredAt"`
	RevokedAt    *time.Time `json:"revokedAt,omitempty"`
	// Version and LastHeartbeatAt are what its agent last reported (empty
	// and null before it first connected); Connected says whether it is live
	// now: its connection's lease held and a heartbeat within the last 60 s.
	Version         string     `json:"version"`
	Connected       bool       `json:"connected"`
	LastHeartbeatAt *time.Time `json:"lastHeartbeatAt"`
	// Skew, CannotUpgrade and LastUpgrade: see ServerUpgrade (upgrades.go);
	// Skew is filled by WithSkew.
	Skew          string       `json:"skew"`
	CannotUpgrade string       `json:"cannotUpgrade"`
	LastUpgrade   *LastUpgrade `json:"lastUpgrade,omitempty"`
	// Arch is the architecture its agent last reported ("" before it first
	// connected); NoAgentBinary says the control plane carries no agent
	// binary for it, so that an upgrade is refused with no_agent_binary.
	Arch          string `json:"arch,omitempty"`
	NoAgentBinary bool   `json:"noAgentBinary,omitempty"`
}
