package api

import "time"

// Mesh is an organisation's WireGuard mesh: its range, every node with its
// address and health, and the clusters meshed by node address only.
type Mesh struct {
	Network  string        `json:"network"`
	Nodes    []MeshNode    `json:"nodes"`
	Overlaps []MeshOverlap `json:"overlaps"`
}

// MeshNode is one node of the mesh.
type MeshNode struct {
	Cluster   string `json:"cluster"`
	ClusterID string `json:"clusterId"`
	Node      string `json:"node"`
	Address   string `json:"address"`
	PublicKey string `json:"publicKey"`
	// Fingerprint is the public key's first 8 characters.
	Fingerprint string `json:"fingerprint"`
	// Endpoint is where its peers reach it; empty when it cannot be
	// reached from outside.
	Endpoint string `json:"endpoint"`
	// Keepalive says it keeps its paths open (no public address: it may be
	// behind NAT).
	Keepalive       bool      `json:"keepalive"`
	JoinedAt        time.Time `json:"joinedAt"`
	KeyRotatedAt    time.Time `json:"keyRotatedAt"`
	RotateRequested bool      `json:"rotateRequested"`
	// Revision is the mesh revision the node has configured (its report);
	// Userspace says it runs wireguard-go (no kernel module).
	Revision   int        `json:"revision"`
	Userspace  bool       `json:"userspace"`
	ReportedAt *time.Time `json:"reportedAt"`
	// Reachable: a handshake with a peer within the last 3 minutes; Reason
	// says why not.
	Reachable bool             `json:"reachable"`
	Reason    string           `json:"reason,omitempty"`
	Peers     []MeshPeerHealth `json:"peers"`
}

// MeshPeerHealth is one peer as a node's interface sees it.
type MeshPeerHealth struct {
	Cluster       string     `json:"cluster"`
	Node          string     `json:"node"`
	Endpoint      string     `json:"endpoint"`
	LastHandshake *time.Time `json:"lastHandshake"`
	RxBytes       int64      `json:"rxBytes"`
	TxBytes       int64      `json:"txBytes"`
}

// MeshOverlap says why a cluster is meshed by node address only.
type MeshOverlap struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
}

// MeshSettingsRequest sets the mesh range (it can grow, never shrink under
// its nodes).
type MeshSettingsRequest struct {
	Network string `json:"network"`
}

// MeshRotateRequest asks a cluster's nodes (Node: one of them) for new keys.
type MeshRotateRequest struct {
	Node string `json:"node,omitempty"`
}

// MeshRotateResponse says which nodes were asked.
type MeshRotateResponse struct {
	Nodes []string `json:"nodes"`
}
