package domain

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// The WireGuard mesh of an organisation: every node of every cluster on one
// private network. Its stream (mesh-<org id>) holds the network's range and
// each node's membership: the address allocated to it, its public key, the
// endpoint its peers use, its pod ranges. Keys never reach the control
// plane: only public keys do.

// MeshStream is the stream of an organisation's mesh.
func MeshStream(orgID string) string { return "mesh-" + orgID }

// DefaultMeshNetwork is an organisation's mesh range unless set otherwise:
// inside the shared address space of RFC 6598, which no cluster uses for
// pods or services by default.
const DefaultMeshNetwork = "100.96.0.0/12"

// MeshKeyLifetime is how long a node keeps a key before it is asked for a
// new one.
const MeshKeyLifetime = 90 * 24 * time.Hour

// MeshAddressQuarantine is how long the address of a node that left is not
// given to another: a peer list that still names it has time to go.
const MeshAddressQuarantine = 24 * time.Hour

// MeshNode is one node's membership.
type MeshNode struct {
	ClusterID string `json:"clusterId"`
	Node      string `json:"node"`
	Address   string `json:"address"`
	PublicKey string `json:"publicKey"`
	// Endpoint is where its peers reach it (IP:port); empty for a node that
	// cannot be reached from outside.
	Endpoint string `json:"endpoint,omitempty"`
	// PodCIDRs are the node's pod ranges (Node.spec.podCIDRs).
	PodCIDRs []string `json:"podCIDRs,omitempty"`
	// Keepalive says the node keeps its paths open (PersistentKeepalive):
	// it may be behind NAT (no public address of its own).
	Keepalive bool      `json:"keepalive,omitempty"`
	JoinedAt  time.Time `json:"joinedAt"`
	// RotateRequested says a key rotation was asked for and the node has
	// not switched to a new key yet.
	RotateRequested bool      `json:"rotateRequested,omitempty"`
	KeyRotatedAt    time.Time `json:"keyRotatedAt"`
	// NextPublicKey is the key the node made to switch to (its peers accept
	// it beside the current one until it does).
	NextPublicKey string `json:"nextPublicKey,omitempty"`
}

// ReleasedAddress is the address of a node that left, and when.
type ReleasedAddress struct {
	Address string    `json:"address"`
	At      time.Time `json:"at"`
}

// Mesh is an organisation's mesh.
type Mesh struct {
	OrgID string `json:"orgId,omitempty"`
	// Network is the range addresses are allocated from ("" until set:
	// DefaultMeshNetwork).
	Network string `json:"network,omitempty"`
	// Nodes by MeshNodeKey.
	Nodes    map[string]*MeshNode `json:"nodes"`
	Released []ReleasedAddress    `json:"released,omitempty"`
	// ServiceCIDRs are each cluster's service ranges, as its agent reports.
	ServiceCIDRs map[string][]string `json:"serviceCIDRs,omitempty"`
}

// NewMesh returns the empty state of a mesh stream.
func NewMesh() *Mesh {
	return &Mesh{Nodes: map[string]*MeshNode{}, ServiceCIDRs: map[string][]string{}}
}

// MeshNodeKey names a node within its organisation's mesh.
func MeshNodeKey(clusterID, node string) string { return clusterID + "/" + node }

// NetworkOrDefault is the mesh's range.
func (m *Mesh) NetworkOrDefault() string {
	if m.Network == "" {
		return DefaultMeshNetwork
	}
	return m.Network
}

