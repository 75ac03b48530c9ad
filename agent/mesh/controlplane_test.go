package mesh_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/mesh"
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/netnstest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startClusterAgent runs the cluster's agent, registered with a join token
// of the control plane, as the manifest's ServiceAccount.
func startClusterAgent(t *testing.T, s *site, url, joinToken string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	reg, err := transport.Register(ctx, url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: s.id + "-agent"})
	require.NoError(t, err)
	a, err := agent.New(agent.Config{
		Link:   transport.ClientConfig{URL: url, Credential: reg.Credential, AllowPlain: true, MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Heartbeat: time.Second},
		Client: cs, Version: "1.0.0", Identity: s.id + "-agent", ReportEvery: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func addNode(t *testing.T, s *site, name, podCIDR string) {
	t.Helper()
	_, err := s.admin.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// The whole path, with real parts: node agents publish their keys in two
// real API servers, the clusters' real agents report them to a real control
// plane, which allocates the mesh addresses (recorded as events), compiles
// each cluster's peers and sends them back over the agents' links, and the
// node agents configure wireguard-go with wgctrl from them: every node
// pings every other node's mesh address, the one behind NAT included; a
// node deleted from its cluster leaves the mesh (it reaches nobody, nobody
// reaches it); a node claiming another node's key is refused and changes
// nothing; a deleted cluster's nodes leave it.
func TestTheControlPlaneMeshesTheNodesOfTwoClusters(t *testing.T) {
	netnstest.Require(t)
	ctx := context.Background()
	srv := servertest.Start(t, servertest.Options{})
	token := srv.Setup(t, "root@example.com", "acme")
	cl, err := client.New(srv.URL, token)
	require.NoError(t, err)

	lan := newUnderlay(t)
	a, b := newSite(t, "eu-1"), newSite(t, "us-1")
	nodes := []*node{
		{name: "a1", cluster: "eu-1"}, {name: "a2", cluster: "eu-1"},
		{name: "b1", cluster: "us-1"}, {name: "b2", cluster: "us-1"}, // b2 behind NAT
	}
	siteOf := map[string]*site{"eu-1": a, "us-1": b}
	for i, n := range nodes {
		addNode(t, siteOf[n.cluster], n.name, fmt.Sprintf("10.42.%d.0/24", i))
		attach(t, lan, n, i, n.name == "b2")
		startNode(t, siteOf[n.cluster], n)
	}
	for _, s := range []*site{a, b} {
		c, err := cl.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: s.id})
		require.NoError(t, err)
		startClusterAgent(t, s, srv.URL, c.JoinToken.Token)
	}

	// The addresses the control plane gave, as each cluster's state says.
	addresses := func(s *site) map[string]string {
		cm, err := s.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace).Get(ctx, mesh.PeersConfigMap, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		var st transport.MeshState
		if json.Unmarshal([]byte(cm.Data[mesh.StateKey]), &st) != nil {
			return nil
		}
		out := map[string]string{}
		for _, n := range st.Nodes {
			out[n.Name] = n.Address
		}
		return out
	}
	require.Eventually(t, func() bool { return len(addresses(a)) == 2 && len(addresses(b)) == 2 }, 60*time.Second, 200*time.Millisecond,
		"each cluster's agent hands its nodes their addresses")
	seen := map[string]bool{}
	for _, n := range nodes {
		n.address = addresses(siteOf[n.cluster])[n.name]
		require.NotEmpty(t, n.address)
		require.False(t, seen[n.address], "one address per node")
		seen[n.address] = true
	}
	for _, from := range nodes {
		for _, to := range nodes {
			if from != to {
				require.Eventually(t, func() bool { return pings(from, to.address) }, 30*time.Second, 100*time.Millisecond,
					"%s reaches %s (%s) over the mesh", from.name, to.name, to.address)
			}
		}
	}

	// The API's view: every node with its address, key fingerprint and a
	// fresh handshake; both clusters run the API server's default service
	// range, so they are meshed by node address only, and it says why.
	require.Eventually(t, func() bool {
		m, err := cl.Mesh(ctx, "acme")
		require.NoError(t, err)
		if len(m.Nodes) != 4 {
			return false
		}
		for _, n := range m.Nodes {
			if !n.Reachable || len(n.Peers) != 3 {
				return false
			}
			for _, p := range n.Peers {
				if p.LastHandshake == nil {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 200*time.Millisecond, "the API shows four reachable nodes with a handshake with each of their three peers")
	m, err := cl.Mesh(ctx, "acme")
	require.NoError(t, err)
	require.Equal(t, "100.96.0.0/12", m.Network)
	for _, n := range m.Nodes {
		require.Equal(t, addresses(siteOf[n.Cluster])[n.Node], n.Address)
		require.Equal(t, n.PublicKey[:8], n.Fingerprint)
		require.True(t, n.Userspace)
		require.Positive(t, n.Revision)
		for _, p := range n.Peers {
			require.NotEmpty(t, p.Node, "every peer is named")
			require.NotNil(t, p.LastHandshake, "%s's peer %s: %+v", n.Node, p.Node, m)
		}
	}
	metrics := func() string {
		resp, err := http.Get(srv.MetricsURL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	require.Contains(t, metrics(), `nebulactrl_mesh_nodes{state="reachable"} 4`)
	require.Contains(t, metrics(), `nebulactrl_mesh_nodes{state="unreachable"} 0`)
	require.Len(t, m.Overlaps, 2)
	require.Contains(t, m.Overlaps[0].Reason, "--service-cidr")
	require.Contains(t, m.Overlaps[0].Reason, "cluster us-1", "clusters are named, not numbered")

	// a1's key is rotated under a continuous ping from b1: a handshake's
	// worth of packets may go, no more.
	before := a1Key(t, cl)
	pinger := nodes[2].ns.Cmd("ping", "-i", "0.02", "-w", "14", "-q", nodes[0].address)
	var pingOut strings.Builder
	pinger.Stdout, pinger.Stderr = &pingOut, &pingOut
	require.NoError(t, pinger.Start())
	time.Sleep(time.Second)
	rot, err := cl.RotateMeshKeys(ctx, "acme", "eu-1", "a1")
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, rot.Nodes)
	require.Eventually(t, func() bool {
		k := a1Key(t, cl)
		return k.PublicKey != before.PublicKey && !k.RotateRequested
	}, 12*time.Second, 100*time.Millisecond, "a1 switches to a key of its own making")
	_ = pinger.Wait()
	sent, got := pingCounts(t, pingOut.String())
	t.Logf("rotation under ping every 20 ms: %d sent, %d received, %d lost", sent, got, sent-got)
	require.Greater(t, sent, 500)
	require.LessOrEqual(t, sent-got, 10, "the rotation loses at most 200 ms of packets: %s", pingOut.String())
	require.True(t, pings(nodes[2], nodes[0].address) && pings(nodes[0], nodes[3].address), "a1 is reached with its new key, and reaches")

	// A node claiming another node's key: refused, nothing changes.
	addNode(t, b, "b9", "10.42.9.0/24")
	a1 := reportOf(t, a, "a1")
	bad, err := json.Marshal(transport.MeshNodeReport{Node: "b9", PublicKey: a1.PublicKey, Endpoints: []string{"10.77.0.99:51820"}})
	require.NoError(t, err)
	_, err = b.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: mesh.ReportName("b9"), Labels: map[string]string{mesh.NodeLabel: "b9"}},
		Data:       map[string]string{mesh.ReportKey: string(bad)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	time.Sleep(3 * time.Second) // several report rounds
	require.NotContains(t, addresses(b), "b9")
	require.True(t, pings(nodes[2], nodes[0].address), "a1 is still reached at its key")
	require.NoError(t, b.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace).Delete(ctx, mesh.ReportName("b9"), metav1.DeleteOptions{}))

	// a2 is deleted from its cluster: it leaves the mesh.
	require.NoError(t, a.admin.CoreV1().Nodes().Delete(ctx, "a2", metav1.DeleteOptions{}))
	a2 := nodes[1]
	require.Eventually(t, func() bool { _, ok := addresses(a)["a2"]; return !ok }, 30*time.Second, 200*time.Millisecond)
	for _, other := range []*node{nodes[0], nodes[2], nodes[3]} {
		require.Eventually(t, func() bool { return !pings(other, a2.address) && !pings(a2, other.address) }, 30*time.Second, 200*time.Millisecond,
			"%s and the removed a2 no longer reach each other", other.name)
	}
	require.True(t, pings(nodes[0], nodes[3].address), "the others still reach each other")

	// us-1 is deleted: its nodes leave the mesh. Its agent's credential
	// goes with it, so its own nodes hear no more; the others drop them,
	// which cuts both directions (a handshake needs both keys).
	require.NoError(t, cl.DeleteCluster(ctx, "acme", "us-1"))
	peersOfA := func() int {
		cm, err := a.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace).Get(ctx, mesh.PeersConfigMap, metav1.GetOptions{})
		if err != nil {
			return -1
		}
		var st transport.MeshState
		_ = json.Unmarshal([]byte(cm.Data[mesh.StateKey]), &st)
		return len(st.Peers)
	}
	require.Eventually(t, func() bool { return peersOfA() == 1 }, 30*time.Second, 200*time.Millisecond,
		"eu-1's peers are its own a1 alone")
	require.Eventually(t, func() bool { return !pings(nodes[0], nodes[2].address) && !pings(nodes[2], nodes[0].address) }, 30*time.Second, 200*time.Millisecond,
		"a1 and b1 of the deleted cluster no longer reach each other")
	// What left the mesh is not counted: the deleted cluster's nodes, and
	// a2, whose report ConfigMap outlived its node.
	require.Eventually(t, func() bool {
		m := metrics()
		return strings.Contains(m, `nebulactrl_mesh_nodes{state="reachable"} 1`) && strings.Contains(m, `nebulactrl_mesh_nodes{state="unreachable"} 0`)
	}, 30*time.Second, 200*time.Millisecond, "the metric counts a1 alone")
}

// a1Key is a1 as the API shows it.
func a1Key(t *testing.T, cl *client.Client) api.MeshNode {
	t.Helper()
	m, err := cl.Mesh(t.Context(), "acme")
	require.NoError(t, err)
	for _, n := range m.Nodes {
		if n.Node == "a1" {
			return n
		}
	}
	t.Fatal("a1 is not in the mesh")
	return api.MeshNode{}
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (packets )?received`)

// pingCounts reads ping's summary.
func pingCounts(t *testing.T, out string) (int, int) {
	t.Helper()
	m := pingSummary.FindStringSubmatch(out)
	require.NotNil(t, m, "ping's summary: %s", out)
	sent, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	return sent, got
}
