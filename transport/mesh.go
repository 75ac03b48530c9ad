package transport

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"time"
)

// The WireGuard mesh: every node of every cluster of an organisation on one
// private network. The control plane compiles, per cluster, a MeshState
// (its own revision numbering, stale ignored like every revision); the
// cluster's agent hands it to the node agents (nebulactrl-agent mesh) in
// its cluster through the Kubernetes API, and they configure their
// interface from it. Keys never leave their node: only public keys travel.

// Frames of the mesh.
const (
	// TypeMeshReport (agent -> control plane): payload MeshReport, sent by
	// the leader with its status reports when the mesh is installed.
	TypeMeshReport = "mesh_report"
	// TypeMeshState (control plane -> agent): payload MeshState, sent to
	// agents whose hello says mesh.
	TypeMeshState = "mesh_state"
)

// MeshReport is what a cluster's agent reports of its nodes for the mesh:
// the node agents' reports, every node of the cluster with its pod ranges,
// and the cluster's service ranges.
type MeshReport struct {
	Nodes        []MeshNodeReport  `json:"nodes"`
	ClusterNodes []MeshClusterNode `json:"clusterNodes"`
	ServiceCIDRs []string          `json:"serviceCIDRs,omitempty"`
}

// MeshClusterNode is one Kubernetes node of the cluster.
type MeshClusterNode struct {
	Name     string   `json:"name"`
	PodCIDRs []string `json:"podCIDRs,omitempty"`
}

// Validate checks a mesh report.
func (r MeshReport) Validate() error {
	var c fieldCheck
	c.count("nodes", len(r.Nodes), maxNodes)
	c.count("clusterNodes", len(r.ClusterNodes), maxNodes)
	if c.err == nil && len(r.ClusterNodes) == 0 {
		c.err = fmt.Errorf("clusterNodes is empty: a report names the cluster's nodes")
	}
	c.count("serviceCIDRs", len(r.ServiceCIDRs), maxAllowedIPs)
	for _, n := range r.Nodes {
		if c.err == nil {
			c.err = n.Validate()
		}
	}
	for _, n := range r.ClusterNodes {
		c.text("clusterNodes.name", n.Name, maxName)
		c.count("clusterNodes.podCIDRs", len(n.PodCIDRs), maxAllowedIPs)
		for _, p := range n.PodCIDRs {
			if _, err := netip.ParsePrefix(p); c.err == nil && err != nil {
				c.err = fmt.Errorf("node %s: pod range %q is not a CIDR", n.Name, truncateQuoted(p))
			}
		}
	}
	for _, p := range r.ServiceCIDRs {
		if _, err := netip.ParsePrefix(p); c.err == nil && err != nil {
			c.err = fmt.Errorf("service range %q is not a CIDR", truncateQuoted(p))
		}
	}
	return c.result(TypeMeshReport)
}

// MeshListenPort is the UDP port the node agents listen on by default.
const MeshListenPort = 51820

// MeshKeepaliveSeconds is the PersistentKeepalive a node behind NAT sends
// its peers, so that they can reach it.
const MeshKeepaliveSeconds = 25

// MeshState is a cluster's part of its organisation's mesh.
type MeshState struct {
	ClusterID string `json:"clusterId"`
	Revision  int    `json:"revision"`
	Hash      string `json:"hash"`
	// Network is the organisation's mesh range (CIDR), 100.96.0.0/12 by
	// default: each node's address is in it, and it is routed over the mesh.
	Network string `json:"network"`
	// Nodes are this cluster's nodes: what each configures for itself.
	Nodes []MeshNode `json:"nodes"`
	// Peers are every node of the organisation, this cluster's included;
	// a node skips its own entry.
	Peers []MeshPeer `json:"peers"`
}

// MeshNode is what one node of the cluster configures for itself.
type MeshNode struct {
	Name string `json:"name"`
	// Address is the node's mesh address (an IP in Network).
	Address string `json:"address"`
	// Keepalive is the PersistentKeepalive (seconds) towards every peer: 25
	// for a node that cannot be reached from outside (behind NAT), 0
	// otherwise.
	Keepalive int `json:"keepalive,omitempty"`
	// Rotate asks the node for a new key: it makes one and publishes it as
	// its next key; it switches to it once the state lists it as its own
	// next key (every peer was given it) and MeshRotationGrace has passed.
	Rotate bool `json:"rotate,omitempty"`
}

// MeshRotationGrace is how long a node waits, once its next key is in the
// mesh state, before it switches to it: time for every cluster's nodes to
// take it.
const MeshRotationGrace = 10 * time.Second

// MeshPeer is one node as its peers configure it.
type MeshPeer struct {
	Cluster string `json:"cluster"`
	Node    string `json:"node"`
	// PublicKey is the node's WireGuard public key (base64, 32 bytes).
	PublicKey string `json:"publicKey"`
	// Endpoint is where to reach it (host:port); empty for a node that
	// cannot be reached from outside: it reaches its peers instead.
	Endpoint string `json:"endpoint,omitempty"`
	// AllowedIPs are the prefixes routed to it: its mesh address, and for
	// the nodes of other clusters their pod (and, for one node per
	// cluster, service) ranges when they overlap no other cluster's.
	AllowedIPs []string `json:"allowedIPs"`
	// NextPublicKey is the key the node will switch to: its peers accept it
	// beside the current one, and route to whichever of the two made the
	// latest handshake, so that the switch costs one handshake.
	NextPublicKey string `json:"nextPublicKey,omitempty"`
}