// Events of the mesh.
type (
	// MeshSettingsUpdated sets the organisation's mesh range.
	MeshSettingsUpdated struct {
		OrgID   string `json:"orgId"`
		Network string `json:"network"`
	}
	// MeshNodeJoined records a node joining: the address it was given.
	MeshNodeJoined struct {
		OrgID     string   `json:"orgId"`
		ClusterID string   `json:"clusterId"`
		Node      string   `json:"node"`
		Address   string   `json:"address"`
		PublicKey string   `json:"publicKey"`
		Endpoint  string   `json:"endpoint,omitempty"`
		PodCIDRs  []string `json:"podCIDRs,omitempty"`
		Keepalive bool     `json:"keepalive,omitempty"`
	}
	// MeshNodeChanged records a node's endpoint, pod ranges or keepalive
	// changing.
	MeshNodeChanged struct {
		OrgID     string   `json:"orgId"`
		ClusterID string   `json:"clusterId"`
		Node      string   `json:"node"`
		Endpoint  string   `json:"endpoint,omitempty"`
		PodCIDRs  []string `json:"podCIDRs,omitempty"`
		Keepalive bool     `json:"keepalive,omitempty"`
	}
	// MeshKeyRotated records a node publishing a new public key.
	MeshKeyRotated struct {
		OrgID     string `json:"orgId"`
		ClusterID string `json:"clusterId"`
		Node      string `json:"node"`
		PublicKey string `json:"publicKey"`
		// Requested says the rotation was asked for (schedule or command).
		Requested bool `json:"requested,omitempty"`
	}
	// MeshKeyStaged records the key a node will switch to.
	MeshKeyStaged struct {
		OrgID         string `json:"orgId"`
		ClusterID     string `json:"clusterId"`
		Node          string `json:"node"`
		NextPublicKey string `json:"nextPublicKey"`
	}
	// MeshKeyRotationRequested asks a node for a new key.
	MeshKeyRotationRequested struct {
		OrgID     string `json:"orgId"`
		ClusterID string `json:"clusterId"`
		Node      string `json:"node"`
		// Reason: "schedule" or "request".
		Reason string `json:"reason"`
	}
	// MeshNodeLeft records a node leaving: its address is quarantined.
	MeshNodeLeft struct {
		OrgID     string `json:"orgId"`
		ClusterID string `json:"clusterId"`
		Node      string `json:"node"`
		Address   string `json:"address"`
		Reason    string `json:"reason"`
	}
	// MeshServiceCIDRsReported records a cluster's service ranges.
	MeshServiceCIDRsReported struct {
		OrgID        string   `json:"orgId"`
		ClusterID    string   `json:"clusterId"`
		ServiceCIDRs []string `json:"serviceCIDRs"`
	}
)

func (MeshSettingsUpdated) EventType() string      { return "mesh.settings.updated" }
func (MeshNodeJoined) EventType() string           { return "mesh.node.joined" }
func (MeshNodeChanged) EventType() string          { return "mesh.node.changed" }
func (MeshKeyRotated) EventType() string           { return "mesh.key.rotated" }
func (MeshKeyRotationRequested) EventType() string { return "mesh.key.rotation_requested" }
func (MeshKeyStaged) EventType() string            { return "mesh.key.staged" }
func (MeshNodeLeft) EventType() string             { return "mesh.node.left" }
func (MeshServiceCIDRsReported) EventType() string { return "mesh.service_cidrs.reported" }

// Apply folds an event without its time (see ApplyAt).
func (m *Mesh) Apply(e Event) { m.ApplyAt(e, time.Time{}) }

