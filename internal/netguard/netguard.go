// Package netguard is the control plane's address policy for connections
// to hosts that users name: image registries (internal/image) and outbound
// webhook receivers (internal/webhooks). Such a host is untrusted input;
// without a policy a user could make the control plane connect to its own
// loopback services, the link-local network or the cloud metadata service
// and learn from the answer. Every connection is checked at dial time, on
// the IP address actually dialed, so a name that resolves differently the
// second time (DNS rebinding) or a redirect cannot get around it.
//
// Refused unless the host is listed: loopback, unspecified ("this
// network", 0.0.0.0/8 and ::), link-local (169.254.0.0/16, fe80::/10),
// multicast, broadcast and cloud metadata addresses and names. Private
// ranges (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10) are allowed
// unless DenyPrivate refuses them too.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrRefused means a host resolves to an address the policy refuses.
var ErrRefused = errors.New("address refused")

// metadataAddrs are cloud instance metadata endpoints: AWS, GCP, Azure,
// OpenStack and others (169.254.169.254), AWS over IPv6 (fd00:ec2::254),
// Alibaba Cloud (100.100.100.200) and Azure's platform endpoint (168.63.129.16).
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("169.254.169.254"): true,
	netip.MustParseAddr("fd00:ec2::254"):   true,
	netip.MustParseAddr("100.100.100.200"): true,
	netip.MustParseAddr("168.63.129.16"):   true,
}

// metadataNames are names of metadata services, refused before any lookup.
var metadataNames = []string{"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// Refusal says why ip may not be dialed, or "" when it may.
func Refusal(ip netip.Addr, denyPrivate bool) string {
	ip = ip.Unmap()
	if ip.Is6() {
		// IPv4-compatible IPv6 (::a.b.c.d) is judged as the IPv4 address.
		if b := ip.As16(); [12]byte(b[:12]) == [12]byte{} && !ip.IsLoopback() && !ip.IsUnspecified() {
			ip = netip.AddrFrom4([4]byte(b[12:]))
		}
	}
	switch {
	case metadataAddrs[ip]:
		return "a cloud metadata address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "an unspecified address"
	case ip.IsLinkLocalUnicast():
		return "a link-local address"
	case ip.IsMulticast() || ip == broadcast:
		return "a multicast or broadcast address"
	case denyPrivate && (ip.IsPrivate() || cgnat.Contains(ip)):
		return "a private address"
	}
	return ""
}

// IsMetadataName reports the names of cloud metadata services.
func IsMetadataName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range metadataNames {
		if host == n || strings.HasSuffix(host, "."+n) {
			return true
		}
	}
	return false
}

// RefusedError is a connection the policy refused. It names only what this
// process decided (the host it was asked to reach and the address), never
// anything a remote sent.
type RefusedError struct {
	Host   string     // host name or literal of the connection
	Addr   string     // host:port dialed (empty when refused before dialing)
	IP     netip.Addr // the address refused (invalid when refused by name)
	Reason string
}

func (e *RefusedError) Error() string {
	if !e.IP.IsValid() {
		return fmt.Sprintf("connecting to %s refused: it is %s", e.Host, e.Reason)
	}
	return fmt.Sprintf("connecting to %s refused: %s is %s", e.Host, e.IP, e.Reason)
}

func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// HostList is a set of hosts given as "host" (any port) or "host:port".
type HostList struct {
	anyPort  map[string]bool
	withPort map[string]bool
}

// NewHostList joins lists of "host" or "host:port" (case-insensitive).
func NewHostList(lists ...[]string) HostList {
	l := HostList{anyPort: map[string]bool{}, withPort: map[string]bool{}}
	for _, list := range lists {
		for _, h := range list {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" {
				continue
			}
			if host, port, err := net.SplitHostPort(h); err == nil {
				l.withPort[net.JoinHostPort(host, port)] = true
				continue
			}
			l.anyPort[strings.Trim(h, "[]")] = true
		}
	}
	return l
}

