package mesh_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nebulactrl/nebulactrl/agent/mesh"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/netnstest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

// agentBin builds nebulactrl-agent once per test process.
var agentBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "mesh-agent-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nebulactrl-agent")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebulactrl-agent").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

// site is one Kubernetes cluster of the test: its API server, reached from
// its nodes' namespaces through a forwarder on a link of each.
type site struct {
	id    string
	k     *k8stest.Cluster
	admin kubernetes.Interface
	// host: installed as on a host, without the manifest: the node agents
	// use the cluster's administrator kubeconfig (K3s's k3s.yaml) and make
	// the mesh's namespace themselves.
	host bool
}

// newSite starts a cluster with the product's install manifest applied:
// the agents and node agents run under its RBAC.
func newSite(t *testing.T, id string) *site {
	t.Helper()
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	s := &site{id: id, k: k, admin: k.Client(t)}
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_x",
		Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/" + id})
	require.NoError(t, err)
	installtest.Apply(t, s.admin, manifest, nil)
	return s
}

// newHostSite starts a cluster without the manifest (a host install).
func newHostSite(t *testing.T, id string) *site {
	t.Helper()
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	return &site{id: id, k: k, admin: k.Client(t), host: true}
}

// node is one host: a namespace with a link to the underlay and one to the
// test (its API server), running the real node agent.
type node struct {
	name, cluster string
	ns            *netnstest.NS
	iface         string
	address       string // its mesh address, as the test gives it
	cmd           *exec.Cmd
	log           *bytes.Buffer
	report        transport.MeshNodeReport
}

var linkNo, ifaceNo int

// startNode runs `nebulactrl-agent mesh` in ns, talking to the site's API
// server through a forwarder on a link of its own.
func startNode(t *testing.T, s *site, n *node) {
	t.Helper()
	bin, err := agentBin()
	require.NoError(t, err)
	linkNo++
	root, inside := fmt.Sprintf("10.250.%d.1", linkNo), fmt.Sprintf("10.250.%d.2", linkNo)
	netnstest.Link(t, n.ns, "api0", inside+"/30", nil, "", root+"/30")
	u, err := url.Parse(s.k.Server)
	require.NoError(t, err)
	fwd := netnstest.Forward(t, root+":0", u.Host)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + fwd, CertificateAuthorityData: s.k.CAData, TLSServerName: "127.0.0.1"}
	// The node agent's own ServiceAccount, as the DaemonSet's pods have it;
	// on a host, the cluster's administrator.
	token := s.k.Admin.BearerToken
	if !s.host {
		token = s.k.ServiceAccountConfig(t, agentinstall.MeshNamespace, agentinstall.MeshName).BearerToken
	}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	dir := t.TempDir()
	kcPath := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, kcPath))
	// Interface names are this process's own: the UAPI sockets of
	// userspace interfaces share /var/run/wireguard across namespaces.
	ifaceNo++
	n.iface = fmt.Sprintf("w%s-%d%s", strconv.FormatInt(int64(os.Getpid()), 36), ifaceNo, n.name)
	n.log = &bytes.Buffer{}
	n.cmd = n.ns.Cmd(bin, "mesh", "--node-name", n.name, "--interface", n.iface, "--key-dir", filepath.Join(dir, "key"),
		"--mode", mesh.ModeUserspace, "--kubeconfig", kcPath, "--report-every", "1s", "--rotation-grace", "2s", "--log-level", "debug")
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	require.NoError(t, n.cmd.Start())
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		_ = n.cmd.Wait()
		if t.Failed() {
			t.Logf("node agent %s:\n%s", n.name, n.log.String())
		}
	})
}