// ApplyAt folds an event that happened at.
func (m *Mesh) ApplyAt(e Event, at time.Time) {
	switch e := e.(type) {
	case MeshSettingsUpdated:
		m.OrgID, m.Network = e.OrgID, e.Network
	case MeshNodeJoined:
		m.OrgID = e.OrgID
		m.Nodes[MeshNodeKey(e.ClusterID, e.Node)] = &MeshNode{ClusterID: e.ClusterID, Node: e.Node, Address: e.Address,
			PublicKey: e.PublicKey, Endpoint: e.Endpoint, PodCIDRs: e.PodCIDRs, Keepalive: e.Keepalive, JoinedAt: at, KeyRotatedAt: at}
		m.Released = slices.DeleteFunc(m.Released, func(r ReleasedAddress) bool { return r.Address == e.Address })
	case MeshNodeChanged:
		if n := m.Nodes[MeshNodeKey(e.ClusterID, e.Node)]; n != nil {
			n.Endpoint, n.PodCIDRs, n.Keepalive = e.Endpoint, e.PodCIDRs, e.Keepalive
		}
	case MeshKeyRotated:
		if n := m.Nodes[MeshNodeKey(e.ClusterID, e.Node)]; n != nil {
			n.PublicKey, n.RotateRequested, n.KeyRotatedAt, n.NextPublicKey = e.PublicKey, false, at, ""
		}
	case MeshKeyStaged:
		if n := m.Nodes[MeshNodeKey(e.ClusterID, e.Node)]; n != nil {
			n.NextPublicKey = e.NextPublicKey
		}
	case MeshKeyRotationRequested:
		if n := m.Nodes[MeshNodeKey(e.ClusterID, e.Node)]; n != nil {
			n.RotateRequested = true
		}
	case MeshNodeLeft:
		delete(m.Nodes, MeshNodeKey(e.ClusterID, e.Node))
		m.Released = append(m.Released, ReleasedAddress{Address: e.Address, At: at})
	case MeshServiceCIDRsReported:
		if len(e.ServiceCIDRs) == 0 {
			delete(m.ServiceCIDRs, e.ClusterID)
		} else {
			m.ServiceCIDRs[e.ClusterID] = e.ServiceCIDRs
		}
	}
}

// MeshCommand is a command of an organisation's mesh.
type MeshCommand interface{ meshCommand() }

// MeshNodeReport is one node as its cluster's agent reports it.
type MeshNodeReport struct {
	Node      string
	PublicKey string
	// Endpoint is the one its peers should use ("" when it cannot be
	// reached from outside).
	Endpoint string
	// NextPublicKey is the key it made to switch to ("" when none).
	NextPublicKey string
	PodCIDRs      []string
	// Keepalive: the node keeps its paths open (it has no public address,
	// or cannot be reached at its endpoint).
	Keepalive bool
}

// ReportMeshNodes records what a cluster's agent reports of its nodes:
// Nodes are those running the mesh's node agent, ClusterNodes every node of
// the cluster (a mesh node that is no longer one of them leaves).
type ReportMeshNodes struct {
	OrgID        string
	ClusterID    string
	Nodes        []MeshNodeReport
	ClusterNodes []string
	ServiceCIDRs []string
}

// UpdateMeshSettings sets the mesh range.
type UpdateMeshSettings struct {
	OrgID   string
	Network string
}

// RequestMeshKeyRotation asks the named nodes (every node of the cluster
// when Node is empty) for a new key.
type RequestMeshKeyRotation struct {
	OrgID     string
	ClusterID string
	Node      string
	Reason    string
}

// RemoveMeshCluster removes every node of a cluster (the cluster was
// deleted).
type RemoveMeshCluster struct {
	OrgID     string
	ClusterID string
}

func (ReportMeshNodes) meshCommand()        {}
func (UpdateMeshSettings) meshCommand()     {}
func (RequestMeshKeyRotation) meshCommand() {}
func (RemoveMeshCluster) meshCommand()      {}

