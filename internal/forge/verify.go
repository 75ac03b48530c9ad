package forge

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers detect looks at.
const (
	hdrForgejoSignature  = "X-Forgejo-Signature"
	hdrGiteaSignature    = "X-Gitea-Signature"
	hdrStandardSignature = "Webhook-Signature"
	hdrGitLabToken       = "X-Gitlab-Token"
	hdrHubSignature256   = "X-Hub-Signature-256"
	hdrHubSignature      = "X-Hub-Signature"
	hdrGitHubEvent       = "X-GitHub-Event"
)

// detect picks the forge by the headers the request carries. Gitea and
// Forgejo also send GitHub's headers (X-GitHub-Event, X-Hub-Signature-256)
// and Forgejo also sends Gitea's, so the most specific headers are looked
// for first; Gitea's and Forgejo's event headers name them even when the
// hook has no secret, which is then reported as unsigned. Every path ends
// in an HMAC or a comparison with a secret, so a sender that picks its
// path gains nothing.
func detect(h http.Header) (source, error) {
	var s source
	switch {
	case present(h, hdrForgejoSignature) || present(h, forgejoSource.event):
		s = forgejoSource
	case present(h, hdrGiteaSignature) || present(h, giteaSource.event):
		s = giteaSource
	case present(h, hdrStandardSignature):
		// GitLab sends both headers when a hook has both a signing token
		// and a secret token; the signature covers the body, so it wins.
		s = gitlabSignedSource
	case present(h, hdrGitLabToken):
		s = gitlabTokenSource
	case present(h, hdrHubSignature256):
		s = githubSource
	case present(h, hdrHubSignature) && present(h, hdrGitHubEvent):
		// GitHub's X-Hub-Signature is HMAC-SHA1, which is not accepted.
		return source{}, fail(ErrUnsigned, "GitHub request without %s", hdrHubSignature256)
	case present(h, hdrHubSignature):
		s = bitbucketSource
	default:
		return source{}, ErrUnsigned
	}
	if !present(h, s.signature) {
		return source{}, fail(ErrUnsigned, "%s request without %s", s.provider, s.signature)
	}
	return s, nil
}

// values gathers a header's values whatever the case of its key: callers
// that build an http.Header by hand may not canonicalise the keys.
func values(h http.Header, name string) []string {
	var vs []string
	for k, v := range h {
		if strings.EqualFold(k, name) {
			for _, s := range v {
				if s = strings.TrimSpace(s); s != "" {
					vs = append(vs, s)
				}
			}
		}
	}
	return vs
}

// present says the header has a non-empty value: Gitea sends an empty
// X-Gitea-Signature when the hook has no secret, which is no signature.
func present(h http.Header, name string) bool {
	return len(values(h, name)) > 0
}

var errRepeated = errors.New("header given more than once")

// single is the header's one value, "" when absent. Two values are refused
// rather than one picked, since the two could be read differently by a
// proxy in front.
func single(h http.Header, name string) (string, error) {
	vs := values(h, name)
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return vs[0], nil
	}
	return "", errRepeated
}

// keys are the secrets that can be matched: a zero-length key would let
// anyone sign.
func keys(secrets Secrets) [][]byte {
	var ks [][]byte
	for _, s := range secrets {
		if len(s) > 0 {
			ks = append(ks, s)
		}
	}
	return ks
}

func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// checkHex verifies a hex HMAC-SHA256 of the body, after the prefix
// (GitHub and Bitbucket write "sha256=", Gitea and Forgejo nothing).
func checkHex(name, prefix string) func(Verifier, http.Header, []byte) error {
	return func(v Verifier, h http.Header, body []byte) error {
		sig, err := single(h, name)
		if err != nil {
			return fail(ErrBadSignature, "%s: %v", name, err)
		}
		rest, ok := strings.CutPrefix(sig, prefix)
		want, err := hex.DecodeString(rest)
		if !ok || err != nil || len(want) != sha256.Size {
			return fail(ErrBadSignature, "malformed %s", name)
		}
		ks := keys(v.Secrets)
		if len(ks) == 0 {
			return fail(ErrBadSignature, "no secret to check against")
		}
		// Every secret is tried, even after a match, so the time taken
		// does not tell which one matched.
		match := false
		for _, k := range ks {
			match = hmac.Equal(mac(k, body), want) || match
		}
		if !match {
			return fail(ErrBadSignature, "%s matches no secret", name)
		}
		return nil
	}
}

