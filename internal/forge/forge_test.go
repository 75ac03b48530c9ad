package forge_test

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

var (
	secret    = []byte("current-secret-0f3a")
	previous  = []byte("previous-secret-77c1")
	stranger  = []byte("someone-elses-secret")
	both      = forge.Secrets{secret, previous}
	fixedNow  = time.Date(2024, 6, 2, 9, 10, 11, 0, time.UTC)
	deliveryA = "72d3162e-cc78-11e3-81ab-4c9367dc0958"
)

// All the headers a forge sets, whatever this package reads: the tests
// send what the forge sends, so that the detection order is tested too.
var signatureHeaders = []string{
	"X-Hub-Signature-256", "X-Hub-Signature", "X-Gitea-Signature", "X-Gogs-Signature",
	"X-Forgejo-Signature", "X-Gitlab-Token", "Webhook-Signature",
}

func load(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// edit changes a JSON payload; the bytes it returns are what gets signed.
func edit(t testing.TB, body []byte, change func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m))
	change(m)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func hexMAC(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func sha1MAC(key, body []byte) string {
	m := hmac.New(sha1.New, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// standardSignature is one Standard Webhooks "v1," entry, computed here
// independently of the package: whsec_ secrets are base64 keys.
func standardSignature(t testing.TB, key []byte, id string, ts time.Time, body []byte) string {
	if s := string(key); len(s) > 6 && s[:6] == "whsec_" {
		k, err := base64.StdEncoding.DecodeString(s[6:])
		require.NoError(t, err)
		key = k
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// A kit signs requests the way one forge does.
type kit struct {
	name     string
	provider forge.Provider
	push     string // testdata file of a branch push
	event    string // the push event header's value
	headers  func(t testing.TB, key, body []byte, event string) http.Header
	// signsBody is false for GitLab's token, which covers no byte of the body.
	signsBody bool
}

func githubHeaders(_ testing.TB, key, body []byte, event string) http.Header {
	h := http.Header{}
	h.Set("User-Agent", "GitHub-Hookshot/044aadd")
	h.Set("Content-Type", "application/json")
	h.Set("X-GitHub-Event", event)
	h.Set("X-GitHub-Delivery", deliveryA)
	h.Set("X-GitHub-Hook-ID", "292430182")
	h.Set("X-Hub-Signature", "sha1="+sha1MAC(key, body))
	h.Set("X-Hub-Signature-256", "sha256="+hexMAC(key, body))
	return h
}

// giteaHeaders are those of Gitea's services/webhook/deliver.go.
func giteaHeaders(_ testing.TB, key, body []byte, event string) http.Header {
	sig := hexMAC(key, body)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	for _, p := range []string{"X-Gitea-", "X-Gogs-", "X-GitHub-"} {
		h.Set(p+"Delivery", deliveryA)
		h.Set(p+"Event", event)
		h.Set(p+"Event-Type", event)
	}
	h.Set("X-Gitea-Signature", sig)
	h.Set("X-Gogs-Signature", sig)
	h.Set("X-Hub-Signature", "sha1="+sha1MAC(key, body))
	h.Set("X-Hub-Signature-256", "sha256="+sig)
	return h
}

func forgejoHeaders(t testing.TB, key, body []byte, event string) http.Header {
	h := giteaHeaders(t, key, body, event)
	h.Set("X-Forgejo-Delivery", deliveryA)
	h.Set("X-Forgejo-Event", event)
	h.Set("X-Forgejo-Event-Type", event)
	h.Set("X-Forgejo-Signature", hexMAC(key, body))
	return h
}

func gitlabTokenHeaders(_ testing.TB, key, _ []byte, event string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "GitLab/17.0.0")
	h.Set("X-Gitlab-Event", event)
	h.Set("X-Gitlab-Event-UUID", deliveryA)
	h.Set("X-Gitlab-Webhook-UUID", "1b3a6c1e-5d8f-4a2b-9c7d-0e1f2a3b4c5d")
	h.Set("X-Gitlab-Instance", "https://gitlab.example.com")
	h.Set("Idempotency-Key", deliveryA)
	h.Set("X-Gitlab-Token", string(key))
	return h
}

func gitlabSignedHeaders(t testing.TB, key, body []byte, event string) http.Header {
	h := gitlabTokenHeaders(t, key, body, event)
	h.Del("X-Gitlab-Token")
	h.Set("webhook-id", "msg_"+deliveryA)
	h.Set("webhook-timestamp", strconv.FormatInt(fixedNow.Unix(), 10))
	h.Set("webhook-signature", standardSignature(t, key, "msg_"+deliveryA, fixedNow, body))
	return h
}

func bitbucketHeaders(_ testing.TB, key, body []byte, event string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Bitbucket-Webhooks/2.0")
	h.Set("X-Event-Key", event)
	h.Set("X-Hook-UUID", "{5f1ed0a1-4a8c-4d55-9a1e-0c6c4e5d9f10}")
	h.Set("X-Request-UUID", deliveryA)
	h.Set("X-Attempt-Number", "1")
	h.Set("X-Hub-Signature", "sha256="+hexMAC(key, body))
	return h
}

var kits = []kit{
	{"github", forge.GitHub, "github/push-branch-created.json", "push", githubHeaders, true},
	{"gitlab token", forge.GitLab, "gitlab/push.json", "Push Hook", gitlabTokenHeaders, false},
	{"gitlab signed", forge.GitLab, "gitlab/push.json", "Push Hook", gitlabSignedHeaders, true},
	{"gitea", forge.Gitea, "gitea/push.json", "push", giteaHeaders, true},
	{"forgejo", forge.Forgejo, "forgejo/push.json", "push", forgejoHeaders, true},
	{"bitbucket", forge.Bitbucket, "bitbucket/repo-push.json", "repo:push", bitbucketHeaders, true},
}

func verify(h http.Header, body []byte, secrets forge.Secrets) (forge.Delivery, error) {
	return forge.Verifier{Secrets: secrets, Now: func() time.Time { return fixedNow }}.Verify(h, body)
}

// TestSignatures runs what every forge must get right on each of them.
func TestSignatures(t *testing.T) {
	for _, k := range kits {
		t.Run(k.name, func(t *testing.T) {
			body := load(t, k.push)
			type testCase struct {
				name    string
				key     []byte
				secrets forge.Secrets
				body    []byte // what arrives, when not what was signed
				change  func(h http.Header)
				want    error
				// inID: the case is about the delivery id header, which the
				// Standard Webhooks signature covers (tested in gitlab_test.go).
				inID bool
			}
			cases := []testCase{
				{name: "good signature", key: secret, secrets: both},
				{name: "only the current secret", key: secret, secrets: forge.Secrets{secret}},
				{name: "previous secret during rotation", key: previous, secrets: both},
				{name: "bad signature", key: stranger, secrets: both, want: forge.ErrBadSignature},
				{name: "previous secret after rotation", key: previous, secrets: forge.Secrets{secret}, want: forge.ErrBadSignature},
				{name: "no secrets", key: secret, secrets: nil, want: forge.ErrBadSignature},
				{name: "empty secret list", key: secret, secrets: forge.Secrets{}, want: forge.ErrBadSignature},
				{name: "zero-length secret", key: []byte{}, secrets: forge.Secrets{{}}, want: forge.ErrBadSignature},
				{name: "missing signature", key: secret, secrets: both, want: forge.ErrUnsigned, change: func(h http.Header) {
					for _, n := range signatureHeaders {
						h.Del(n)
					}
				}},
				{name: "no delivery id", key: secret, secrets: both, want: forge.ErrNoDeliveryID, inID: true, change: func(h http.Header) {
					for _, n := range []string{"X-GitHub-Delivery", "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gogs-Delivery", "X-Gitlab-Event-UUID", "Webhook-Id", "X-Request-UUID"} {
						h.Del(n)
					}
				}},
				{name: "delivery id twice", key: secret, secrets: both, want: forge.ErrNoDeliveryID, inID: true, change: func(h http.Header) {
					for _, n := range []string{"X-GitHub-Delivery", "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gitlab-Event-UUID", "X-Request-UUID"} {
						h.Add(n, "a-second-id")
					}
				}},
				{name: "signature header twice", key: secret, secrets: both, want: forge.ErrBadSignature, change: func(h http.Header) {
					for _, n := range signatureHeaders {
						if h.Get(n) != "" {
							h.Add(n, h.Get(n))
						}
					}
				}},
			}
			if k.signsBody {
				modified := append([]byte(nil), body...)
				modified[len(modified)/2] ^= 0x01
				cases = append(cases, testCase{name: "body modified by one byte", key: secret, secrets: both, body: modified, want: forge.ErrBadSignature})
			}
			for _, c := range cases {
				if c.inID && k.name == "gitlab signed" {
					continue // webhook-id is signed: see TestGitLabSigned
				}
				t.Run(c.name, func(t *testing.T) {
					h := k.headers(t, c.key, body, k.event)
					if c.change != nil {
						c.change(h)
					}
					got := body
					if c.body != nil {
						got = c.body
					}
					d, err := verify(h, got, c.secrets)
					want := c.want
					if c.name == "zero-length secret" && k.name == "gitlab token" {
						want = forge.ErrUnsigned // an empty token is no token
					}
					if want != nil {
						require.ErrorIs(t, err, want)
						require.Equal(t, forge.Delivery{}, d, "nothing is returned on failure")
						return
					}
					require.NoError(t, err)
					require.Equal(t, k.provider, d.Provider)
					require.Equal(t, "push", d.Event)
					require.NotNil(t, d.Push)
					require.Len(t, d.Push.Changes, 1)
				})
			}
		})
	}
}

// TestPayloadAfterGoodSignature: a well signed body that is not a JSON
// object, or not a push, is ErrPayload, never a panic or a half-read push.
func TestPayloadAfterGoodSignature(t *testing.T) {
	bodies := map[string][]byte{
		"not JSON":          []byte("payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D"),
		"empty":             {},
		"null":              []byte("null"),
		"array":             []byte(`[{"ref":"refs/heads/main"}]`),
		"truncated":         []byte(`{"ref":"refs/heads/main",`),
		"trailing garbage":  []byte(`{"ref":"refs/heads/main"} {}`),
		"empty object":      []byte(`{}`),
		"ref of wrong type": []byte(`{"ref":7}`),
	}
	for _, k := range kits {
		for name, body := range bodies {
			t.Run(k.name+"/"+name, func(t *testing.T) {
				_, err := verify(k.headers(t, secret, body, k.event), body, both)
				require.ErrorIs(t, err, forge.ErrPayload)
			})
		}
	}
}

func TestNoEventHeader(t *testing.T) {
	for _, k := range kits {
		t.Run(k.name, func(t *testing.T) {
			body := load(t, k.push)
			h := k.headers(t, secret, body, k.event)
			for _, n := range []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gitlab-Event", "X-Event-Key"} {
				h.Del(n)
			}
			_, err := verify(h, body, both)
			require.ErrorIs(t, err, forge.ErrPayload)
		})
	}
}

func TestHeaderKeysInAnyCase(t *testing.T) {
	body := load(t, "github/push-branch-created.json")
	h := http.Header{
		"x-github-event":      {"push"},
		"x-github-delivery":   {deliveryA},
		"x-hub-signature-256": {"sha256=" + hexMAC(secret, body)},
	}
	d, err := forge.Verify(h, body, both)
	require.NoError(t, err)
	require.Equal(t, deliveryA, d.ID)
}

func TestUnsignedRequest(t *testing.T) {
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	h.Set("X-GitHub-Delivery", deliveryA)
	_, err := forge.Verify(h, []byte(`{}`), both)
	require.ErrorIs(t, err, forge.ErrUnsigned)
	_, err = forge.Verify(http.Header{}, nil, nil)
	require.ErrorIs(t, err, forge.ErrUnsigned)
}
