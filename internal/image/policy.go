package image

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

// The address policy: image references come from users, so the registry
// host in them is untrusted input. Without a policy, a Member could make the
// control plane connect to its own loopback services, the link-local network
// or the cloud metadata service and learn from the answer (a port scanner, or
// worse). Every connection the resolver opens is checked at dial time, on the
// IP address actually dialed, so a name that resolves differently the second
// time (DNS rebinding), a redirect, or a token service named by the registry
// cannot get around it.
//
// Refused unless the registry is listed (Config.Insecure or Config.Allowed):
// loopback, unspecified ("this network", 0.0.0.0/8 and ::), link-local
// (169.254.0.0/16, fe80::/10), multicast, broadcast and cloud metadata
// addresses and names. Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7,
// 100.64/10) are allowed by default, because a self-hosted platform's
// registry often lives on a private network; Config.DenyPrivate refuses them
// too.

// ErrAddressRefused means the registry (or a host it redirected to) resolves
// to an address the control plane does not contact for image resolution. It
// also matches ErrUnreachable.
var ErrAddressRefused = errors.New("registry address refused")

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

// addrRefusal says why ip may not be dialed, or "" when it may.
func addrRefusal(ip netip.Addr, denyPrivate bool) string {
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

func isMetadataName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, n := range metadataNames {
		if host == n || strings.HasSuffix(host, "."+n) {
			return true
		}
	}
	return false
}

// refusedError is a connection the policy refused. It names only what this
// process decided (the host it was asked to reach and the address), never
// anything a remote sent.
type refusedError struct {
	host   string     // host name or literal of the connection
	addr   string     // host:port dialed (empty when refused before dialing)
	ip     netip.Addr // the address refused (invalid when refused by name)
	reason string
}

func (e *refusedError) Error() string {
	if !e.ip.IsValid() {
		return fmt.Sprintf("connecting to %s refused: it is %s", e.host, e.reason)
	}
	return fmt.Sprintf("connecting to %s refused: %s is %s", e.host, e.ip, e.reason)
}

func (e *refusedError) Is(target error) bool { return target == ErrAddressRefused }

// hostList is a set of registries given as "host" (any port) or "host:port".
type hostList struct {
	anyPort  map[string]bool
	withPort map[string]bool
}

func newHostList(lists ...[]string) hostList {
	l := hostList{anyPort: map[string]bool{}, withPort: map[string]bool{}}
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

// contains reports whether the dial address host:port is listed.
func (l hostList) contains(hostPort string) bool {
	host, port, err := net.SplitHostPort(strings.ToLower(hostPort))
	if err != nil {
		return false
	}
	return l.anyPort[host] || l.withPort[net.JoinHostPort(host, port)]
}

// guard applies the address policy to the connections of one Resolver.
type guard struct {
	listed      hostList
	denyPrivate bool
	// proxies are the proxy addresses the environment configured: the
	// operator chose them, so dialing them is not checked (the target of a
	// proxied request is checked in proxy instead).
	proxies sync.Map
	// envProxy is http.ProxyFromEnvironment, or the base transport's Proxy.
	envProxy func(*http.Request) (*url.URL, error)
	lookup   func(ctx context.Context, host string) ([]netip.Addr, error)
	open     *net.Dialer // listed registries and proxies
	checked  *net.Dialer // everything else: Control refuses per address
}

func newGuard(listed hostList, denyPrivate bool, envProxy func(*http.Request) (*url.URL, error)) *guard {
	g := &guard{listed: listed, denyPrivate: denyPrivate, envProxy: envProxy,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		open: &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
	}
	g.checked = &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	return g
}

// control runs for every address the dialer is about to connect to, after
// name resolution: the address checked is the one connected to.
func (g *guard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &refusedError{host: address, reason: "not an IP address"}
	}
	if why := addrRefusal(ap.Addr(), g.denyPrivate); why != "" {
		return &refusedError{host: address, ip: ap.Addr().Unmap(), reason: why}
	}
	return nil
}

// DialContext is the transport's dialer.
func (g *guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if _, isProxy := g.proxies.Load(strings.ToLower(addr)); isProxy || g.listed.contains(addr) {
		return g.open.DialContext(ctx, network, addr)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if isMetadataName(host) {
		return nil, &refusedError{host: host, addr: addr, reason: "a cloud metadata service"}
	}
	conn, err := g.checked.DialContext(ctx, network, addr)
	if err != nil {
		// The dialer reports the last address it tried; when any address
		// was refused, that is the answer that explains the failure.
		var re *refusedError
		if errors.As(err, &re) {
			re.host, re.addr = host, addr
			return nil, re
		}
	}
	return conn, err
}

// Proxy is the transport's proxy function. Through a proxy this process
// never dials the registry itself, so the target is checked here against
// what its name resolves to now (the proxy's own resolution is its
// business: run the proxy under the same policy).
func (g *guard) Proxy(req *http.Request) (*url.URL, error) {
	if g.envProxy == nil {
		return nil, nil
	}
	u, err := g.envProxy(req)
	if err != nil || u == nil {
		return u, err
	}
	target := canonicalAddr(req.URL)
	if !g.listed.contains(target) {
		if err := g.checkTarget(req.Context(), target); err != nil {
			return nil, err
		}
	}
	g.proxies.Store(strings.ToLower(canonicalAddr(u)), true)
	return u, nil
}

func (g *guard) checkTarget(ctx context.Context, hostPort string) error {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return err
	}
	if isMetadataName(host) {
		return &refusedError{host: host, addr: hostPort, reason: "a cloud metadata service"}
	}
	addrs := []netip.Addr{}
	if ip, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = append(addrs, ip)
	} else if addrs, err = g.lookup(ctx, host); err != nil {
		// The proxy may resolve names this host cannot; nothing to refuse.
		return nil
	}
	for _, ip := range addrs {
		if why := addrRefusal(ip, g.denyPrivate); why != "" {
			return &refusedError{host: host, addr: hostPort, ip: ip.Unmap(), reason: why}
		}
	}
	return nil
}

// canonicalAddr is u's host:port with the scheme's default port filled in,
// as the transport dials it.
func canonicalAddr(u *url.URL) string {
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

// plainHTTPError is a plain-HTTP request to a registry not listed as
// insecure: its credentials and manifests would cross the network in clear.
type plainHTTPError struct{ host, addr string }

func (e *plainHTTPError) Error() string {
	return fmt.Sprintf("plain HTTP to %s refused: it is not listed as an insecure registry", e.host)
}

// httpsOnly refuses plain HTTP except to the registries listed as insecure.
// go-containerregistry falls back to plain HTTP on its own for registries on
// private and loopback addresses, and follows redirects to http:// URLs.
type httpsOnly struct {
	next     http.RoundTripper
	insecure hostList
}

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !h.insecure.contains(canonicalAddr(req.URL)) {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, &plainHTTPError{host: req.URL.Host, addr: canonicalAddr(req.URL)}
	}
	return h.next.RoundTrip(req)
}
