package transport_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/transport"
)

func key(b byte, n int) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), n)))
}

// What a mesh frame must not carry is refused at the boundary, whichever
// side sends it: a public key that is not 32 bytes, an endpoint that is not
// an IP and port, one key given to two peers, an address outside the
// network, a report without the cluster's nodes, text a table cannot store.
func TestMeshFrameRules(t *testing.T) {
	good := transport.MeshState{ClusterID: "c", Revision: 1, Hash: "h", Network: "100.96.0.0/12",
		Nodes: []transport.MeshNode{{Name: "n1", Address: "100.96.0.1", Keepalive: 25}},
		Peers: []transport.MeshPeer{{Cluster: "c", Node: "n1", PublicKey: key('a', 32), Endpoint: "10.0.0.1:51820", AllowedIPs: []string{"100.96.0.1/32"}},
			{Cluster: "d", Node: "m1", PublicKey: key('b', 32), NextPublicKey: key('c', 32), AllowedIPs: []string{"100.96.0.2/32", "10.44.0.0/24"}}}}
	require.NoError(t, good.Validate())
	report := transport.MeshReport{Nodes: []transport.MeshNodeReport{{Node: "n1", PublicKey: key('a', 32), Endpoints: []string{"10.0.0.1:51820"},
		Peers: []transport.MeshPeerHealth{{PublicKey: key('b', 32), Endpoint: "10.0.0.2:51820", LastHandshake: "2026-12-02T00:00:00Z"}}}},
		ClusterNodes: []transport.MeshClusterNode{{Name: "n1", PodCIDRs: []string{"10.42.0.0/24"}}}}
	require.NoError(t, report.Validate())

	state := func(f func(*transport.MeshState)) transport.MeshState {
		s := good
		s.Nodes = append([]transport.MeshNode(nil), good.Nodes...)
		s.Peers = append([]transport.MeshPeer(nil), good.Peers...)
		f(&s)
		return s
	}
	rep := func(f func(*transport.MeshReport)) transport.MeshReport {
		r := report
		r.Nodes = append([]transport.MeshNodeReport(nil), report.Nodes...)
		r.ClusterNodes = append([]transport.MeshClusterNode(nil), report.ClusterNodes...)
		f(&r)
		return r
	}
	for name, v := range map[string]transport.Validator{
		"a key of 31 bytes":          state(func(s *transport.MeshState) { s.Peers[0].PublicKey = key('a', 31) }),
		"a key that is no base64":    state(func(s *transport.MeshState) { s.Peers[0].PublicKey = "not a key!" }),
		"a next key of 33 bytes":     state(func(s *transport.MeshState) { s.Peers[1].NextPublicKey = key('c', 33) }),
		"one key for two peers":      state(func(s *transport.MeshState) { s.Peers[1].PublicKey = s.Peers[0].PublicKey }),
		"a next key another's":       state(func(s *transport.MeshState) { s.Peers[1].NextPublicKey = s.Peers[0].PublicKey }),
		"an endpoint by name":        state(func(s *transport.MeshState) { s.Peers[0].Endpoint = "node.example.com:51820" }),
		"an endpoint without a port": state(func(s *transport.MeshState) { s.Peers[0].Endpoint = "10.0.0.1" }),
		"an allowed IP":              state(func(s *transport.MeshState) { s.Peers[0].AllowedIPs = []string{"10.0.0.0/33"} }),
		"an address outside":         state(func(s *transport.MeshState) { s.Nodes[0].Address = "10.0.0.1" }),
		"a network":                  state(func(s *transport.MeshState) { s.Network = "100.96.0.0" }),
		"a keepalive":                state(func(s *transport.MeshState) { s.Nodes[0].Keepalive = -1 }),
		"a NUL in a node's name":     state(func(s *transport.MeshState) { s.Nodes[0].Name = "n\x001" }),
		"a report's key":             rep(func(r *transport.MeshReport) { r.Nodes[0].PublicKey = key('a', 16) }),
		"a report's endpoint":        rep(func(r *transport.MeshReport) { r.Nodes[0].Endpoints = []string{"::1"} }),
		"a peer's key in a report":   rep(func(r *transport.MeshReport) { r.Nodes[0].Peers[0].PublicKey = "x" }),
		"no cluster nodes":           rep(func(r *transport.MeshReport) { r.ClusterNodes = nil }),
		"a pod range":                rep(func(r *transport.MeshReport) { r.ClusterNodes[0].PodCIDRs = []string{"10.42.0.0"} }),
		"a service range":            rep(func(r *transport.MeshReport) { r.ServiceCIDRs = []string{"nope"} }),
		"invalid UTF-8 in a name":    rep(func(r *transport.MeshReport) { r.Nodes[0].Node = "\xff" }),
	} {
		err := v.Validate()
		require.Error(t, err, name)
		require.True(t, errors.Is(err, transport.ErrInvalidFrame), name)
	}
}
