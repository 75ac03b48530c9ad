package mesh

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/transport"
)

// The objects of the mesh in its namespace (nebula-mesh).
const (
	// DefaultNamespace is the mesh's own namespace.
	DefaultNamespace = "nebula-mesh"
	// DefaultInterface is the node's WireGuard interface.
	DefaultInterface = "nebula0"
	// DefaultKeyDir holds the node's private key (a host directory).
	DefaultKeyDir = "/var/lib/nebulactrl-mesh"
	// PeersConfigMap is written by the cluster's agent: the cluster's
	// MeshState as JSON under StateKey.
	PeersConfigMap = "peers"
	// StateKey is the MeshState's key in PeersConfigMap.
	StateKey = "state.json"
	// ReportKey is the MeshNodeReport's key in a node's ConfigMap.
	ReportKey = "report.json"
	// NodeLabel names the node a report ConfigMap is of.
	NodeLabel = "nebulactrl.io/mesh-node"
	// FieldManager is the node agent's server-side apply field manager.
	FieldManager = "nebulactrl-mesh"
	// DefaultReportEvery is how often a node republishes its peers'
	// handshakes and counters.
	DefaultReportEvery = 30 * time.Second
)

// ReportName is the name of the ConfigMap a node publishes its report in.
func ReportName(node string) string {
	name := "node-" + node
	if len(name) > 253 {
		sum := sha256.Sum256([]byte(node))
		name = name[:200] + "-" + hex.EncodeToString(sum[:8])
	}
	return name
}

// Config configures a node agent.
type Config struct {
	Client    kubernetes.Interface
	Namespace string
	// NodeName is the Kubernetes node this agent runs on.
	NodeName   string
	Interface  string
	KeyDir     string
	ListenPort int
	// Mode is ModeAuto, ModeKernel or ModeUserspace.
	Mode string
	// Endpoint, when set, is the only endpoint published (host:port, or an
	// IP alone for ListenPort): a node behind a port forward.
	Endpoint    string
	ReportEvery time.Duration
	// RotationGrace is how long the node waits, once its next key is in
	// the mesh state, before it switches (default
	// transport.MeshRotationGrace).
	RotationGrace time.Duration
	Logger        *slog.Logger
	Now           func() time.Time
}

func (c *Config) defaults() error {
	if c.Client == nil || c.NodeName == "" {
		return errors.New("mesh: a node agent needs a Kubernetes client and its node's name")
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Interface == "" {
		c.Interface = DefaultInterface
	}
	if c.KeyDir == "" {
		c.KeyDir = DefaultKeyDir
	}
	if c.ListenPort == 0 {
		c.ListenPort = transport.MeshListenPort
	}
	if c.Mode == "" {
		c.Mode = ModeAuto
	}
	switch c.Mode {
	case ModeAuto, ModeKernel, ModeUserspace:
	default:
		return fmt.Errorf("mesh: mode %q is not auto, kernel or userspace", c.Mode)
	}
	if c.ReportEvery <= 0 {
		c.ReportEvery = DefaultReportEvery
	}
	if c.RotationGrace <= 0 {
		c.RotationGrace = transport.MeshRotationGrace
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Endpoint != "" {
		if _, err := endpointOf(c.Endpoint, c.ListenPort); err != nil {
			return err
		}
	}
	return nil
}

func endpointOf(s string, port int) (string, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, uint16(port)).String(), nil
	}
	if err := transport.ValidEndpoint(s); err != nil {
		return "", fmt.Errorf("mesh: --endpoint: %w", err)
	}
	return s, nil
}

// Node is a running node agent.
type Node struct {
	cfg     Config
	key     wgtypes.Key
	iface   *iface
	wg      *wgctrl.Client
	applied transport.MeshState
	plan    plan
	last    transport.MeshNodeReport
	lastAt  time.Time
	// next is the staged key of a rotation (nil: none); switchAt is when
	// the node switches to it (zero: not yet in the mesh state).
	next     *wgtypes.Key
	switchAt time.Time
}

