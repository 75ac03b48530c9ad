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
	"net"
	"net/http"
	"strings"
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
	// unprotected.
	Insecure []string
	// Timeout bounds one Resolve call, all round trips included.
	// Default DefaultTimeout.
	Timeout time.Duration
	// Keychain supplies registry credentials. Default authn.DefaultKeychain
	// (the Docker config and credential helpers of the current user).
	Keychain authn.Keychain
	// Transport carries the HTTP requests (tests, proxies). Default
	// remote.DefaultTransport.
	Transport http.RoundTripper
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

// Resolver pins image references to digests. It holds no mutable state and is
// safe for concurrent use.
type Resolver struct {
	cfg      Config
	insecure map[string]bool
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
	// The map is built here, once, so a caller mutating its slice later
	// cannot change this Resolver.
	cfg.Insecure = nil
	return &Resolver{cfg: cfg, insecure: insecure}
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
		remote.WithAuthFromKeychain(r.cfg.Keychain),
		remote.WithUserAgent(r.cfg.UserAgent),
	}
	if r.cfg.Transport != nil {
		opts = append(opts, remote.WithTransport(r.cfg.Transport))
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

func invalid(ref, why string, cause error) error {
	return &resolveError{
		kind: ErrInvalidReference,
		msg: fmt.Sprintf("image reference %q is invalid: %s; use registry/repository:tag or registry/repository@sha256:<digest>",
			ref, why),
		cause: cause,
	}
}

// resolveError carries a complete user-facing message, which already
// includes what its cause says, while still matching its sentinel and its
// cause with errors.Is / errors.As.
type resolveError struct {
	kind  error
	msg   string
	cause error
}

func (e *resolveError) Error() string { return e.msg }

func (e *resolveError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

// failure builds a classified error whose message ends with the cause, in the
// usual "context: cause" shape.
func failure(kind error, cause error, format string, args ...any) error {
	return &resolveError{kind: kind, msg: fmt.Sprintf(format, args...) + ": " + cause.Error(), cause: cause}
}

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
		return failure(ErrUnreachable, err, "image %q: registry %s did not answer within %s; check that the registry is up and reachable from here",
			ref, registry, r.cfg.Timeout)
	}

	if isTLS(err) {
		return failure(ErrUnreachable, err, "image %q: TLS with registry %s failed; check the registry's certificate (a loopback development registry on plain HTTP must be listed as insecure)",
			ref, registry)
	}
	if isNetwork(err) {
		return failure(ErrUnreachable, err, "image %q: registry %s is unreachable; check the registry host and port, DNS and network access",
			ref, registry)
	}
	// A registry that answered but made no sense (digest mismatch, missing
	// headers): no sentinel fits, the cause says what went wrong.
	return fmt.Errorf("image %q: registry %s gave an unusable answer for %s: %w", ref, registry, repo, err)
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
		return failure(ErrNotFound, err, "image %q not found: repository %s does not exist on the registry; check the repository name",
			ref, repo)
	case codes[transport.ManifestUnknownErrorCode] || te.StatusCode == http.StatusNotFound:
		return failure(ErrNotFound, err, "%s", notFoundMsg(ref, parsed))
	case codes[transport.DeniedErrorCode] || te.StatusCode == http.StatusForbidden:
		return failure(ErrUnauthorized, err, "image %q: registry %s denied access to %s; check that your credentials may pull this repository",
			ref, registry, repo)
	case codes[transport.UnauthorizedErrorCode] || te.StatusCode == http.StatusUnauthorized:
		// Several registries (Docker Hub among them) answer 401 rather than
		// 404 for a private or non-existent repository, so mention both.
		return failure(ErrUnauthorized, err, "image %q: registry %s requires authentication for %s; check your credentials (docker login %s) and that the repository name is right",
			ref, registry, repo, registry)
	case codes[transport.TooManyRequestsErrorCode] || te.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("image %q: registry %s is rate limiting requests; try again later or authenticate for a higher limit: %w",
			ref, registry, err)
	default:
		return fmt.Errorf("image %q: registry %s answered HTTP %d %s; check the registry's health and try again: %w",
			ref, registry, te.StatusCode, http.StatusText(te.StatusCode), err)
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

func isTLS(err error) bool {
	var (
		verr  *tls.CertificateVerificationError
		rherr tls.RecordHeaderError
		uaerr x509.UnknownAuthorityError
		hnerr x509.HostnameError
		cierr x509.CertificateInvalidError
	)
	return errors.As(err, &verr) || errors.As(err, &rherr) || errors.As(err, &uaerr) ||
		errors.As(err, &hnerr) || errors.As(err, &cierr)
}
