// Package forge reads push webhooks of Git forges: GitHub, GitLab, Gitea,
// Forgejo and Bitbucket Cloud. It checks a request's signature against the
// project's secrets before it parses the body, then turns a push
// into a Push whose every string is bounded, valid UTF-8 and free of control
// characters, so that callers may store and show it as it is.
//
// What proves a request, by forge:
//
//   - GitHub: X-Hub-Signature-256, "sha256=" and the hex HMAC-SHA256 of the body.
//   - GitLab: X-Gitlab-Token, the secret itself; or, with a signing token,
//     the Standard Webhooks webhook-signature over id, timestamp and body.
//   - Gitea: X-Gitea-Signature; Forgejo: X-Forgejo-Signature; both the bare
//     hex HMAC-SHA256 of the body.
//   - Bitbucket Cloud: X-Hub-Signature, "sha256=" and the hex HMAC-SHA256.
//
// Only GitLab's signed form dates a request, so a captured delivery of the
// others can be replayed: callers should drop a Delivery.ID they have seen.
// GitLab's token signs nothing: its body is as trustworthy as the TLS link.
//
// The body must be the raw bytes the forge sent, and JSON: forges that can
// post form-encoded bodies (GitHub, Gitea) must be set to application/json,
// since Gitea signs the JSON even when it sends a form.
package forge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Provider names the forge a delivery came from.
type Provider string

// The forges whose webhooks Verify reads.
const (
	GitHub    Provider = "github"
	GitLab    Provider = "gitlab"
	Gitea     Provider = "gitea"
	Forgejo   Provider = "forgejo"
	Bitbucket Provider = "bitbucket"
)

// Delivery is what a webhook request says, once verified.
type Delivery struct {
	Provider Provider
	// ID is the forge's delivery id: X-GitHub-Delivery, X-Gitlab-Event-UUID
	// (webhook-id for GitLab's signed form), X-Gitea-Delivery,
	// X-Forgejo-Delivery, X-Request-UUID (Bitbucket). A forge resends a
	// failed delivery with the same id, so it is the key to drop repeats.
	ID string
	// Event is "push", "ping", "tag_push" (GitLab) or the forge's other
	// event name as given.
	Event string
	// Push is set for push events (and GitLab's tag pushes).
	Push *Push
}

// Push is one push to a repository. Its ref fields describe the first ref
// the push changed; Changes lists them all, since a single Bitbucket push
// can move several branches and tags at once (the other forges send one
// delivery per ref, so there Changes has one element).
type Push struct {
	// Repository is the clone URL as the payload gives it, the https one
	// when there is one. It always passes NormalizeURL.
	Repository string
	// Ref is the full ref: "refs/heads/feature/x", "refs/tags/v1".
	Ref string
	// Branch is what follows refs/heads/ when Ref is a branch, else "".
	Branch string
	// Tag is what follows refs/tags/ when Ref is a tag, else "".
	Tag string
	// After is the new commit (40 or 64 lower-case hex), all zeros when
	// the ref was deleted.
	After string
	// Before is the commit the ref pointed at, all zeros when it was created.
	Before string
	// Deleted says the push deleted the ref.
	Deleted bool
	// Pusher is the pusher's user name, when the payload gives one.
	Pusher string
	// HeadMessage is the first line of the new head commit's message,
	// when the payload gives it, at most 200 bytes.
	HeadMessage string
	// Changes lists every ref the push changed, in the payload's order;
	// the fields above repeat Changes[0].
	Changes []Change
}

// Change is one ref moved by a push; its fields mean what Push's do.
type Change struct {
	Ref         string
	Branch      string
	Tag         string
	After       string
	Before      string
	Deleted     bool
	HeadMessage string
}

// Secrets are the project's current secret and, during a rotation's grace
// period, the previous one. A request signed with any of them is accepted.
// Zero-length secrets are ignored, never matched.
type Secrets [][]byte

// The errors Verify returns, to be tested with errors.Is; the returned
// error wraps one of them with the reason.
var (
	// ErrUnsigned: the request carries no signature header of any
	// supported forge. Answer 401.
	ErrUnsigned = errors.New("forge: request is not signed")
	// ErrBadSignature: the signature matches no secret, is malformed or
	// (GitLab's signed form) too old. Answer 401.
	ErrBadSignature = errors.New("forge: bad signature")
	// ErrPayload: the signature is good but the body or event header is
	// not what the event should carry. Answer 400.
	ErrPayload = errors.New("forge: bad payload")
	// ErrNoDeliveryID: the signature is good but the request has no usable
	// delivery id. Answer 400.
	ErrNoDeliveryID = errors.New("forge: no delivery id")
)

// MaxSkew is how far a signed timestamp (GitLab's signed form) may be from
// now, either way: the Standard Webhooks specification's tolerance.
const MaxSkew = 5 * time.Minute

// Verifier verifies webhook requests against a project's secrets.
type Verifier struct {
	Secrets Secrets
	// Now is the clock for signed timestamps; nil means time.Now.
	Now func() time.Time
}

// Verify checks the request's signature against the raw body with every
// secret, in constant time, then parses the delivery. It is
// Verifier{Secrets: secrets}.Verify.
func Verify(h http.Header, body []byte, secrets Secrets) (Delivery, error) {
	return Verifier{Secrets: secrets}.Verify(h, body)
}

// Verify detects the forge from the headers, checks the signature and only
// then reads the body: an unverified body is never parsed, so a forged
// request costs at most an HMAC per secret. Every failure wraps one of
// ErrUnsigned, ErrBadSignature, ErrPayload or ErrNoDeliveryID, and comes
// with a zero Delivery.
func (v Verifier) Verify(h http.Header, body []byte) (Delivery, error) {
	s, err := detect(h)
	if err != nil {
		return Delivery{}, err
	}
	if err := s.check(v, h, body); err != nil {
		return Delivery{}, err
	}
	id, err := deliveryID(h, s.delivery)
	if err != nil {
		return Delivery{}, err
	}
	event, err := single(h, s.event)
	if err != nil {
		return Delivery{}, fail(ErrPayload, "%s: %v", s.event, err)
	}
	if event = cleanText(event, maxEvent); event == "" {
		return Delivery{}, fail(ErrPayload, "no %s header", s.event)
	}
	if !startsObject(body) {
		return Delivery{}, fail(ErrPayload, "body is not a JSON object")
	}
	event, push, err := s.parse(event, body)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{Provider: s.provider, ID: id, Event: event, Push: push}, nil
}

// source is what a forge's requests look like: which headers carry what,
// how the signature is checked and how the body is read.
type source struct {
	provider  Provider
	signature string // header with the signature or token
	delivery  string // header with the delivery id
	event     string // header with the event name
	check     func(v Verifier, h http.Header, body []byte) error
	// parse maps the event header's value to Delivery.Event and reads the
	// push, if the event is one; other events go through otherEvent.
	parse func(event string, body []byte) (string, *Push, error)
}

// otherEvent is the parse of an event that is not a push: its body need
// only be JSON.
func otherEvent(event string, body []byte) (string, *Push, error) {
	if !json.Valid(body) {
		return "", nil, fail(ErrPayload, "body is not valid JSON")
	}
	return event, nil, nil
}

func fail(kind error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", kind, fmt.Sprintf(format, args...))
}
