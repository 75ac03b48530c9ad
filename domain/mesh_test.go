package domain_test

import (
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

const (
	meshCluster1 = "11111111-1111-4111-8111-111111111111"
	meshCluster2 = "22222222-2222-4222-8222-222222222222"
	meshCluster3 = "33333333-3333-4333-8333-333333333333"
)

func meshKey(t testing.TB) string {
	b := make([]byte, 32)
	_, err := crand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// meshWorld folds what it decides, with a clock it moves.
type meshWorld struct {
	t   testing.TB
	m   *domain.Mesh
	now time.Time
	n   int
}

func newMeshWorld(t testing.TB) *meshWorld {
	return &meshWorld{t: t, m: domain.NewMesh(), now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
}

func (w *meshWorld) decide(cmd domain.MeshCommand) ([]domain.Event, error) {
	w.n++
	meta := domain.Meta{Actor: domain.Actor{Kind: domain.ActorAgent, ID: "s", Name: "agent"}, CommandID: fmt.Sprint(w.n), Now: w.now}
	d, err := w.m.Decide(cmd, meta)
	if err != nil {
		return nil, err
	}
	for _, e := range d.Events {
		w.m.ApplyAt(e, w.now)
	}
	return d.Events, nil
}

func (w *meshWorld) must(cmd domain.MeshCommand) []domain.Event {
	w.t.Helper()
	evs, err := w.decide(cmd)
	require.NoError(w.t, err)
	return evs
}

func report(cluster string, nodes ...domain.MeshNodeReport) domain.ReportMeshNodes {
	r := domain.ReportMeshNodes{OrgID: "org", ClusterID: cluster, Nodes: nodes}
	for _, n := range nodes {
		r.ClusterNodes = append(r.ClusterNodes, n.Node)
	}
	return r
}

func meshTypes(evs []domain.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType())
	}
	return out
}

// Nodes join with the lowest free addresses and keep them; the same report
// again changes nothing; a node removed from its cluster leaves, and its
// address is given to nobody for 24 hours.
func TestMeshAddressesAreStableAndQuarantined(t *testing.T) {
	w := newMeshWorld(t)
	k1, k2, k3 := meshKey(t), meshKey(t), meshKey(t)
	n1 := domain.MeshNodeReport{Node: "n1", PublicKey: k1, Endpoint: "10.0.0.1:51820"}
	n2 := domain.MeshNodeReport{Node: "n2", PublicKey: k2, Endpoint: "10.0.0.2:51820"}
	evs := w.must(report(meshCluster1, n1, n2))
	require.Equal(t, []string{"mesh.node.joined", "mesh.node.joined"}, meshTypes(evs))
	require.Equal(t, "100.96.0.1", w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n1")].Address)
	require.Equal(t, "100.96.0.2", w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n2")].Address)
	require.Empty(t, w.must(report(meshCluster1, n2, n1)), "the same report again changes nothing")
	require.Equal(t, "mesh.node.join", domain.Audit(evs[0]).Action)

	// n1 leaves; a new node does not get its address within 24 h.
	evs = w.must(report(meshCluster1, n2))
	require.Equal(t, []string{"mesh.node.left"}, meshTypes(evs))
	require.Equal(t, "mesh.node.leave", domain.Audit(evs[0]).Action)
	w.now = w.now.Add(23 * time.Hour)
	w.must(report(meshCluster1, n2, domain.MeshNodeReport{Node: "n3", PublicKey: k3}))
	require.Equal(t, "100.96.0.3", w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n3")].Address)
	require.Equal(t, "100.96.0.2", w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n2")].Address, "n2 keeps its address")
	w.now = w.now.Add(time.Hour)
	w.must(report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: meshKey(t)}))
	require.Equal(t, "100.96.0.1", w.m.Nodes[domain.MeshNodeKey(meshCluster2, "m1")].Address, "after 24 h the address is free again")

	// A deleted cluster's nodes all leave.
	evs = w.must(domain.RemoveMeshCluster{OrgID: "org", ClusterID: meshCluster1})
	require.Equal(t, []string{"mesh.node.left", "mesh.node.left"}, meshTypes(evs))
	require.Len(t, w.m.Nodes, 1)
}

// What a report must not carry is refused whole, and changes nothing: a key
// that is not 32 bytes, an endpoint that does not parse, a node claiming
// another node's key (of any cluster), two nodes with one key.
func TestMeshReportsRefuseBadInput(t *testing.T) {
	w := newMeshWorld(t)
	k1 := meshKey(t)
	w.must(report(meshCluster1, domain.MeshNodeReport{Node: "n1", PublicKey: k1, Endpoint: "10.0.0.1:51820"}))
	before := *w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n1")]
	short := base64.StdEncoding.EncodeToString(make([]byte, 31))
	for name, r := range map[string]domain.ReportMeshNodes{
		"a key of 31 bytes":    report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: short}),
		"a key that is no key": report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: "not base64!"}),
		"an endpoint":          report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: meshKey(t), Endpoint: "example.com:51820"}),
		"an endpoint, no port": report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: meshKey(t), Endpoint: "10.0.0.9"}),
		"another node's key":   report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: k1}),
		"a NUL in a name":      report(meshCluster2, domain.MeshNodeReport{Node: "m\x001", PublicKey: meshKey(t)}),
		"a pod range":          report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: meshKey(t), PodCIDRs: []string{"10.42.0.0/33"}}),
		"one key twice": report(meshCluster2, domain.MeshNodeReport{Node: "m1", PublicKey: k1 + ""},
			domain.MeshNodeReport{Node: "m2", PublicKey: k1}),
	} {
		_, err := w.decide(r)
		require.Error(t, err, name)
		require.Len(t, w.m.Nodes, 1, name)
	}
	require.Equal(t, before, *w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n1")])
}