// ValidateMeshKey checks a WireGuard public key: base64 of exactly 32 bytes.
func ValidateMeshKey(s string) error {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 32 {
		return invalidf("public key %q is not the base64 of 32 bytes", clip(s))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// ValidateMeshNetwork checks a mesh range: an IPv4 CIDR of /8 to /24, its
// own network address.
func ValidateMeshNetwork(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, invalidf("mesh network %q is not an IPv4 CIDR", clip(s))
	}
	if p.Bits() < 8 || p.Bits() > 24 {
		return netip.Prefix{}, invalidf("mesh network %s: the prefix length must be 8 to 24", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, invalidf("mesh network %s is not a network address (did you mean %s?)", s, p.Masked())
	}
	return p, nil
}

// Decide decides a mesh command.
func (m *Mesh) Decide(cmd MeshCommand, meta Meta) (Decision, error) {
	if err := meta.Validate(); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case ReportMeshNodes:
		return m.decideReport(c, meta)
	case UpdateMeshSettings:
		p, err := ValidateMeshNetwork(c.Network)
		if err != nil {
			return Decision{}, err
		}
		if p.String() == m.NetworkOrDefault() && m.Network != "" {
			return Decision{}, nil
		}
		for _, n := range m.sortedNodes() {
			if !p.Contains(netip.MustParseAddr(n.Address)) {
				return Decision{}, conflictf("mesh network %s does not contain %s, the address of node %s: a node keeps its address, so the range can only grow", p, n.Address, n.Node)
			}
		}
		return decided(MeshSettingsUpdated{OrgID: c.OrgID, Network: p.String()}), nil
	case RequestMeshKeyRotation:
		if err := ValidateID("cluster", c.ClusterID); err != nil {
			return Decision{}, err
		}
		reason := c.Reason
		if reason == "" {
			reason = "request"
		}
		var events []Event
		for _, n := range m.sortedNodes() {
			if n.ClusterID == c.ClusterID && (c.Node == "" || n.Node == c.Node) && !n.RotateRequested {
				events = append(events, MeshKeyRotationRequested{OrgID: c.OrgID, ClusterID: n.ClusterID, Node: n.Node, Reason: reason})
			}
		}
		if len(events) == 0 && c.Node != "" && m.Nodes[MeshNodeKey(c.ClusterID, c.Node)] == nil {
			return Decision{}, notFoundf("node %s is not in the mesh", c.Node)
		}
		return decided(events...), nil
	case RemoveMeshCluster:
		var events []Event
		for _, n := range m.sortedNodes() {
			if n.ClusterID == c.ClusterID {
				events = append(events, MeshNodeLeft{OrgID: c.OrgID, ClusterID: n.ClusterID, Node: n.Node, Address: n.Address, Reason: "cluster deleted"})
			}
		}
		if len(m.ServiceCIDRs[c.ClusterID]) > 0 {
			events = append(events, MeshServiceCIDRsReported{OrgID: c.OrgID, ClusterID: c.ClusterID})
		}
		return decided(events...), nil
	}
	return Decision{}, invalidf("command %T is not a mesh command", cmd)
}

func (m *Mesh) sortedNodes() []*MeshNode {
	keys := make([]string, 0, len(m.Nodes))
	for k := range m.Nodes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*MeshNode, len(keys))
	for i, k := range keys {
		out[i] = m.Nodes[k]
	}
	return out
}

