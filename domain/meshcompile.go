package domain

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// MeshKeepaliveSeconds is the PersistentKeepalive of a node that cannot be
// reached from outside (behind NAT): it keeps its paths to its peers open.
const MeshKeepaliveSeconds = 25

// MeshCompiled is one cluster's part of its organisation's mesh, as its
// agent receives it (transport.MeshState without the revision).
type MeshCompiled struct {
	Network string
	Nodes   []MeshCompiledNode
	Peers   []MeshCompiledPeer
}

// MeshCompiledNode is what one node of the cluster configures for itself.
type MeshCompiledNode struct {
	Name      string
	Address   string
	Keepalive int
	// Rotate asks the node for a new key (until it stages one).
	Rotate bool `json:",omitempty"`
}

// MeshCompiledPeer is one node as its peers configure it.
type MeshCompiledPeer struct {
	Cluster    string
	Node       string
	PublicKey  string
	Endpoint   string
	AllowedIPs []string
	// NextPublicKey is the key the node will switch to.
	NextPublicKey string `json:",omitempty"`
}

// MeshOverlap says why a cluster is meshed by node address only.
type MeshOverlap struct {
	ClusterID string
	Reason    string
}

// meshRanges are the pod and service ranges a cluster routes over the mesh.
type meshRanges struct {
	pods    map[string][]netip.Prefix // node -> pod ranges
	service []netip.Prefix
	gateway string // the node that carries the service ranges
}

// Overlaps returns the clusters whose pod or service ranges overlap another
// cluster's: those are meshed by node address only (every K3s cluster
// defaults to 10.42.0.0/16 for pods and 10.43.0.0/16 for services), each
// with the reason and the K3s flags that fix it.
func (m *Mesh) Overlaps() []MeshOverlap {
	return overlaps(m.ranges())
}

// overlaps finds, in one sweep over every range sorted by address, the
// ranges of different clusters that overlap (CIDR ranges overlap only by
// nesting: a stack of the ranges that contain the current one is enough).
func overlaps(ranges map[string]*meshRanges) []MeshOverlap {
	type owned struct {
		p       netip.Prefix
		cluster string
	}
	var all []owned
	for id, r := range ranges {
		for _, p := range r.all() {
			all = append(all, owned{p.Masked(), id})
		}
	}
	slices.SortFunc(all, func(a, b owned) int {
		if c := a.p.Addr().Compare(b.p.Addr()); c != 0 {
			return c
		}
		if a.p.Bits() != b.p.Bits() {
			return a.p.Bits() - b.p.Bits()
		}
		return strings.Compare(a.cluster, b.cluster)
	})
	found := map[string]map[string]string{} // cluster -> other cluster -> sentence
	note := func(a, b owned) {
		if found[a.cluster] == nil {
			found[a.cluster] = map[string]string{}
		}
		if _, ok := found[a.cluster][b.cluster]; !ok {
			found[a.cluster][b.cluster] = fmt.Sprintf("%s of cluster %s overlaps %s of cluster %s", a.p, a.cluster, b.p, b.cluster)
		}
	}
	var open []owned
	for _, q := range all {
		for len(open) > 0 && !open[len(open)-1].p.Contains(q.p.Addr()) {
			open = open[:len(open)-1]
		}
		for _, p := range open {
			if p.cluster != q.cluster {
				note(p, q)
				note(q, p)
			}
		}
		open = append(open, q)
	}
	ids := make([]string, 0, len(found))
	for id := range found {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []MeshOverlap
	for _, a := range ids {
		others := make([]string, 0, len(found[a]))
		for b := range found[a] {
			others = append(others, b)
		}
		slices.Sort(others)
		var with []string
		for _, b := range others {
			with = append(with, found[a][b])
		}
		out = append(out, MeshOverlap{ClusterID: a, Reason: strings.Join(with, "; ") +
			": its nodes are meshed by their mesh addresses only. Give every cluster ranges of its own when it is created " +
			"(K3s: --cluster-cidr and --service-cidr, for example --cluster-cidr 10.44.0.0/16 --service-cidr 10.45.0.0/16)"})
	}
	return out
}

func (r meshRanges) all() []netip.Prefix {
	var out []netip.Prefix
	for _, ps := range r.pods {
		out = append(out, ps...)
	}
	return append(out, r.service...)
}

func overlapping(a, b []netip.Prefix) (netip.Prefix, netip.Prefix, bool) {
	for _, p := range a {
		for _, q := range b {
			if p.Overlaps(q) {
				return p, q, true
			}
		}
	}
	return netip.Prefix{}, netip.Prefix{}, false
}

func (m *Mesh) ranges() map[string]*meshRanges {
	out := map[string]*meshRanges{}
	get := func(id string) *meshRanges {
		if out[id] == nil {
			out[id] = &meshRanges{pods: map[string][]netip.Prefix{}}
		}
		return out[id]
	}
	for _, n := range m.sortedNodes() {
		r := get(n.ClusterID)
		for _, c := range n.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				r.pods[n.Node] = append(r.pods[n.Node], p)
			}
		}
		if r.gateway == "" || addrLess(n.Address, m.Nodes[MeshNodeKey(n.ClusterID, r.gateway)].Address) {
			r.gateway = n.Node
		}
	}
	for id, cidrs := range m.ServiceCIDRs {
		if _, ok := out[id]; !ok {
			continue // no mesh node to carry them
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out[id].service = append(out[id].service, p)
			}
		}
	}
	return out
}

