// Package image owns turning the image reference a user gives to
// `nebula deploy --image` into an immutable, digest-pinned reference
// (registry/repository@sha256:...). It asks the image's registry over the
// registry HTTP API, so a release never records a tag that could later point
// at different bytes, and a reference the registry cannot vouch for is refused
// before anything is created.
package image

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Sentinel errors that callers branch on with errors.Is. The errors returned
// by Resolve carry a full, user-facing message; these only classify them.
var (
	// ErrInvalidReference means the string is not an image reference at all;
	// no registry was contacted.
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrNotFound means the registry answered that the repository, tag or
	// digest does not exist.
	ErrNotFound = errors.New("image not found")
	// ErrUnauthorized means the registry refused the request (401 or 403):
	// missing or wrong credentials, or no pull permission.
	ErrUnauthorized = errors.New("registry refused access")
	// ErrUnreachable means no usable answer came back from the registry:
	// DNS, connection, TLS or timeout failure.
	ErrUnreachable = errors.New("registry unreachable")
)

// MaxReferenceLength bounds the accepted reference. Real references are far
// shorter; the bound keeps absurd input out of error messages and logs.
const MaxReferenceLength = 1024

// Defaults applied by NewResolver to zero Config fields.
const (
	DefaultTimeout   = 20 * time.Second
	DefaultUserAgent = "nebulactrl"
)

// Config says how the Resolver reaches registries. The zero value is usable.
type Config struct {
	// Insecure lists registry hosts ("host:port" exactly as written in image
	// references, e.g. "127.0.0.1:5000" or "localhost:5000") that may be
	// reached over plain HTTP. It is meant for loopback development
	// registries only: over plain HTTP credentials and manifests travel
	// unprotected. A registry listed here is also exempt from the address
	// policy (see Allowed).
	Insecure []string
	// Allowed lists registries ("host" for any port, or "host:port") that
	// may resolve to any address. Every other registry, and every host a
	// registry redirects to, is refused when it resolves to a loopback,
	// unspecified, link-local, multicast or cloud metadata address (and to a
	// private address with DenyPrivate).
	Allowed []string
	// DenyPrivate refuses private addresses (10/8, 172.16/12, 192.168/16,
	// fc00::/7, 100.64/10) too, unless the registry is listed.
	DenyPrivate bool
	// Timeout bounds one Resolve call, all round trips included.
	// Default DefaultTimeout.
	Timeout time.Duration
	// Auth are credentials by registry host ("host" or "host:port"), asked
	// first (NEBULACTRL_REGISTRY_AUTH; see ParseAuth).
	Auth map[string]authn.AuthConfig
	// AuthFile is a Docker config file (its "auths" and credential helpers)
	// asked after Auth, instead of Keychain. It is read at every Resolve, so
	// a rotated token is picked up without a restart.
	AuthFile string
	// Keychain supplies registry credentials when AuthFile is empty.
	// Default authn.DefaultKeychain (the Docker config and credential
	// helpers of the current user: $DOCKER_CONFIG or ~/.docker/config.json).
	Keychain authn.Keychain
	// Transport is the base of the HTTP transport (TLS settings, proxy; tests).
	// Its DialContext is replaced and its Proxy wrapped, so every connection
	// passes the address policy. Default remote.DefaultTransport.
	Transport *http.Transport
	// UserAgent is sent to the registry. Default DefaultUserAgent.
	UserAgent string
}