// checkGitLabToken compares X-Gitlab-Token, which is the secret itself.
// Hashing both sides first makes the comparison constant-time in the
// length too, so a wrong guess does not reveal the secret's length.
func checkGitLabToken(v Verifier, h http.Header, _ []byte) error {
	token, err := single(h, hdrGitLabToken)
	if err != nil {
		return fail(ErrBadSignature, "%s: %v", hdrGitLabToken, err)
	}
	ks := keys(v.Secrets)
	if len(ks) == 0 {
		return fail(ErrBadSignature, "no secret to check against")
	}
	got := sha256.Sum256([]byte(token))
	match := 0
	for _, k := range ks {
		want := sha256.Sum256(k)
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	if match != 1 {
		return fail(ErrBadSignature, "%s matches no secret", hdrGitLabToken)
	}
	return nil
}

// checkStandard verifies GitLab's signed form, which follows the Standard
// Webhooks specification (standardwebhooks.com): webhook-signature holds
// space-separated "v1,<base64 HMAC-SHA256>" entries over
// id + "." + timestamp + "." + body, keyed by the signing token. GitLab's
// tokens are "whsec_" and the base64 of 32 bytes; a secret without that
// prefix is used as raw bytes.
func checkStandard(v Verifier, h http.Header, body []byte) error {
	id, err1 := single(h, "Webhook-Id")
	ts, err2 := single(h, "Webhook-Timestamp")
	sigs, err3 := single(h, hdrStandardSignature)
	if err := errors.Join(err1, err2, err3); err != nil {
		return fail(ErrBadSignature, "webhook headers: %v", err)
	}
	if id == "" || ts == "" {
		return fail(ErrBadSignature, "webhook-id and webhook-timestamp are required")
	}
	sent, err := unixSeconds(ts)
	if err != nil {
		return fail(ErrBadSignature, "malformed webhook-timestamp")
	}
	// The timestamp is checked before any HMAC, which makes a replayed old
	// delivery cheap to refuse; it is signed, so it cannot be moved.
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	if skew := now().Sub(sent); skew > MaxSkew || skew < -MaxSkew {
		return fail(ErrBadSignature, "webhook-timestamp is %s away from now", skew.Round(time.Second))
	}
	var want [][]byte
	for _, f := range strings.Fields(sigs) {
		b64, ok := strings.CutPrefix(f, "v1,")
		if !ok {
			continue // another scheme (v1a is ed25519): not ours
		}
		if sig, err := base64.StdEncoding.DecodeString(b64); err == nil && len(sig) == sha256.Size {
			want = append(want, sig)
		}
	}
	if len(want) == 0 {
		return fail(ErrBadSignature, "malformed webhook-signature")
	}
	var ks [][]byte
	for _, k := range keys(v.Secrets) {
		if k := standardKey(k); len(k) > 0 {
			ks = append(ks, k)
		}
	}
	if len(ks) == 0 {
		return fail(ErrBadSignature, "no secret to check against")
	}
	match := false
	for _, k := range ks {
		got := mac(k, []byte(id), []byte("."), []byte(ts), []byte("."), body)
		for _, w := range want {
			match = hmac.Equal(got, w) || match
		}
	}
	if !match {
		return fail(ErrBadSignature, "webhook-signature matches no secret")
	}
	return nil
}

// standardKey is the HMAC key of a Standard Webhooks secret: nil for a
// whsec_ secret that is not base64, which then matches nothing.
func standardKey(secret []byte) []byte {
	rest, ok := strings.CutPrefix(string(secret), "whsec_")
	if !ok {
		return secret
	}
	k, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil
	}
	return k
}

// unixSeconds reads a decimal count of seconds; strconv alone would also
// take a sign.
func unixSeconds(s string) (time.Time, error) {
	if len(s) > 18 || strings.TrimLeft(s, "0123456789") != "" {
		return time.Time{}, strconv.ErrSyntax
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, 0), nil
}

// deliveryID reads the delivery id header. Ids are UUIDs or GUIDs; one
// that is too long or carries control characters is refused rather than
// cleaned, since a cleaned id could collide with another delivery's.
func deliveryID(h http.Header, name string) (string, error) {
	id, err := single(h, name)
	if err != nil {
		return "", fail(ErrNoDeliveryID, "%s: %v", name, err)
	}
	if id == "" {
		return "", fail(ErrNoDeliveryID, "no %s header", name)
	}
	if len(id) > maxDeliveryID || cleanText(id, maxDeliveryID) != id {
		return "", fail(ErrNoDeliveryID, "unusable %s header", name)
	}
	return id, nil
}