// Contains reports whether the dial address host:port is listed.
func (l HostList) Contains(hostPort string) bool {
	host, port, err := net.SplitHostPort(strings.ToLower(hostPort))
	if err != nil {
		return false
	}
	return l.anyPort[host] || l.withPort[net.JoinHostPort(host, port)]
}

// Guard applies the policy to the connections of one transport.
type Guard struct {
	listed      HostList
	denyPrivate bool
	// proxies are the proxy addresses the environment configured: the
	// operator chose them, so dialing them is not checked (the target of a
	// proxied request is checked in Proxy instead).
	proxies sync.Map
	// envProxy is http.ProxyFromEnvironment, or the base transport's Proxy.
	envProxy func(*http.Request) (*url.URL, error)
	// Lookup resolves names for Proxy's check (tests replace it).
	Lookup  func(ctx context.Context, host string) ([]netip.Addr, error)
	open    *net.Dialer // listed hosts and proxies
	checked *net.Dialer // everything else: Control refuses per address
}

// New returns a guard: listed hosts are dialed without checks, private
// ranges refused with denyPrivate, envProxy (nil: none) chooses proxies.
func New(listed HostList, denyPrivate bool, envProxy func(*http.Request) (*url.URL, error)) *Guard {
	g := &Guard{listed: listed, denyPrivate: denyPrivate, envProxy: envProxy,
		Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		open: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
	}
	g.checked = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.Control}
	return g
}

// Listed reports whether host:port is on the guard's list.
func (g *Guard) Listed(hostPort string) bool { return g.listed.Contains(hostPort) }

// Control runs for every address the dialer is about to connect to, after
// name resolution: the address checked is the one connected to.
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &RefusedError{Host: address, Reason: "not an IP address"}
	}
	if why := Refusal(ap.Addr(), g.denyPrivate); why != "" {
		return &RefusedError{Host: address, IP: ap.Addr().Unmap(), Reason: why}
	}
	return nil
}

// DialContext is the transport's dialer.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, isProxy := g.proxies.Load(strings.ToLower(addr)); isProxy || g.listed.Contains(addr) {
		return g.open.DialContext(ctx, network, addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if IsMetadataName(host) {
		return nil, &RefusedError{Host: host, Addr: addr, Reason: "a cloud metadata service"}
	}
	conn, err := g.checked.DialContext(ctx, network, addr)
	if err != nil {
		// The dialer reports the last address it tried; when any address
		// was refused, that is the answer that explains the failure.
		var re *RefusedError
		if errors.As(err, &re) {
			re.Host, re.Addr = host, addr
			return nil, re
		}
	}
	return conn, err
}

// Proxy is the transport's proxy function. Through a proxy this process
// never dials the target itself, so the target is checked here against
// what its name resolves to now (the proxy's own resolution is its
// business: run the proxy under the same policy).
func (g *Guard) Proxy(req *http.Request) (*url.URL, error) {
	if g.envProxy == nil {
		return nil, nil
	}
	u, err := g.envProxy(req)
	if err != nil || u == nil {
		return u, err
	}
	target := CanonicalAddr(req.URL)
	if !g.listed.Contains(target) {
		if err := g.checkTarget(req.Context(), target); err != nil {
			return nil, err
		}
	}
	g.proxies.Store(strings.ToLower(CanonicalAddr(u)), true)
	return u, nil
}

func (g *Guard) checkTarget(ctx context.Context, hostPort string) error {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return err
	}
	if IsMetadataName(host) {
		return &RefusedError{Host: host, Addr: hostPort, Reason: "a cloud metadata service"}
	}
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = append(addrs, ip)
	} else if addrs, err = g.Lookup(ctx, host); err != nil {
		// The proxy may resolve names this host cannot; nothing to refuse.
		return nil
	}
	for _, ip := range addrs {
		if why := Refusal(ip, g.denyPrivate); why != "" {
			return &RefusedError{Host: host, Addr: hostPort, IP: ip.Unmap(), Reason: why}
		}
	}
	return nil
}

// CanonicalAddr is u's host:port with the scheme's default port filled in,
// as the transport dials it.
func CanonicalAddr(u *url.URL) string {
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "socks5", "socks5h":
			port = "1080"
		default:
			port = "80"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}