func (c *Config) setDefaults() {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Keychain == nil {
		c.Keychain = authn.DefaultKeychain
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
}

// Resolver pins image references to digests. It is safe for concurrent use.
type Resolver struct {
	cfg       Config
	insecure  map[string]bool
	keychain  authn.Keychain
	transport http.RoundTripper
}

// NewResolver returns a Resolver with cfg's zero fields set to their defaults.
func NewResolver(cfg Config) *Resolver {
	cfg.setDefaults()
	insecure := make(map[string]bool, len(cfg.Insecure))
	for _, h := range cfg.Insecure {
		// Registry hosts are case-insensitive; references are matched the
		// same way so "LocalHost:5000" in a config still applies.
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			insecure[h] = true
		}
	}
	base := cfg.Transport
	if base == nil {
		base = remote.DefaultTransport.(*http.Transport)
	}
	tr := base.Clone()
	g := newGuard(newHostList(cfg.Insecure, cfg.Allowed), cfg.DenyPrivate, base.Proxy)
	tr.DialContext = g.DialContext
	tr.DialTLSContext = nil
	tr.Proxy = g.Proxy

	keychains := []authn.Keychain{}
	if len(cfg.Auth) > 0 {
		keychains = append(keychains, staticKeychain(cfg.Auth))
	}
	if cfg.AuthFile != "" {
		keychains = append(keychains, fileKeychain(cfg.AuthFile))
	} else {
		keychains = append(keychains, cfg.Keychain)
	}
	rt := httpsOnly{next: tr, insecure: newHostList(cfg.Insecure)}
	// The lists are copied here, once, so a caller mutating its slices or
	// map later cannot change this Resolver.
	cfg.Insecure, cfg.Allowed, cfg.Auth, cfg.Transport = nil, nil, nil, nil
	return &Resolver{cfg: cfg, insecure: insecure, keychain: authn.NewMultiKeychain(keychains...), transport: rt}
}

// IsPinned reports whether ref is a valid image reference that names its
// manifest by digest (repo@sha256:...), i.e. can never point at other bytes.
// It does not contact the registry, so it says nothing about existence.
func IsPinned(ref string) bool {
	r, err := parse(ref)
	if err != nil {
		return false
	}
	_, ok := r.(name.Digest)
	return ok
}

// Resolve returns the fully qualified, digest-pinned form of ref
// ("registry/repository@sha256:..."), after confirming with the registry that
// the manifest exists. A tag is resolved to the digest it currently points at;
// a digest (with or without a tag, which is then ignored, as Docker does) is
// verified and returned in canonical form. Errors match ErrInvalidReference,
// ErrNotFound, ErrUnauthorized or ErrUnreachable where one applies, and
// wrap ctx's error when ctx ends first.
func (r *Resolver) Resolve(ctx context.Context, ref string) (string, error) {
	parsed, err := parse(ref)
	if err != nil {
		return "", err
	}
	registry := parsed.Context().RegistryStr()
	if r.insecure[strings.ToLower(registry)] {
		// Re-parse rather than rebuild: name.Insecure must reach the Registry
		// value inside the reference, and parse already proved ref valid.
		if parsed, err = name.ParseReference(ref, name.Insecure); err != nil {
			return "", invalid(ref, err.Error(), err)
		}
	}

	tctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()

	opts := []remote.Option{
		remote.WithContext(tctx),
		remote.WithAuthFromKeychain(r.keychain),
		remote.WithUserAgent(r.cfg.UserAgent),
		remote.WithTransport(r.transport),
	}
	// One Puller for both requests so a GET fallback reuses the HEAD's
	// authentication instead of pinging the registry again.
	puller, err := remote.NewPuller(opts...)
	if err != nil {
		return "", fmt.Errorf("resolving image %q: configuring registry client: %w", ref, err)
	}

	digest, err := fetchDigest(tctx, puller, parsed)
	if err != nil {
		return "", r.classify(ctx, tctx, ref, parsed, err)
	}
	return parsed.Context().Digest(digest.String()).String(), nil
}

// fetchDigest asks the registry for the manifest digest of ref: HEAD first because
// it moves no manifest body and, on Docker Hub, is not rate limited; GET when
// HEAD gave no usable digest, or to learn the registry's error code for a 4xx
// (a HEAD response has no body to carry it).
func fetchDigest(ctx context.Context, puller *remote.Puller, ref name.Reference) (v1.Hash, error) {
	desc, headErr := puller.Head(ctx, ref)
	if headErr == nil {
		return desc.Digest, nil
	}
	if !worthGet(headErr) {
		return v1.Hash{}, headErr
	}
	got, err := puller.Get(ctx, ref)
	if err != nil {
		return v1.Hash{}, err
	}
	return got.Digest, nil
}

