package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/nebulactrl/nebulactrl/transport"
)

// roamedFresh is how recent a handshake must be for an endpoint the peer
// roamed to to be kept over the one the control plane gives: a peer behind
// NAT is reached where its packets come from, not where it thinks it is.
const roamedFresh = 3 * time.Minute

// plan is what a node configures from a mesh state.
type plan struct {
	address   netip.Prefix // the node's mesh address, with the network's length
	keepalive time.Duration
	peers     map[wgtypes.Key]transport.MeshPeer
	// twins maps a peer's next key to its current one: both are peers, and
	// the allowed IPs go to whichever made the latest handshake.
	twins map[wgtypes.Key]wgtypes.Key
	// rotate asks this node for a new key; ownNext is the next key the
	// state gives this node's peers (its staged key once it is compiled).
	rotate  bool
	ownNext string
	// routes are the allowed IPs outside the mesh network (other
	// clusters' pod and service ranges): routed over the interface.
	routes []netip.Prefix
}

// planFor reads what node self of the state configures; an error when the
// state is invalid. A state that does not name the node (removed from the
// organisation, or not given an address yet) gives an empty plan: no
// address, no peers.
func planFor(s transport.MeshState, self string, own wgtypes.Key) (plan, error) {
	p := plan{peers: map[wgtypes.Key]transport.MeshPeer{}, twins: map[wgtypes.Key]wgtypes.Key{}}
	if err := s.Validate(); err != nil {
		return p, err
	}
	network := netip.MustParsePrefix(s.Network)
	i := slices.IndexFunc(s.Nodes, func(n transport.MeshNode) bool { return n.Name == self })
	if i < 0 {
		return p, nil
	}
	addr := netip.MustParseAddr(s.Nodes[i].Address)
	p.address = netip.PrefixFrom(addr, network.Bits())
	p.keepalive = time.Duration(s.Nodes[i].Keepalive) * time.Second
	p.rotate = s.Nodes[i].Rotate
	seen := map[netip.Prefix]bool{}
	for _, peer := range s.Peers {
		k, _ := wgtypes.ParseKey(peer.PublicKey)
		if peer.Cluster == s.ClusterID && peer.Node == self {
			p.ownNext = peer.NextPublicKey
			continue
		}
		if k == own.PublicKey() {
			continue
		}
		p.peers[k] = peer
		if peer.NextPublicKey != "" {
			next, _ := wgtypes.ParseKey(peer.NextPublicKey)
			twin := peer
			twin.PublicKey = peer.NextPublicKey
			p.peers[next] = twin
			p.twins[next] = k
		}
		for _, a := range peer.AllowedIPs {
			pfx := netip.MustParsePrefix(a).Masked()
			if !network.Contains(pfx.Addr()) && !seen[pfx] {
				seen[pfx] = true
				p.routes = append(p.routes, pfx)
			}
		}
	}
	return p, nil
}

// peerConfigs turns a plan into wgctrl's peer changes against the device as
// it is: peers that left are removed, new ones added, and the others updated
// in place (their sessions kept: a reconfiguration costs no handshake). An
// endpoint the peer roamed to with a fresh handshake is kept.
func peerConfigs(p plan, dev *wgtypes.Device, now time.Time) []wgtypes.PeerConfig {
	current := map[wgtypes.Key]wgtypes.Peer{}
	for _, peer := range dev.Peers {
		current[peer.PublicKey] = peer
	}
	var out []wgtypes.PeerConfig
	for k := range current {
		if _, ok := p.peers[k]; !ok {
			out = append(out, wgtypes.PeerConfig{PublicKey: k, Remove: true})
		}
	}
	keys := make([]wgtypes.Key, 0, len(p.peers))
	for k := range p.peers {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b wgtypes.Key) int { return slices.Compare(a[:], b[:]) })
	// Of a peer's two keys during its rotation, the one that made the
	// latest handshake gets the allowed IPs; the current one until then.
	silent := map[wgtypes.Key]bool{}
	for next, cur := range p.twins {
		if current[next].LastHandshakeTime.After(current[cur].LastHandshakeTime) {
			silent[cur] = true
		} else {
			silent[next] = true
		}
	}
	for _, k := range keys {
		want := p.peers[k]
		ka := p.keepalive
		pc := wgtypes.PeerConfig{PublicKey: k, ReplaceAllowedIPs: true, PersistentKeepaliveInterval: &ka}
		if silent[k] {
			want.AllowedIPs = nil
		}
		for _, a := range want.AllowedIPs {
			pfx := netip.MustParsePrefix(a).Masked()
			pc.AllowedIPs = append(pc.AllowedIPs, net.IPNet{IP: pfx.Addr().AsSlice(), Mask: net.CIDRMask(pfx.Bits(), pfx.Addr().BitLen())})
		}
		cur, exists := current[k]
		if exists {
			pc.UpdateOnly = true
		}
		if want.Endpoint != "" {
			ep := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(want.Endpoint))
			roamed := exists && cur.Endpoint != nil && !cur.LastHandshakeTime.IsZero() && now.Sub(cur.LastHandshakeTime) < roamedFresh
			if !roamed && (cur.Endpoint == nil || cur.Endpoint.String() != ep.String()) {
				pc.Endpoint = ep
			}
		}
		out = append(out, pc)
	}
	return out
}

// configureLink gives the interface its address (and only it), brings it
// up, and routes the plan's prefixes over it (and only them).
func configureLink(name string, p plan) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("mesh: finding interface %s: %w", name, err)
	}
	want := ""
	if p.address.IsValid() {
		want = (&net.IPNet{IP: p.address.Addr().AsSlice(), Mask: net.CIDRMask(p.address.Bits(), p.address.Addr().BitLen())}).String()
	}
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("mesh: listing the addresses of %s: %w", name, err)
	}
	for _, a := range addrs {
		if a.IPNet.String() != want && !a.IP.IsLinkLocalUnicast() {
			if err := netlink.AddrDel(link, &a); err != nil {
				return fmt.Errorf("mesh: removing address %s from %s: %w", a.IPNet, name, err)
			}
		}
	}
	if want != "" {
		ipn, _ := netlink.ParseIPNet(want)
		if err := netlink.AddrReplace(link, &netlink.Addr{IPNet: ipn}); err != nil {
			return fmt.Errorf("mesh: setting address %s on %s: %w", p.address, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("mesh: bringing %s up: %w", name, err)
	}
	routes, err := netlink.RouteList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("mesh: listing the routes of %s: %w", name, err)
	}
	wanted := map[string]bool{}
	for _, r := range p.routes {
		wanted[r.String()] = true
	}
	for _, r := range routes {
		if r.Dst == nil || r.Protocol == netlink.RouteProtocol(2) /* kernel: the address's own */ {
			continue
		}
		if pfx, ok := netipPrefix(r.Dst); ok && !wanted[pfx.String()] {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, netlink.ErrNotImplemented) {
				return fmt.Errorf("mesh: removing route %s: %w", pfx, err)
			}
		}
	}
	for _, r := range p.routes {
		dst := &net.IPNet{IP: r.Addr().AsSlice(), Mask: net.CIDRMask(r.Bits(), r.Addr().BitLen())}
		if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
			return fmt.Errorf("mesh: routing %s over %s: %w", r, name, err)
		}
	}
	return nil
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