// reportOf waits for the node's published report.
func reportOf(t *testing.T, s *site, name string) transport.MeshNodeReport {
	t.Helper()
	var r transport.MeshNodeReport
	require.Eventually(t, func() bool {
		cm, err := s.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace).Get(t.Context(), mesh.ReportName(name), metav1.GetOptions{})
		if err != nil {
			return false
		}
		return json.Unmarshal([]byte(cm.Data[mesh.ReportKey]), &r) == nil && r.PublicKey != ""
	}, 30*time.Second, 100*time.Millisecond, "node %s publishes its report", name)
	return r
}

// writeState writes a cluster's mesh state where its node agents read it.
func writeState(t *testing.T, s *site, st transport.MeshState) {
	t.Helper()
	b, err := json.Marshal(st)
	require.NoError(t, err)
	cms := s.admin.CoreV1().ConfigMaps(mesh.DefaultNamespace)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: mesh.PeersConfigMap}, Data: map[string]string{mesh.StateKey: string(b)}}
	if _, err := cms.Update(t.Context(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
		_, err = cms.Create(t.Context(), cm, metav1.CreateOptions{})
		require.NoError(t, err)
	} else {
		require.NoError(t, err)
	}
}

// pings reports whether from reaches addr over the mesh.
func pings(from *node, addr string) bool {
	return from.ns.Cmd("ping", "-c", "1", "-W", "1", "-q", addr).Run() == nil
}

// newUnderlay makes the network the nodes share: a bridge in a namespace
// of its own, with a gateway address that routes nothing (what is not on
// the underlay goes nowhere but over the mesh).
func newUnderlay(t *testing.T) *netnstest.NS {
	t.Helper()
	lan := netnstest.New(t, "lan")
	lan.Must(t, "ip", "link", "add", "br0", "type", "bridge")
	lan.Must(t, "ip", "link", "set", "br0", "up")
	lan.Must(t, "ip", "addr", "add", "10.77.0.1/24", "dev", "br0")
	return lan
}

