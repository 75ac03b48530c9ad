package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"

	"github.com/nebulactrl/nebulactrl/internal/netguard"
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

// The policy itself is internal/netguard's, shared with the outbound
// webhooks; this file adapts it to the resolver's errors.

// ErrAddressRefused means the registry (or a host it redirected to) resolves
// to an address the control plane does not contact for image resolution. It
// also matches ErrUnreachable.
var ErrAddressRefused = errors.New("registry address refused")

// addrRefusal says why ip may not be dialed, or "" when it may.
func addrRefusal(ip netip.Addr, denyPrivate bool) string { return netguard.Refusal(ip, denyPrivate) }

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
	return (&netguard.RefusedError{Host: e.host, Addr: e.addr, IP: e.ip, Reason: e.reason}).Error()
}

func (e *refusedError) Is(target error) bool { return target == ErrAddressRefused }

// asRefused turns the policy's refusal into the resolver's.
func asRefused(err error) error {
	var re *netguard.RefusedError
	if errors.As(err, &re) {
		return &refusedError{host: re.Host, addr: re.Addr, ip: re.IP, reason: re.Reason}
	}
	return err
}

// hostList is a set of registries given as "host" (any port) or "host:port".
type hostList struct{ netguard.HostList }

func newHostList(lists ...[]string) hostList { return hostList{netguard.NewHostList(lists...)} }

// contains reports whether the dial address host:port is listed.
func (l hostList) contains(hostPort string) bool { return l.Contains(hostPort) }

// guard applies the address policy to the connections of one Resolver.
type guard struct{ g *netguard.Guard }

func newGuard(listed hostList, denyPrivate bool, envProxy func(*http.Request) (*url.URL, error)) *guard {
	return &guard{g: netguard.New(listed.HostList, denyPrivate, envProxy)}
}

// control runs for every address the dialer is about to connect to.
func (g *guard) control(network, address string, c syscall.RawConn) error {
	return asRefused(g.g.Control(network, address, c))
}

// DialContext is the transport's dialer.
func (g *guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := g.g.DialContext(ctx, network, addr)
	return conn, asRefused(err)
}

// Proxy is the transport's proxy function (the target of a proxied request
// is checked against what its name resolves to now).
func (g *guard) Proxy(req *http.Request) (*url.URL, error) {
	u, err := g.g.Proxy(req)
	return u, asRefused(err)
}

// canonicalAddr is u's host:port with the scheme's default port filled in,
// as the transport dials it.
func canonicalAddr(u *url.URL) string { return netguard.CanonicalAddr(u) }

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