// Run runs the node agent until ctx ends; the interface is removed then.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	key, err := LoadOrCreateKey(cfg.KeyDir)
	if err != nil {
		return err
	}
	ifc, err := openInterface(cfg.Interface, cfg.Mode, cfg.Logger)
	if err != nil {
		return err
	}
	defer ifc.close()
	wg, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("mesh: opening wgctrl: %w", err)
	}
	defer wg.Close()
	port := cfg.ListenPort
	if err := wg.ConfigureDevice(cfg.Interface, wgtypes.Config{PrivateKey: &key, ListenPort: &port}); err != nil {
		return fmt.Errorf("mesh: configuring %s: %w", cfg.Interface, err)
	}
	if l, err := netlink.LinkByName(cfg.Interface); err == nil {
		_ = netlink.LinkSetUp(l)
	}
	n := &Node{cfg: cfg, key: key, iface: ifc, wg: wg}
	if next, ok, err := loadNextKey(cfg.KeyDir); err != nil {
		return err
	} else if ok {
		n.next = &next // a rotation a previous run began
	}
	cfg.Logger.Info("mesh node agent started", "node", cfg.NodeName, "interface", cfg.Interface, "userspace", ifc.userspace,
		"public_key", key.PublicKey().String(), "port", port)
	return n.loop(ctx)
}

// loop watches the cluster's peers and republishes the report.
func (n *Node) loop(ctx context.Context) error {
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	states := make(chan transport.MeshState, 1)
	go n.watchPeers(ctx, states)
	n.publish(ctx, true)
	lastTick := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-states:
			if err := n.apply(s); err != nil {
				n.cfg.Logger.Warn("applying the mesh state", "revision", s.Revision, "err", err)
			}
			n.publish(ctx, true)
		case <-ticker.C:
			now := n.cfg.Now()
			if !n.switchAt.IsZero() && !now.Before(n.switchAt) {
				if err := n.switchKey(); err != nil {
					n.cfg.Logger.Warn("switching to the next key", "err", err)
				}
				n.publish(ctx, true)
			}
			// While a peer rotates, its two keys are watched closely: the
			// allowed IPs follow the latest handshake.
			if len(n.plan.twins) > 0 {
				if err := n.configurePeers(); err != nil {
					n.cfg.Logger.Warn("following a peer's rotation", "err", err)
				}
			}
			if now.Sub(lastTick) >= min(n.cfg.ReportEvery, 5*time.Second) {
				lastTick = now
				n.publish(ctx, false)
			}
		}
	}
}

// configurePeers applies the current plan's peers against the device.
func (n *Node) configurePeers() error {
	dev, err := n.wg.Device(n.cfg.Interface)
	if err != nil {
		return fmt.Errorf("mesh: reading %s: %w", n.cfg.Interface, err)
	}
	if err := n.wg.ConfigureDevice(n.cfg.Interface, wgtypes.Config{Peers: peerConfigs(n.plan, dev, n.cfg.Now())}); err != nil {
		return fmt.Errorf("mesh: configuring the peers of %s: %w", n.cfg.Interface, err)
	}
	return nil
}

// rotation follows the plan's say on this node's key: a requested rotation
// stages a next key (published with the report); once the state gives the
// staged key to the peers, the switch is due after the grace.
func (n *Node) rotation(p plan) error {
	if p.rotate && n.next == nil {
		k, err := stageNextKey(n.cfg.KeyDir)
		if err != nil {
			return err
		}
		n.next = &k
		n.cfg.Logger.Info("mesh key rotation: next key made", "next_public_key", k.PublicKey().String())
	}
	if n.next != nil && p.ownNext == n.next.PublicKey().String() && n.switchAt.IsZero() {
		n.switchAt = n.cfg.Now().Add(n.cfg.RotationGrace)
		n.cfg.Logger.Info("mesh key rotation: the peers have the next key; switching", "at", n.switchAt)
	}
	return nil
}