func validCIDRs(field string, cidrs []string) ([]string, error) {
	if len(cidrs) > 16 {
		return nil, invalidf("%s: at most 16 ranges", field)
	}
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, invalidf("%s: %q is not a CIDR", field, clip(c))
		}
		out = append(out, p.Masked().String())
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// decideReport turns a cluster's report into joins, changes, key rotations
// and leaves. A report that is wrong anywhere (a key that is not one, an
// endpoint that does not parse, a key another node already has) changes
// nothing.
func (m *Mesh) decideReport(c ReportMeshNodes, meta Meta) (Decision, error) {
	if err := ValidateID("cluster", c.ClusterID); err != nil {
		return Decision{}, err
	}
	if len(c.Nodes) > 5000 || len(c.ClusterNodes) > 5000 {
		return Decision{}, invalidf("a cluster reports at most 5000 nodes")
	}
	svc, err := validCIDRs("serviceCIDRs", c.ServiceCIDRs)
	if err != nil {
		return Decision{}, err
	}
	owner := map[string]string{} // public key (current or next) -> node key
	for k, n := range m.Nodes {
		owner[n.PublicKey] = k
		if n.NextPublicKey != "" {
			owner[n.NextPublicKey] = k
		}
	}
	seen := map[string]bool{}
	type checked struct {
		r        MeshNodeReport
		podCIDRs []string
	}
	var reports []checked
	for _, r := range c.Nodes {
		if err := ValidateText("node", r.Node, 253); err != nil || r.Node == "" {
			return Decision{}, invalidf("node name %q is not a node name", clip(r.Node))
		}
		if seen[r.Node] {
			return Decision{}, invalidf("node %s is reported twice", r.Node)
		}
		seen[r.Node] = true
		if err := ValidateMeshKey(r.PublicKey); err != nil {
			return Decision{}, invalidf("node %s: %v", r.Node, err)
		}
		if r.Endpoint != "" {
			ap, err := netip.ParseAddrPort(r.Endpoint)
			if err != nil || ap.Port() == 0 {
				return Decision{}, invalidf("node %s: endpoint %q is not an IP address and port", r.Node, clip(r.Endpoint))
			}
		}
		if k, ok := owner[r.PublicKey]; ok && k != MeshNodeKey(c.ClusterID, r.Node) {
			return Decision{}, conflictf("node %s claims the public key of node %s", r.Node, strings.SplitN(k, "/", 2)[1])
		}
		if r.NextPublicKey != "" {
			if err := ValidateMeshKey(r.NextPublicKey); err != nil {
				return Decision{}, invalidf("node %s: next key: %v", r.Node, err)
			}
			if k, ok := owner[r.NextPublicKey]; ok && k != MeshNodeKey(c.ClusterID, r.Node) {
				return Decision{}, conflictf("node %s claims the public key of node %s", r.Node, strings.SplitN(k, "/", 2)[1])
			}
			if r.NextPublicKey == r.PublicKey {
				return Decision{}, invalidf("node %s: its next key is its current key", r.Node)
			}
		}
		pods, err := validCIDRs("node "+r.Node+" podCIDRs", r.PodCIDRs)
		if err != nil {
			return Decision{}, err
		}
		reports = append(reports, checked{r, pods})
	}
	for i := range reports {
		for j := i + 1; j < len(reports); j++ {
			a, b := reports[i].r, reports[j].r
			if a.PublicKey == b.PublicKey || a.NextPublicKey != "" && (a.NextPublicKey == b.PublicKey || a.NextPublicKey == b.NextPublicKey) ||
				b.NextPublicKey != "" && b.NextPublicKey == a.PublicKey {
				return Decision{}, conflictf("nodes %s and %s report the same public key", reports[i].r.Node, reports[j].r.Node)
			}
		}
	}
	inCluster := map[string]bool{}
	for _, n := range c.ClusterNodes {
		inCluster[n] = true
	}
	var events []Event
	// Leaves first: their addresses stay quarantined either way.
	for _, n := range m.sortedNodes() {
		if n.ClusterID == c.ClusterID && !inCluster[n.Node] {
			events = append(events, MeshNodeLeft{OrgID: c.OrgID, ClusterID: n.ClusterID, Node: n.Node, Address: n.Address, Reason: "node removed from the cluster"})
		}
	}
	taken := map[string]bool{}
	for _, n := range m.Nodes {
		taken[n.Address] = true
	}
	network, _ := ValidateMeshNetwork(m.NetworkOrDefault())
	sort.Slice(reports, func(i, j int) bool { return reports[i].r.Node < reports[j].r.Node })
	for _, ch := range reports {
		r := ch.r
		if !inCluster[r.Node] && len(c.ClusterNodes) > 0 {
			continue // leaving, or not a node of this cluster
		}
		cur := m.Nodes[MeshNodeKey(c.ClusterID, r.Node)]
		if cur == nil {
			addr, ok := m.allocate(network, taken, meta.Now)
			if !ok {
				return Decision{}, conflictf("mesh network %s has no free address for node %s", network, r.Node)
			}
			taken[addr] = true
			events = append(events, MeshNodeJoined{OrgID: c.OrgID, ClusterID: c.ClusterID, Node: r.Node, Address: addr,
				PublicKey: r.PublicKey, Endpoint: r.Endpoint, PodCIDRs: ch.podCIDRs, Keepalive: r.Keepalive || r.Endpoint == ""})
			continue
		}
		if cur.PublicKey != r.PublicKey {
			events = append(events, MeshKeyRotated{OrgID: c.OrgID, ClusterID: c.ClusterID, Node: r.Node, PublicKey: r.PublicKey, Requested: cur.RotateRequested})
		}
		if r.NextPublicKey != "" && r.NextPublicKey != cur.NextPublicKey {
			events = append(events, MeshKeyStaged{OrgID: c.OrgID, ClusterID: c.ClusterID, Node: r.Node, NextPublicKey: r.NextPublicKey})
		}
		keepalive := r.Keepalive || r.Endpoint == ""
		if cur.Endpoint != r.Endpoint || !slices.Equal(cur.PodCIDRs, ch.podCIDRs) || cur.Keepalive != keepalive {
			events = append(events, MeshNodeChanged{OrgID: c.OrgID, ClusterID: c.ClusterID, Node: r.Node, Endpoint: r.Endpoint,
				PodCIDRs: ch.podCIDRs, Keepalive: keepalive})
		}
	}
	if !slices.Equal(m.ServiceCIDRs[c.ClusterID], svc) && (len(svc) > 0 || len(m.ServiceCIDRs[c.ClusterID]) > 0) {
		events = append(events, MeshServiceCIDRsReported{OrgID: c.OrgID, ClusterID: c.ClusterID, ServiceCIDRs: svc})
	}
	return decided(events...), nil
}