// A new public key is a rotation (audited mesh.key.rotate); a requested
// rotation is marked until the node publishes its new key.
func TestMeshKeyRotation(t *testing.T) {
	w := newMeshWorld(t)
	n1 := domain.MeshNodeReport{Node: "n1", PublicKey: meshKey(t), Endpoint: "10.0.0.1:51820"}
	w.must(report(meshCluster1, n1))
	evs := w.must(domain.RequestMeshKeyRotation{OrgID: "org", ClusterID: meshCluster1})
	require.Equal(t, []string{"mesh.key.rotation_requested"}, meshTypes(evs))
	require.Equal(t, "mesh.key.rotate", domain.Audit(evs[0]).Action)
	require.True(t, w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n1")].RotateRequested)
	require.Empty(t, w.must(domain.RequestMeshKeyRotation{OrgID: "org", ClusterID: meshCluster1}), "asked once")
	_, err := w.decide(domain.RequestMeshKeyRotation{OrgID: "org", ClusterID: meshCluster1, Node: "nope"})
	require.ErrorIs(t, err, domain.ErrNotFound)

	n1.PublicKey = meshKey(t)
	evs = w.must(report(meshCluster1, n1))
	require.Equal(t, []string{"mesh.key.rotated"}, meshTypes(evs))
	require.True(t, evs[0].(domain.MeshKeyRotated).Requested)
	node := w.m.Nodes[domain.MeshNodeKey(meshCluster1, "n1")]
	require.False(t, node.RotateRequested)
	require.Equal(t, n1.PublicKey, node.PublicKey)
	require.Equal(t, "100.96.0.1", node.Address, "a new key keeps the address")
}

// The range can grow, never shrink under its nodes.
func TestMeshSettings(t *testing.T) {
	w := newMeshWorld(t)
	w.must(report(meshCluster1, domain.MeshNodeReport{Node: "n1", PublicKey: meshKey(t)}))
	_, err := w.decide(domain.UpdateMeshSettings{OrgID: "org", Network: "10.200.0.0/16"})
	require.ErrorIs(t, err, domain.ErrConflict)
	for _, bad := range []string{"100.96.0.1/12", "fd00::/64", "100.0.0.0/4", "nonsense"} {
		_, err := w.decide(domain.UpdateMeshSettings{OrgID: "org", Network: bad})
		require.ErrorIs(t, err, domain.ErrInvalid, bad)
	}
	evs := w.must(domain.UpdateMeshSettings{OrgID: "org", Network: "100.64.0.0/10"})
	require.Equal(t, "mesh.settings.update", domain.Audit(evs[0]).Action)
	require.Equal(t, "100.64.0.0/10", w.m.NetworkOrDefault())
}

// The peer lists: every node of the organisation is a peer of every
// cluster; other clusters' pod ranges and (on their gateway) service ranges
// are routed when they overlap no other cluster's, and with the K3s
// defaults everywhere the clusters are meshed by node address only, with
// the reason; a node without an endpoint keeps its paths open.
func TestMeshCompile(t *testing.T) {
	w := newMeshWorld(t)
	w.must(domain.ReportMeshNodes{OrgID: "org", ClusterID: meshCluster1, ClusterNodes: []string{"a1", "a2"}, ServiceCIDRs: []string{"10.43.0.0/16"},
		Nodes: []domain.MeshNodeReport{
			{Node: "a1", PublicKey: meshKey(t), Endpoint: "192.0.2.1:51820", PodCIDRs: []string{"10.42.0.0/24"}},
			{Node: "a2", PublicKey: meshKey(t), Endpoint: "192.0.2.2:51820", PodCIDRs: []string{"10.42.1.0/24"}},
		}})
	w.must(domain.ReportMeshNodes{OrgID: "org", ClusterID: meshCluster2, ClusterNodes: []string{"b1"}, ServiceCIDRs: []string{"10.45.0.0/16"},
		Nodes: []domain.MeshNodeReport{{Node: "b1", PublicKey: meshKey(t), PodCIDRs: []string{"10.44.0.0/24"}}}})
	require.Empty(t, w.m.Overlaps())

	c1 := w.m.Compile(meshCluster1)
	require.Equal(t, "100.96.0.0/12", c1.Network)
	require.Equal(t, []domain.MeshCompiledNode{{Name: "a1", Address: "100.96.0.1"}, {Name: "a2", Address: "100.96.0.2"}}, c1.Nodes)
	require.Len(t, c1.Peers, 3)
	allowed := map[string][]string{}
	for _, p := range c1.Peers {
		allowed[p.Node] = p.AllowedIPs
	}
	require.Equal(t, []string{"100.96.0.1/32"}, allowed["a1"], "a node of the same cluster: its mesh address only")
	require.Equal(t, []string{"100.96.0.3/32", "10.44.0.0/24", "10.45.0.0/16"}, allowed["b1"], "another cluster's gateway: pods and services")

	c2 := w.m.Compile(meshCluster2)
	require.Equal(t, []domain.MeshCompiledNode{{Name: "b1", Address: "100.96.0.3", Keepalive: 25}}, c2.Nodes, "no endpoint: behind NAT")
	for _, p := range c2.Peers {
		switch p.Node {
		case "a1":
			require.Equal(t, []string{"100.96.0.1/32", "10.42.0.0/24", "10.43.0.0/16"}, p.AllowedIPs)
		case "a2":
			require.Equal(t, []string{"100.96.0.2/32", "10.42.1.0/24"}, p.AllowedIPs)
		case "b1":
			require.Empty(t, p.Endpoint)
		}
	}

	// A third cluster on K3s's defaults overlaps the first.
	w.must(domain.ReportMeshNodes{OrgID: "org", ClusterID: meshCluster3, ClusterNodes: []string{"c1"}, ServiceCIDRs: []string{"10.43.0.0/16"},
		Nodes: []domain.MeshNodeReport{{Node: "c1", PublicKey: meshKey(t), Endpoint: "192.0.2.9:51820", PodCIDRs: []string{"10.42.0.0/24"}}}})
	ov := w.m.Overlaps()
	require.Len(t, ov, 2)
	require.Equal(t, meshCluster1, ov[0].ClusterID)
	require.Contains(t, ov[0].Reason, "--cluster-cidr")
	for _, p := range w.m.Compile(meshCluster2).Peers {
		if p.Cluster != meshCluster2 && p.Cluster != meshCluster1 && p.Cluster != meshCluster3 {
			t.Fatalf("unknown cluster %s", p.Cluster)
		}
		if p.Cluster != meshCluster2 {
			require.Len(t, p.AllowedIPs, 1, "overlapping clusters are meshed by node address only: %s", p.Node)
		}
	}
}

// Random sequences of reports, leaves, deleted clusters and time passing,
// with an invariant watched after every step: addresses are unique among
// the nodes, inside the range, never change while a node stays, and are
// never given again within 24 hours of a node leaving; every compiled peer
// list is valid (no key or allowed IP twice).
func TestMeshInvariantsUnderRandomSequences(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		w := newMeshWorld(t)
		clusters := []string{meshCluster1, meshCluster2, meshCluster3}
		keys := map[string]string{}
		addrOf := map[string]string{}
		leftAt := map[string]time.Time{}
		for step := range 150 {
			c := clusters[r.IntN(3)]
			switch op := r.IntN(10); {
			case op < 7:
				var nodes []domain.MeshNodeReport
				for i := range 6 {
					if r.IntN(3) == 0 {
						continue
					}
					name := fmt.Sprintf("n%d", i)
					k := domain.MeshNodeKey(c, name)
					if keys[k] == "" || r.IntN(20) == 0 {
						keys[k] = meshKey(t)
					}
					ep := ""
					if r.IntN(4) > 0 {
						ep = fmt.Sprintf("192.0.2.%d:51820", 1+r.IntN(200))
					}
					nodes = append(nodes, domain.MeshNodeReport{Node: name, PublicKey: keys[k], Endpoint: ep,
						PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 42+r.IntN(2), i)}})
				}
				w.must(report(c, nodes...))
			case op < 8:
				w.must(domain.RemoveMeshCluster{OrgID: "org", ClusterID: c})
			default:
				w.now = w.now.Add(time.Duration(r.IntN(30)) * time.Hour)
			}
			network := netip.MustParsePrefix(w.m.NetworkOrDefault())
			seen := map[string]string{}
			for k, n := range w.m.Nodes {
				a := netip.MustParseAddr(n.Address)
				require.True(t, network.Contains(a), "seed %d step %d: %s outside the range", seed, step, a)
				require.Empty(t, seen[n.Address], "seed %d step %d: %s given to %s and %s", seed, step, n.Address, seen[n.Address], k)
				seen[n.Address] = k
				if prev, ok := addrOf[k]; ok {
					require.Equal(t, prev, n.Address, "seed %d step %d: %s changed address", seed, step, k)
				} else if at, ok := leftAt[n.Address]; ok {
					require.GreaterOrEqual(t, w.now.Sub(at), domain.MeshAddressQuarantine,
						"seed %d step %d: %s reused within 24 h", seed, step, n.Address)
				}
				addrOf[k] = n.Address
			}
			for k, a := range addrOf {
				if _, ok := w.m.Nodes[k]; !ok {
					delete(addrOf, k)
					leftAt[a] = w.now
				}
			}
			for _, c := range clusters {
				comp := w.m.Compile(c)
				ks, ips := map[string]bool{}, map[string]bool{}
				for _, p := range comp.Peers {
					require.False(t, ks[p.PublicKey], "seed %d step %d: key twice", seed, step)
					ks[p.PublicKey] = true
					for _, ip := range p.AllowedIPs {
						require.False(t, ips[ip], "seed %d step %d: allowed IP %s twice in %s's list", seed, step, ip, c)
						ips[ip] = true
					}
				}
			}
		}
	}
}

// The whole organisation (50 clusters of 20 nodes), as one change recompiles it.
func BenchmarkMeshCompile1000Nodes(b *testing.B) {
	w := newMeshWorld(b)
	for c := range 50 {
		cluster := fmt.Sprintf("%08d-0000-4000-8000-000000000000", c)
		var nodes []domain.MeshNodeReport
		for i := range 20 {
			nodes = append(nodes, domain.MeshNodeReport{Node: fmt.Sprintf("node-%d", i), PublicKey: meshKey(b),
				Endpoint: fmt.Sprintf("198.51.%d.%d:51820", c, i+1), PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 64+c, i)}})
		}
		w.must(domain.ReportMeshNodes{OrgID: "org", ClusterID: cluster, Nodes: nodes, ClusterNodes: namesOf(nodes),
			ServiceCIDRs: []string{fmt.Sprintf("10.%d.0.0/16", 128+c)}})
	}
	b.ResetTimer()
	for b.Loop() {
		_ = w.m.CompileAll()
	}
}

func namesOf(ns []domain.MeshNodeReport) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Node)
	}
	return out
}