// worthGet reports whether a failed HEAD may succeed, or fail more
// informatively, as a GET.
func worthGet(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || isNetwork(err) {
		return false
	}
	var te *transport.Error
	if errors.As(err, &te) {
		// 5xx and 429 are retried inside go-containerregistry already; a GET
		// would only double the wait. Other 4xx carry their reason in a body
		// that only GET receives.
		return te.StatusCode >= 400 && te.StatusCode < 500 && te.StatusCode != http.StatusTooManyRequests
	}
	// The registry answered 200 but without a usable Docker-Content-Digest or
	// Content-Length; GET computes the digest from the manifest itself.
	return true
}

// parse validates ref and parses it with go-containerregistry's rules
// (defaulting to Docker Hub and tag "latest"). It never touches the network.
func parse(ref string) (name.Reference, error) {
	switch {
	case ref == "":
		return nil, invalid(ref, "the reference is empty", nil)
	case len(ref) > MaxReferenceLength:
		// Do not echo the whole thing back: it can be arbitrarily large.
		return nil, invalid(ref[:32]+"...", fmt.Sprintf("it is %d bytes long, the limit is %d", len(ref), MaxReferenceLength), nil)
	case strings.IndexFunc(ref, unicode.IsSpace) >= 0:
		// Rejected rather than trimmed: whitespace inside a flag value
		// usually means a shell quoting mistake the user should see.
		return nil, invalid(ref, "it contains whitespace", nil)
	}
	parsed, err := name.ParseReference(ref)
	if err != nil {
		return nil, invalid(ref, err.Error(), err)
	}
	return parsed, nil
}

// resolveError carries a complete user-facing message while still matching
// its sentinels and its cause with errors.Is / errors.As. The message is made
// here from what this process knows (the reference, the registry, the HTTP
// status, the kind of network failure); it never quotes what a remote sent
// (a response body, a header, a redirect target), so image resolution cannot
// be used to read another service's answers.
type resolveError struct {
	kinds []error
	msg   string
	cause error
}

func (e *resolveError) Error() string { return e.msg }

func (e *resolveError) Unwrap() []error {
	if e.cause == nil {
		return e.kinds
	}
	return append(append([]error(nil), e.kinds...), e.cause)
}

func invalid(ref, why string, cause error) error {
	return &resolveError{
		kinds: []error{ErrInvalidReference},
		msg: fmt.Sprintf("image reference %q is invalid: %s; use registry/repository:tag or registry/repository@sha256:<digest>",
			ref, why),
		cause: cause,
	}
}

// failure builds a classified error with a message of this package's own.
func failure(kinds []error, cause error, format string, args ...any) error {
	return &resolveError{kinds: kinds, msg: fmt.Sprintf(format, args...), cause: cause}
}

var (
	notFound     = []error{ErrNotFound}
	unauthorized = []error{ErrUnauthorized}
	unreachable  = []error{ErrUnreachable}
	refused      = []error{ErrAddressRefused, ErrUnreachable}
)