// switchKey puts the staged key in use and opens a session with every peer
// at once (a keepalive each), so the peers see the new key's handshake and
// move its routes to it.
func (n *Node) switchKey() error {
	next := *n.next
	if err := n.wg.ConfigureDevice(n.cfg.Interface, wgtypes.Config{PrivateKey: &next}); err != nil {
		return fmt.Errorf("mesh: setting the new key on %s: %w", n.cfg.Interface, err)
	}
	if err := promoteNextKey(n.cfg.KeyDir); err != nil {
		return err
	}
	old := n.key
	n.key, n.next, n.switchAt = next, nil, time.Time{}
	ka := 25 * time.Second
	var peers []wgtypes.PeerConfig
	for k := range n.plan.peers {
		peers = append(peers, wgtypes.PeerConfig{PublicKey: k, UpdateOnly: true, PersistentKeepaliveInterval: &ka})
	}
	if err := n.wg.ConfigureDevice(n.cfg.Interface, wgtypes.Config{Peers: peers}); err != nil {
		return fmt.Errorf("mesh: reaching the peers with the new key: %w", err)
	}
	n.cfg.Logger.Info("mesh key rotation: switched", "old_public_key", old.PublicKey().String(), "public_key", next.PublicKey().String())
	// The plan's own keepalive comes back with the next configuration.
	return n.configurePeers()
}

// apply configures the interface from a state newer than the applied one.
func (n *Node) apply(s transport.MeshState) error {
	if s.Revision < n.applied.Revision || s.Revision == n.applied.Revision && s.Hash == n.applied.Hash {
		return nil
	}
	p, err := planFor(s, n.cfg.NodeName, n.key)
	if err != nil {
		return err
	}
	n.plan = p
	if err := n.configurePeers(); err != nil {
		return err
	}
	if err := configureLink(n.cfg.Interface, p); err != nil {
		return err
	}
	if err := n.rotation(p); err != nil {
		return err
	}
	n.applied = s
	n.cfg.Logger.Info("mesh state applied", "revision", s.Revision, "address", p.address, "peers", len(p.peers), "routes", len(p.routes))
	return nil
}

// watchPeers sends every version of the peers ConfigMap's state.
func (n *Node) watchPeers(ctx context.Context, out chan transport.MeshState) {
	cms := n.cfg.Client.CoreV1().ConfigMaps(n.cfg.Namespace)
	sel := fields.OneTermEqualSelector("metadata.name", PeersConfigMap).String()
	send := func(cm *corev1.ConfigMap) {
		var s transport.MeshState
		if err := json.Unmarshal([]byte(cm.Data[StateKey]), &s); err != nil {
			n.cfg.Logger.Warn("the peers ConfigMap does not hold a mesh state", "err", err)
			return
		}
		select {
		case <-out: // a newer one replaces what was not taken yet
		default:
		}
		out <- s
	}
	backoff := time.Second
	for ctx.Err() == nil {
		list, err := cms.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			n.cfg.Logger.Warn("reading the mesh's peers", "err", err)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		for i := range list.Items {
			send(&list.Items[i])
		}
		w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			sleep(ctx, backoff)
			continue
		}
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				send(cm)
			}
		}
		w.Stop()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// report reads what the node publishes: its key, endpoints, the applied
