package agentlink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The mesh through the link: what agents report of their nodes is decided
// on the organisation's mesh stream; every change recompiles each cluster's
// part, recorded as that cluster's mesh revision when it differs, and sent
// to its agents.

// OnMeshReport decides what an agent reports of its nodes. The endpoint
// peers use is the node's first candidate (the interface of its default
// route); a node with no public address keeps its paths open (it may be
// behind NAT). A report the mesh refuses (a node claiming another node's
// key) changes nothing and is logged.
func (l *Link) OnMeshReport(ctx context.Context, p transport.Peer, r transport.MeshReport) {
	cmd := domain.ReportMeshNodes{OrgID: p.OrgID, ClusterID: p.ClusterID}
	pods := map[string][]string{}
	for _, n := range r.ClusterNodes {
		cmd.ClusterNodes = append(cmd.ClusterNodes, n.Name)
		pods[n.Name] = n.PodCIDRs
	}
	cmd.ServiceCIDRs = r.ServiceCIDRs
	for _, n := range r.Nodes {
		nr := domain.MeshNodeReport{Node: n.Node, PublicKey: n.PublicKey, NextPublicKey: n.NextPublicKey, PodCIDRs: pods[n.Node], Keepalive: true}
		if len(n.Endpoints) > 0 {
			nr.Endpoint = n.Endpoints[0]
		}
		for _, e := range n.Endpoints {
			if ap, err := netip.ParseAddrPort(e); err == nil && publicAddr(ap.Addr()) {
				nr.Keepalive = false
			}
		}
		cmd.Nodes = append(cmd.Nodes, nr)
	}
	if l.cfg.Telemetry != nil {
		// The health of the cluster's nodes only: a report ConfigMap can
		// outlive its node.
		var kept []transport.MeshNodeReport
		for _, n := range r.Nodes {
			if _, ok := pods[n.Node]; ok {
				kept = append(kept, n)
			}
		}
		if err := l.cfg.Telemetry.SaveMeshStatus(ctx, telemetry.Source{OrgID: p.OrgID, ClusterID: p.ClusterID}, kept); err != nil {
			l.cfg.Logger.Warn("saving a mesh report", "server", p.Name, "err", err)
		}
	}
	// The handshakes change at every report, what the mesh decides on
	// rarely: the same again within meshDecideEvery is not decided again.
	b, _ := json.Marshal(cmd)
	sum := sha256.Sum256(b)
	key := hex.EncodeToString(sum[:])
	now := l.cfg.Now()
	if v, ok := l.meshSeen.Load(p.ClusterID); ok {
		if s := v.(meshSeen); s.hash == key && now.Sub(s.at) < meshDecideEvery {
			return
		}
	}
	actor := domain.Actor{Kind: domain.ActorAgent, ID: p.ServerID, Name: p.Name}
	if err := l.MeshCommand(ctx, dispatch.Context{Actor: actor}, p.OrgID, cmd); err != nil {
		l.meshSeen.Delete(p.ClusterID)
		l.cfg.Logger.Warn("the mesh refused a report of the cluster's nodes", "server", p.Name, "err", err)
		return
	}
	l.meshSeen.Store(p.ClusterID, meshSeen{hash: key, at: now})
}

// meshDecideEvery is how often an unchanged mesh report is decided again.
const meshDecideEvery = 5 * time.Minute

type meshSeen struct {
	hash string
	at   time.Time
}

// publicAddr reports whether a is reachable from the internet: not private,
// loopback, link-local, shared (RFC 6598) or documentation space.
func publicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsGlobalUnicast() || a.IsPrivate() {
		return false
	}
	for _, p := range []string{"100.64.0.0/10", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"} {
		if netip.MustParsePrefix(p).Contains(a) {
			return false
		}
	}
	return true
}

// MeshCommand executes a mesh command; the reactions recompile the
// clusters' parts it changed.
func (l *Link) MeshCommand(ctx context.Context, c dispatch.Context, orgID string, cmd domain.MeshCommand) error {
	_, err := l.cfg.Commands.Mesh(ctx, c, orgID, cmd)
	return err
}

// MeshHeads returns each cluster's latest mesh revision.
func (l *Link) MeshHeads(ctx context.Context, clusterIDs []string) (map[string]int, error) {
	streams := make([]string, len(clusterIDs))
	for i, id := range clusterIDs {
		streams[i] = domain.MeshRevisionStream(id)
	}
	versions, err := eventstore.StreamVersions(ctx, l.cfg.Pool, streams)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for i, id := range clusterIDs {
		out[id] = versions[streams[i]]
	}
	return out, nil
}

// MeshFetch returns one mesh revision of a cluster, ready to send.
func (l *Link) MeshFetch(ctx context.Context, clusterID string, revision int) (transport.MeshState, error) {
	ev, ok, err := eventstore.EventAt(ctx, l.cfg.Pool, domain.MeshRevisionStream(clusterID), revision)
	if err != nil {
		return transport.MeshState{}, err
	}
	if !ok {
		return transport.MeshState{}, fmt.Errorf("no mesh revision %d of cluster %s", revision, clusterID)
	}
	d, err := domain.Decode(ev.Type, ev.SchemaVersion, ev.Payload)
	if err != nil {
		return transport.MeshState{}, err
	}
	e, ok := d.(domain.MeshRevisionCompiled)
	if !ok {
		return transport.MeshState{}, fmt.Errorf("mesh revision %d of cluster %s is a %s", revision, clusterID, ev.Type)
	}
	st := transport.MeshState{ClusterID: clusterID, Revision: revision, Hash: e.Hash, Network: e.Mesh.Network,
		Nodes: []transport.MeshNode{}, Peers: []transport.MeshPeer{}}
	for _, n := range e.Mesh.Nodes {
		st.Nodes = append(st.Nodes, transport.MeshNode{Name: n.Name, Address: n.Address, Keepalive: n.Keepalive, Rotate: n.Rotate})
	}
	for _, p := range e.Mesh.Peers {
		st.Peers = append(st.Peers, transport.MeshPeer{Cluster: p.Cluster, Node: p.Node, PublicKey: p.PublicKey, Endpoint: p.Endpoint,
			AllowedIPs: p.AllowedIPs, NextPublicKey: p.NextPublicKey})
	}
	return st, nil
}