// classify turns an error from go-containerregistry into one that names the
// reference, says what to check, and matches the right sentinel. ctx is the
// caller's context and tctx the one bounded by Config.Timeout.
func (r *Resolver) classify(ctx, tctx context.Context, ref string, parsed name.Reference, err error) error {
	registry := parsed.Context().RegistryStr()
	repo := parsed.Context().Name()

	// The caller gave up (or its own deadline passed): report that, not a
	// registry fault, so errors.Is(err, context.Canceled) holds.
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("resolving image %q: %w", ref, ctxErr)
	}
	var re *refusedError
	if errors.As(err, &re) {
		where := "registry " + registry
		if !isRegistryAddr(parsed.Context().Registry, re.addr) {
			// A redirect or the registry's token service led elsewhere.
			where += " sent the request on to a host that"
		}
		what := "is " + re.reason
		if re.ip.IsValid() {
			what = fmt.Sprintf("resolves to %s (%s)", re.ip, re.reason)
		}
		return failure(refused, err, "image %q: %s %s, which image resolution does not contact; "+
			"an operator can allow a registry there with NEBULACTRL_ALLOWED_REGISTRIES (or NEBULACTRL_INSECURE_REGISTRIES for plain HTTP)",
			ref, where, what)
	}
	if isLibraryRefusal(err) {
		return failure(refused, err, "image %q: registry %s sent the request on to a private, loopback or link-local address, which image resolution does not follow; "+
			"an operator can allow a registry there with NEBULACTRL_ALLOWED_REGISTRIES (or NEBULACTRL_INSECURE_REGISTRIES for plain HTTP)",
			ref, registry)
	}
	var fe *authFileError
	if errors.As(err, &fe) {
		return failure(unauthorized, err, "image %q: the registry credentials file %s could not be read (%s); check NEBULACTRL_REGISTRY_AUTH_FILE",
			ref, fe.path, fe.what)
	}
	// An HTTP answer from the registry says more than anything else.
	var te *transport.Error
	if errors.As(err, &te) {
		return classifyStatus(ref, parsed, te, err)
	}
	if tctx.Err() != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			// Keep errors.Is(err, context.DeadlineExceeded) true even when
			// the library reported the cut-off request some other way.
			err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return failure(unreachable, err, "image %q: registry %s did not answer within %s; check that the registry is up and reachable from here",
			ref, registry, r.cfg.Timeout)
	}
	if why := tlsFailure(err); why != "" {
		return failure(unreachable, err, "image %q: TLS with registry %s failed: %s; check the registry's certificate (a loopback development registry on plain HTTP must be listed as insecure)",
			ref, registry, why)
	}
	var pe *plainHTTPError
	if errors.As(err, &pe) {
		if !isRegistryAddr(parsed.Context().Registry, pe.addr) {
			return failure(unreachable, err, "image %q: registry %s sent the request on to a plain-HTTP address, which image resolution uses only for registries listed in NEBULACTRL_INSECURE_REGISTRIES",
				ref, registry)
		}
		return failure(unreachable, err, "image %q: registry %s could not be reached over HTTPS, and plain HTTP is used only for registries listed in NEBULACTRL_INSECURE_REGISTRIES (loopback development registries)",
			ref, registry)
	}
	if isNetwork(err) {
		return failure(unreachable, err, "image %q: registry %s is unreachable (%s); check the registry host and port, DNS and network access",
			ref, registry, networkFailure(err))
	}
	// A registry that answered but made no sense (digest mismatch, missing
	// headers, a manifest that does not parse): no sentinel fits.
	return failure(nil, err, "image %q: registry %s gave an unusable answer for %s; check the registry's health and that the reference names an image",
		ref, registry, repo)
}

// isRegistryAddr reports whether the dial address addr is the registry's own
// (rather than where a redirect or a token realm led).
func isRegistryAddr(reg name.Registry, addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	rh, rp, err := net.SplitHostPort(reg.RegistryStr())
	if err != nil {
		rh, rp = reg.RegistryStr(), ""
	}
	if !strings.EqualFold(strings.Trim(rh, "[]"), host) {
		return false
	}
	return rp == port || (rp == "" && (port == "443" || port == "80"))
}

// isLibraryRefusal recognises go-containerregistry's own SSRF checks (a
// redirect to, or a token realm on, a private or link-local IP literal):
// the address policy would refuse those connections too, but the library
// stops first, with plain errors.
func isLibraryRefusal(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "SSRF protection: redirect") || strings.Contains(msg, "is a private or link-local address")
}