// attach makes node i's namespace and puts it on the underlay; behindNAT
// puts it behind a NAT namespace instead (masquerade out, nothing in).
func attach(t *testing.T, lan *netnstest.NS, n *node, i int, behindNAT bool) {
	t.Helper()
	n.ns = netnstest.New(t, n.name)
	if !behindNAT {
		netnstest.Link(t, n.ns, "eth0", fmt.Sprintf("10.77.0.%d/24", 10+i), lan, "v-"+n.name, "")
		lan.Must(t, "ip", "link", "set", "v-"+n.name, "master", "br0")
		n.ns.Must(t, "ip", "route", "add", "default", "via", "10.77.0.1")
		return
	}
	nat := netnstest.New(t, "nat-"+n.name)
	netnstest.Link(t, n.ns, "eth0", "10.78.0.2/24", nat, "in0", "10.78.0.1/24")
	netnstest.Link(t, nat, "out0", "10.77.0.30/24", lan, "v-nat", "")
	lan.Must(t, "ip", "link", "set", "v-nat", "master", "br0")
	n.ns.Must(t, "ip", "route", "add", "default", "via", "10.78.0.1")
	nat.Must(t, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
	nat.Must(t, "nft", "add table ip nat; add chain ip nat masq { type nat hook postrouting priority 100; }; add rule ip nat masq oifname out0 masquerade; "+
		"add table ip filter; add chain ip filter gate { type filter hook forward priority 0; policy drop; }; "+
		"add rule ip filter gate iifname in0 accept; add rule ip filter gate ct state established,related accept")
}

// Two clusters of two nodes each, every node in a network namespace of its
// own on a shared underlay, one of them behind a NAT namespace (masquerade,
// nothing inbound); the real node agent in each, wireguard-go on TUN
// (userspace: this machine has no WireGuard kernel module), configured with
// wgctrl from the states written for their clusters. Every node pings every
// other node's mesh address; the node behind NAT is reached because it
// keeps its paths open (PersistentKeepalive); a node removed from the mesh
// can no longer reach or be reached.
func TestNodesMeshAcrossClusters(t *testing.T) {
	netnstest.Require(t)
	lan := newUnderlay(t)
	// cluster-a is a host install: its node agents make the mesh's
	// namespace themselves; cluster-b has the manifest.
	a, b := newHostSite(t, "cluster-a"), newSite(t, "cluster-b")
	nodes := []*node{
		{name: "a1", cluster: "cluster-a", address: "100.96.0.1"},
		{name: "a2", cluster: "cluster-a", address: "100.96.0.2"},
		{name: "b1", cluster: "cluster-b", address: "100.96.0.3"},
		{name: "b2", cluster: "cluster-b", address: "100.96.0.4"}, // behind NAT
	}
	siteOf := map[string]*site{"cluster-a": a, "cluster-b": b}
	for i, n := range nodes {
		attach(t, lan, n, i, n.name == "b2")
		startNode(t, siteOf[n.cluster], n)
	}
	for _, n := range nodes {
		n.report = reportOf(t, siteOf[n.cluster], n.name)
		require.NoError(t, n.report.Validate())
		require.NotEmpty(t, n.report.Endpoints)
		require.True(t, n.report.Userspace)
	}
	require.True(t, strings.HasPrefix(nodes[0].report.Endpoints[0], "10.77.0."), "the default route's interface comes first: %v", nodes[0].report.Endpoints)
	ns, err := a.admin.CoreV1().Namespaces().Get(t.Context(), mesh.DefaultNamespace, metav1.GetOptions{})
	require.NoError(t, err, "on a host install the node agent made the mesh's namespace")
	require.Equal(t, "privileged", ns.Labels["pod-security.kubernetes.io/enforce"])

	rev := 0
	compile := func(members []*node) {
		rev++
		for _, s := range []*site{a, b} {
			st := transport.MeshState{ClusterID: s.id, Revision: rev, Hash: fmt.Sprintf("h%d", rev), Network: "100.96.0.0/12",
				Nodes: []transport.MeshNode{}, Peers: []transport.MeshPeer{}}
			for _, n := range members {
				p := transport.MeshPeer{Cluster: n.cluster, Node: n.name, PublicKey: n.report.PublicKey, AllowedIPs: []string{n.address + "/32"}}
				keepalive := 0
				if n.name == "b2" {
					keepalive = transport.MeshKeepaliveSeconds // no endpoint: it reaches out
				} else {
					p.Endpoint = n.report.Endpoints[0]
				}
				st.Peers = append(st.Peers, p)
				if n.cluster == s.id {
					st.Nodes = append(st.Nodes, transport.MeshNode{Name: n.name, Address: n.address, Keepalive: keepalive})
				}
			}
			require.NoError(t, st.Validate())
			writeState(t, s, st)
		}
	}
	compile(nodes)
	for _, from := range nodes {
		for _, to := range nodes {
			if from != to {
				require.Eventually(t, func() bool { return pings(from, to.address) }, 20*time.Second, 100*time.Millisecond,
					"%s reaches %s over the mesh", from.name, to.name)
			}
		}
	}
	// The underlay does not let anyone reach the node behind NAT directly.
	require.Error(t, nodes[0].ns.Cmd("ping", "-c", "1", "-W", "1", "10.78.0.2").Run())

	// a2 leaves: it reaches nobody and nobody reaches it.
	compile([]*node{nodes[0], nodes[2], nodes[3]})
	a2 := nodes[1]
	for _, other := range []*node{nodes[0], nodes[2], nodes[3]} {
		require.Eventually(t, func() bool { return !pings(other, a2.address) && !pings(a2, other.address) }, 20*time.Second, 200*time.Millisecond,
			"%s and the removed a2 no longer reach each other", other.name)
		require.True(t, pings(other, nodes[0].address) || other == nodes[0], "the others still reach each other")
	}
	require.Eventually(t, func() bool {
		r := reportOf(t, a, "a1")
		return r.Revision == 2 && len(r.Peers) == 2
	}, 20*time.Second, 200*time.Millisecond, "a1 reports the applied revision and its two peers")
}