func addrLess(a, b string) bool {
	x, err1 := netip.ParseAddr(a)
	y, err2 := netip.ParseAddr(b)
	if err1 != nil || err2 != nil {
		return a < b
	}
	return x.Less(y)
}

// Compile returns cluster clusterID's part of the mesh: its nodes' addresses
// and every node of the organisation as a peer. A peer's allowed IPs are its
// mesh address, and for a node of another cluster whose ranges overlap no
// other cluster's, its pod ranges (and the service ranges, on the cluster's
// gateway: its node of the lowest address). A node that may be behind NAT
// (no endpoint, or no public address: Keepalive) keeps its paths open with
// a PersistentKeepalive of 25 s, and its peers learn where it is from its
// packets.
func (m *Mesh) Compile(clusterID string) MeshCompiled {
	return m.CompileAll()[clusterID]
}

// CompileAll compiles every cluster's part at once (what one change to the
// mesh recompiles): the ranges and their overlaps are worked out once.
func (m *Mesh) CompileAll() map[string]MeshCompiled {
	ranges := m.ranges()
	overlapped := map[string]bool{}
	for _, o := range overlaps(ranges) {
		overlapped[o.ClusterID] = true
	}
	nodes := m.sortedNodes()
	// The peers as another cluster sees them, and as their own cluster does.
	far := make([]MeshCompiledPeer, len(nodes))
	near := make([]MeshCompiledPeer, len(nodes))
	for i, n := range nodes {
		near[i] = MeshCompiledPeer{Cluster: n.ClusterID, Node: n.Node, PublicKey: n.PublicKey, Endpoint: n.Endpoint, AllowedIPs: []string{n.Address + "/32"},
			NextPublicKey: n.NextPublicKey}
		far[i] = near[i]
		if !overlapped[n.ClusterID] {
			r := ranges[n.ClusterID]
			ips := slices.Clone(near[i].AllowedIPs)
			for _, pr := range r.pods[n.Node] {
				ips = append(ips, pr.String())
			}
			if r.gateway == n.Node {
				for _, s := range r.service {
					ips = append(ips, s.String())
				}
			}
			far[i].AllowedIPs = ips
		}
	}
	out := map[string]MeshCompiled{}
	for _, id := range m.Clusters() {
		c := MeshCompiled{Network: m.NetworkOrDefault(), Nodes: []MeshCompiledNode{}, Peers: make([]MeshCompiledPeer, 0, len(nodes))}
		for i, n := range nodes {
			if n.ClusterID == id {
				c.Peers = append(c.Peers, near[i])
				node := MeshCompiledNode{Name: n.Node, Address: n.Address, Rotate: n.RotateRequested && n.NextPublicKey == ""}
				if n.Keepalive || n.Endpoint == "" {
					node.Keepalive = MeshKeepaliveSeconds
				}
				c.Nodes = append(c.Nodes, node)
			} else {
				c.Peers = append(c.Peers, far[i])
			}
		}
		out[id] = c
	}
	return out
}

// Clusters returns the clusters that have nodes in the mesh.
func (m *Mesh) Clusters() []string {
	var out []string
	for _, n := range m.Nodes {
		out = append(out, n.ClusterID)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