// allocate returns the lowest address of network that no node holds and no
// node left within MeshAddressQuarantine of now: a node keeps its address
// for as long as it is in the mesh, and a new one never gets an address a
// peer list may still give to another.
func (m *Mesh) allocate(network netip.Prefix, taken map[string]bool, now time.Time) (string, bool) {
	quarantined := map[string]bool{}
	for _, r := range m.Released {
		if now.Sub(r.At) < MeshAddressQuarantine {
			quarantined[r.Address] = true
		}
	}
	last := lastAddr(network)
	for a := network.Addr().Next(); a.IsValid() && a.Less(last); a = a.Next() {
		s := a.String()
		if !taken[s] && !quarantined[s] {
			return s, true
		}
	}
	return "", false
}

// lastAddr is a prefix's last (broadcast) address.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// auditMesh describes the mesh's events for the audit log.
func auditMesh(e Event) (AuditEntry, bool) {
	switch e := e.(type) {
	case MeshSettingsUpdated:
		return AuditEntry{"mesh.settings.update", "organisation", e.OrgID, "network " + e.Network}, true
	case MeshNodeJoined:
		return AuditEntry{"mesh.node.join", "cluster", e.ClusterID, fmt.Sprintf("node %s at %s", e.Node, e.Address)}, true
	case MeshNodeChanged:
		ep := e.Endpoint
		if ep == "" {
			ep = "no endpoint (behind NAT)"
		}
		return AuditEntry{"mesh.node.update", "cluster", e.ClusterID, fmt.Sprintf("node %s: %s", e.Node, ep)}, true
	case MeshKeyRotated:
		return AuditEntry{"mesh.key.rotate", "cluster", e.ClusterID, fmt.Sprintf("node %s: new key %s", e.Node, KeyFingerprint(e.PublicKey))}, true
	case MeshKeyRotationRequested:
		return AuditEntry{"mesh.key.rotate", "cluster", e.ClusterID, fmt.Sprintf("node %s: rotation requested (%s)", e.Node, e.Reason)}, true
	case MeshKeyStaged:
		return AuditEntry{"mesh.key.rotate", "cluster", e.ClusterID, fmt.Sprintf("node %s: next key %s given to its peers", e.Node, KeyFingerprint(e.NextPublicKey))}, true
	case MeshNodeLeft:
		return AuditEntry{"mesh.node.leave", "cluster", e.ClusterID, fmt.Sprintf("node %s (%s): %s", e.Node, e.Address, e.Reason)}, true
	case MeshRevisionCompiled:
		return AuditEntry{"mesh.revision.compile", "cluster", e.ClusterID, fmt.Sprintf("%d nodes, %d peers, %s", len(e.Mesh.Nodes), len(e.Mesh.Peers), e.Hash[:min(12, len(e.Hash))])}, true
	case MeshServiceCIDRsReported:
		return AuditEntry{"mesh.cluster.update", "cluster", e.ClusterID, "service ranges " + strings.Join(e.ServiceCIDRs, ", ")}, true
	}
	return AuditEntry{}, false
}

// KeyFingerprint is a public key's short form for people: its first 8
// base64 characters.
func KeyFingerprint(k string) string {
	if len(k) > 8 {
		return k[:8]
	}
	return k
}