// revision and the peers' handshakes.
func (n *Node) report() transport.MeshNodeReport {
	r := transport.MeshNodeReport{Node: n.cfg.NodeName, PublicKey: n.key.PublicKey().String(), Revision: n.applied.Revision,
		Userspace: n.iface.userspace, Endpoints: n.endpoints()}
	if n.next != nil {
		r.NextPublicKey = n.next.PublicKey().String()
	}
	if dev, err := n.wg.Device(n.cfg.Interface); err == nil {
		for _, p := range dev.Peers {
			h := transport.MeshPeerHealth{PublicKey: p.PublicKey.String(), RxBytes: p.ReceiveBytes, TxBytes: p.TransmitBytes}
			if p.Endpoint != nil {
				if ap, ok := netip.AddrFromSlice(p.Endpoint.IP); ok {
					h.Endpoint = netip.AddrPortFrom(ap.Unmap(), uint16(p.Endpoint.Port)).String()
				}
			}
			if !p.LastHandshakeTime.IsZero() {
				h.LastHandshake = p.LastHandshakeTime.UTC().Format(time.RFC3339)
			}
			r.Peers = append(r.Peers, h)
		}
		slices.SortFunc(r.Peers, func(a, b transport.MeshPeerHealth) int { return cmpString(a.PublicKey, b.PublicKey) })
	}
	return r
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// publish writes the report when something but the counters changed, or
// when the last one is older than ReportEvery (always when force).
func (n *Node) publish(ctx context.Context, force bool) {
	r := n.report()
	same := r.PublicKey == n.last.PublicKey && r.NextPublicKey == n.last.NextPublicKey && r.Revision == n.last.Revision && slices.Equal(r.Endpoints, n.last.Endpoints) &&
		len(r.Peers) == len(n.last.Peers)
	for i := 0; same && i < len(r.Peers); i++ {
		same = r.Peers[i].PublicKey == n.last.Peers[i].PublicKey && r.Peers[i].LastHandshake == n.last.Peers[i].LastHandshake &&
			r.Peers[i].Endpoint == n.last.Peers[i].Endpoint
	}
	if !force && same && n.cfg.Now().Sub(n.lastAt) < n.cfg.ReportEvery {
		return
	}
	b, err := json.Marshal(r)
	if err != nil {
		return
	}
	cm := corev1ac.ConfigMap(ReportName(n.cfg.NodeName), n.cfg.Namespace).
		WithLabels(map[string]string{NodeLabel: labelValue(n.cfg.NodeName), "app.kubernetes.io/managed-by": FieldManager}).
		WithData(map[string]string{ReportKey: string(b), "updated": n.cfg.Now().UTC().Format(time.RFC3339)})
	apply := func() error {
		_, err := n.cfg.Client.CoreV1().ConfigMaps(n.cfg.Namespace).Apply(ctx, cm, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		return err
	}
	err = apply()
	if apierrors.IsNotFound(err) && n.ensureNamespace(ctx) {
		err = apply()
	}
	if err != nil {
		if ctx.Err() == nil {
			n.cfg.Logger.Warn("publishing the node's mesh report", "err", err)
		}
		return
	}
	n.last, n.lastAt = r, n.cfg.Now()
}

// ensureNamespace makes the mesh's namespace when it is missing: a host
// install has no manifest that makes it (with the cluster's administrator
// kubeconfig the node agent may; under the manifest's ServiceAccount it may
// not, and the manifest made it). It reports whether the namespace exists.
func (n *Node) ensureNamespace(ctx context.Context) bool {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Namespace, Labels: map[string]string{
		"app.kubernetes.io/part-of":                  "nebulactrl",
		"pod-security.kubernetes.io/enforce":         "privileged",
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn":            "restricted",
		"pod-security.kubernetes.io/audit":           "restricted",
	}}}
	_, err := n.cfg.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err == nil {
		n.cfg.Logger.Info("created the mesh's namespace", "namespace", n.cfg.Namespace)
	}
	return err == nil || apierrors.IsAlreadyExists(err)
}

// labelValue fits a node name into a label value (63 bytes).
func labelValue(s string) string {
	if len(s) <= 63 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return s[:46] + "-" + hex.EncodeToString(sum[:8])
}

// endpoints are the node's candidate endpoints: --endpoint alone when set;
// else the addresses of the interface that holds the default route first,
// then every other global unicast address of an interface that is up (not
// the mesh's own), each with the listen port.
func (n *Node) endpoints() []string {
	if n.cfg.Endpoint != "" {
		e, _ := endpointOf(n.cfg.Endpoint, n.cfg.ListenPort)
		return []string{e}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	first := -1
	if routes, err := netlink.RouteList(nil, netlink.FAMILY_V4); err == nil {
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				first = r.LinkIndex
				break
			}
		}
	}
	slices.SortStableFunc(links, func(a, b netlink.Link) int {
		switch {
		case a.Attrs().Index == first:
			return -1
		case b.Attrs().Index == first:
			return 1
		}
		return 0
	})
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if a.Name == n.cfg.Interface || a.Flags&net.FlagUp == 0 || a.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok || !ip.Unmap().IsGlobalUnicast() {
				continue
			}
			out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(n.cfg.ListenPort)).String())
			if len(out) == 16 {
				return out
			}
		}
	}
	return out
}