func classifyStatus(ref string, parsed name.Reference, te *transport.Error, err error) error {
	registry := parsed.Context().RegistryStr()
	repo := parsed.Context().Name()
	codes := make(map[transport.ErrorCode]bool, len(te.Errors))
	for _, d := range te.Errors {
		codes[d.Code] = true
	}
	switch {
	case codes[transport.NameUnknownErrorCode]:
		return failure(notFound, err, "image %q not found: repository %s does not exist on the registry; check the repository name",
			ref, repo)
	case codes[transport.ManifestUnknownErrorCode] || te.StatusCode == http.StatusNotFound:
		return failure(notFound, err, "%s", notFoundMsg(ref, parsed))
	case codes[transport.DeniedErrorCode] || te.StatusCode == http.StatusForbidden:
		return failure(unauthorized, err, "image %q: registry %s denied access to %s (HTTP %d); check that the credentials configured for it may pull this repository",
			ref, registry, repo, te.StatusCode)
	case codes[transport.UnauthorizedErrorCode] || te.StatusCode == http.StatusUnauthorized:
		// Several registries (Docker Hub among them) answer 401 rather than
		// 404 for a private or non-existent repository, so mention both.
		return failure(unauthorized, err, "image %q: registry %s requires authentication for %s (HTTP %d); check the credentials configured for it (NEBULACTRL_REGISTRY_AUTH, NEBULACTRL_REGISTRY_AUTH_FILE or the Docker config) and that the repository name is right",
			ref, registry, repo, te.StatusCode)
	case codes[transport.TooManyRequestsErrorCode] || te.StatusCode == http.StatusTooManyRequests:
		return failure(nil, err, "image %q: registry %s is rate limiting requests (HTTP %d); try again later or configure credentials for a higher limit",
			ref, registry, te.StatusCode)
	default:
		return failure(nil, err, "image %q: registry %s answered HTTP %d %s; check the registry's health and try again",
			ref, registry, te.StatusCode, http.StatusText(te.StatusCode))
	}
}

func notFoundMsg(ref string, parsed name.Reference) string {
	switch p := parsed.(type) {
	case name.Digest:
		return fmt.Sprintf("image %q not found: the registry has no manifest with digest %s in %s; check the digest and that the image was not deleted",
			ref, p.DigestStr(), p.Context().Name())
	case name.Tag:
		return fmt.Sprintf("image %q not found: the registry has no manifest for tag %s in %s; check the tag and that it was pushed",
			ref, p.TagStr(), p.Context().Name())
	default:
		return fmt.Sprintf("image %q not found in %s", ref, parsed.Context().Name())
	}
}

// isNetwork reports failures below HTTP: DNS, refused or reset connections,
// dial and I/O timeouts. net/http wraps them all in *url.Error, a net.Error.
func isNetwork(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// networkFailure names the kind of network failure in words of this
// package (the error's own text carries URLs, which can come from a remote).
func networkFailure(err error) string {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		return "its name does not resolve"
	case errors.As(err, &dnsErr):
		return "DNS lookup failed"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	default:
		return "network error"
	}
}

// tlsFailure names a TLS failure, or "" when err is not one. The
// certificate's own contents (its names) are not repeated.
func tlsFailure(err error) string {
	var (
		verr  *tls.CertificateVerificationError
		rherr tls.RecordHeaderError
		uaerr x509.UnknownAuthorityError
		hnerr x509.HostnameError
		cierr x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &hnerr):
		return "its certificate is not valid for this host name"
	case errors.As(err, &uaerr):
		return "its certificate is not signed by a trusted authority"
	case errors.As(err, &cierr):
		return "its certificate is invalid or expired"
	case errors.As(err, &rherr):
		return "it does not speak TLS"
	case errors.As(err, &verr):
		return "its certificate could not be verified"
	}
	return ""
}