// MeshNodeReport is what a node agent publishes of itself and the cluster
// agent reports: its public key, where it can be reached, and its peers'
// handshakes.
type MeshNodeReport struct {
	Node      string `json:"node"`
	PublicKey string `json:"publicKey"`
	// NextPublicKey is the key it made to rotate to, not in use yet.
	NextPublicKey string `json:"nextPublicKey,omitempty"`
	// Endpoints are the node's candidate endpoints (host:port), the one on
	// the interface of the default route first.
	Endpoints []string `json:"endpoints"`
	// Revision is the MeshState revision the node has configured.
	Revision int `json:"revision"`
	// Peers are the peers' handshakes and counters, as the interface says.
	Peers []MeshPeerHealth `json:"peers,omitempty"`
	// Userspace says the interface is wireguard-go (no kernel module).
	Userspace bool `json:"userspace,omitempty"`
}

// MeshPeerHealth is one peer as a node's interface sees it.
type MeshPeerHealth struct {
	PublicKey string `json:"publicKey"`
	// Endpoint is the peer's endpoint now (it moves to where the peer's
	// packets come from).
	Endpoint string `json:"endpoint,omitempty"`
	// LastHandshake is the time of the latest handshake (RFC 3339); empty
	// when none.
	LastHandshake string `json:"lastHandshake,omitempty"`
	RxBytes       int64  `json:"rxBytes"`
	TxBytes       int64  `json:"txBytes"`
}

// Limits of a mesh frame.
const (
	maxMeshPeers  = 20000
	maxAllowedIPs = 64
	maxEndpoints  = 16
)

// ValidPublicKey checks a WireGuard public key: base64 of exactly 32 bytes.
func ValidPublicKey(s string) error {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("public key %q is not the base64 of 32 bytes", truncateQuoted(s))
	}
	return nil
}

// ValidEndpoint checks an endpoint: an IP address and a port, host:port.
func ValidEndpoint(s string) error {
	ap, err := netip.ParseAddrPort(s)
	if err != nil || ap.Port() == 0 {
		return fmt.Errorf("endpoint %q is not an IP address and port", truncateQuoted(s))
	}
	return nil
}

func truncateQuoted(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return s
}

// Validate checks a mesh state.
func (m MeshState) Validate() error {
	var c fieldCheck
	c.text("clusterId", m.ClusterID, maxShort)
	c.text("hash", m.Hash, maxShort)
	c.nonNegative("revision", m.Revision)
	network, err := netip.ParsePrefix(m.Network)
	if c.err == nil && err != nil {
		c.err = fmt.Errorf("network %q is not a CIDR", truncateQuoted(m.Network))
	}
	c.count("nodes", len(m.Nodes), maxMeshPeers)
	c.count("peers", len(m.Peers), maxMeshPeers)
	for _, n := range m.Nodes {
		c.text("node name", n.Name, maxName)
		if c.err == nil {
			a, err := netip.ParseAddr(n.Address)
			if err != nil || !network.Contains(a) {
				c.err = fmt.Errorf("node %s: address %q is not in %s", n.Name, truncateQuoted(n.Address), m.Network)
			}
		}
		if c.err == nil && (n.Keepalive < 0 || n.Keepalive > 65535) {
			c.err = fmt.Errorf("node %s: keepalive %d is not 0..65535 seconds", n.Name, n.Keepalive)
		}
	}
	keys := map[string]bool{}
	for _, p := range m.Peers {
		c.text("peer cluster", p.Cluster, maxShort)
		c.text("peer node", p.Node, maxName)
		if c.err == nil {
			c.err = ValidPublicKey(p.PublicKey)
		}
		if c.err == nil && keys[p.PublicKey] {
			c.err = fmt.Errorf("public key %s is given to two peers", p.PublicKey)
		}
		keys[p.PublicKey] = true
		if c.err == nil && p.NextPublicKey != "" {
			c.err = ValidPublicKey(p.NextPublicKey)
			if c.err == nil && keys[p.NextPublicKey] {
				c.err = fmt.Errorf("public key %s is given to two peers", p.NextPublicKey)
			}
			keys[p.NextPublicKey] = true
		}
		if c.err == nil && p.Endpoint != "" {
			c.err = ValidEndpoint(p.Endpoint)
		}
		c.count("allowedIPs", len(p.AllowedIPs), maxAllowedIPs)
		for _, a := range p.AllowedIPs {
			if _, err := netip.ParsePrefix(a); c.err == nil && err != nil {
				c.err = fmt.Errorf("peer %s: allowed IP %q is not a CIDR", p.Node, truncateQuoted(a))
			}
		}
	}
	return c.result("mesh_state")
}

// Validate checks a node's report.
func (r MeshNodeReport) Validate() error {
	var c fieldCheck
	c.text("node", r.Node, maxName)
	if c.err == nil {
		c.err = ValidPublicKey(r.PublicKey)
	}
	if c.err == nil && r.NextPublicKey != "" {
		c.err = ValidPublicKey(r.NextPublicKey)
	}
	c.nonNegative("revision", r.Revision)
	c.count("endpoints", len(r.Endpoints), maxEndpoints)
	for _, e := range r.Endpoints {
		if c.err == nil {
			c.err = ValidEndpoint(e)
		}
	}
	c.count("peers", len(r.Peers), maxMeshPeers)
	for _, p := range r.Peers {
		if c.err == nil {
			c.err = ValidPublicKey(p.PublicKey)
		}
		if c.err == nil && p.Endpoint != "" {
			c.err = ValidEndpoint(p.Endpoint)
		}
		c.text("lastHandshake", p.LastHandshake, maxShort)
		c.nonNegative("rxBytes", int(min(p.RxBytes, 1<<40)))
		c.nonNegative("txBytes", int(min(p.TxBytes, 1<<40)))
	}
	return c.result("mesh_node")
}
