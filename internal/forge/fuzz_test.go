package forge_test

import (
	"crypto/rand"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

// fuzzHeaders are every header Verify may read: the input sets them all,
// so the fuzzer can walk every provider's path.
var fuzzHeaders = struct{ event, delivery []string }{
	event:    []string{"X-GitHub-Event", "X-Gitea-Event", "X-Forgejo-Event", "X-Gitlab-Event", "X-Event-Key"},
	delivery: []string{"X-GitHub-Delivery", "X-Gitea-Delivery", "X-Forgejo-Delivery", "X-Gitlab-Event-UUID", "Webhook-Id", "X-Request-UUID"},
}

func FuzzVerify(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "*.json"))
	require.NoError(f, err)
	for i, name := range files {
		body, err := os.ReadFile(name)
		require.NoError(f, err)
		f.Add(body, uint8(i), "sha256="+hexMAC(stranger, body), "push", deliveryA, "1717319411")
	}
	for i, k := range kits {
		body := load(f, k.push)
		f.Add(body, uint8(i), "sha256="+hexMAC(stranger, body), k.event, deliveryA, "1717319411")
	}
	f.Add([]byte(`{}`), uint8(2), "v1,"+strings.Repeat("A", 43)+"=", "Push Hook", "msg_1", "1717319411")
	f.Add([]byte(`{"ref":"refs/heads/main"}`), uint8(5), string(secret), "Tag Push Hook", "", "")

	// A secret the input cannot know: nothing the fuzzer makes may verify.
	hidden := make([]byte, 32)
	_, err = rand.Read(hidden)
	require.NoError(f, err)
	unknown := forge.Verifier{Secrets: forge.Secrets{hidden}, Now: func() time.Time { return fixedNow }}

	f.Fuzz(func(t *testing.T, body []byte, kind uint8, sig, event, id, ts string) {
		h := http.Header{}
		h.Set(signatureHeaders[int(kind)%len(signatureHeaders)], sig)
		for _, n := range fuzzHeaders.event {
			h.Set(n, event)
		}
		for _, n := range fuzzHeaders.delivery {
			h.Set(n, id)
		}
		h.Set("Webhook-Timestamp", ts)
		d, err := unknown.Verify(h, body)
		require.Error(t, err, "verified without the secret")
		require.Equal(t, forge.Delivery{}, d)
		requireKnown(t, err)

		// The same body well signed for a forge reaches the parsers, which
		// must refuse it or return only clean strings.
		k := kits[int(kind)%len(kits)]
		d, err = verify(k.headers(t, secret, body, event), body, forge.Secrets{secret})
		if err != nil {
			requireKnown(t, err)
			require.Equal(t, forge.Delivery{}, d)
			return
		}
		requireClean(t, d)
	})
}

func requireKnown(t *testing.T, err error) {
	for _, e := range []error{forge.ErrUnsigned, forge.ErrBadSignature, forge.ErrPayload, forge.ErrNoDeliveryID} {
		if errors.Is(err, e) {
			return
		}
	}
	t.Fatalf("error outside the four kinds: %v", err)
}

func requireClean(t *testing.T, d forge.Delivery) {
	text := func(s string, max int) {
		require.True(t, utf8.ValidString(s), "%q", s)
		require.LessOrEqual(t, len(s), max, "%q", s)
		for _, r := range s {
			require.False(t, unicode.IsControl(r), "%q", s)
		}
	}
	text(d.ID, 256)
	text(d.Event, 128)
	p := d.Push
	if p == nil {
		return
	}
	text(p.Repository, 2048)
	_, err := forge.NormalizeURL(p.Repository)
	require.NoError(t, err)
	text(p.Pusher, 256)
	require.NotEmpty(t, p.Changes)
	c := p.Changes[0]
	require.Equal(t, forge.Change{Ref: p.Ref, Branch: p.Branch, Tag: p.Tag, After: p.After,
		Before: p.Before, Deleted: p.Deleted, HeadMessage: p.HeadMessage}, c)
	for _, c := range p.Changes {
		text(c.Ref, 1024)
		text(c.HeadMessage, 200)
		require.True(t, strings.HasPrefix(c.Ref, "refs/"))
		if c.Branch != "" {
			require.Equal(t, "refs/heads/"+c.Branch, c.Ref)
		}
		if c.Tag != "" {
			require.Equal(t, "refs/tags/"+c.Tag, c.Ref)
		}
		for _, id := range []string{c.After, c.Before} {
			require.Contains(t, []int{40, 64}, len(id))
			require.Equal(t, "", strings.Trim(id, "0123456789abcdef"))
		}
	}
}

func FuzzNormalizeURL(f *testing.F) {
	for _, s := range []string{
		"https://github.com/Codertocat/Hello-World.git",
		"git@github.com:Codertocat/Hello-World.git",
		"ssh://git@github.com:22/Codertocat/Hello-World.git",
		"git://github.com/Codertocat/Hello-World",
		"HTTPS://user:pw@GitHub.com:443/a/b.git/",
		"ssh://git@[::1]:2222/a/b.git",
		"git@[::1]:a/b",
		"host:2222/a/b",
		"github.com/a/b.git.git/",
		"a/b/.git",
		"ext::sh",
		"C:/x",
		"https://h/%2e%2e/x",
		"@h:p",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := forge.NormalizeURL(raw)
		if err != nil {
			return
		}
		require.True(t, utf8.ValidString(got))
		for _, r := range got {
			require.False(t, unicode.IsControl(r), "%q", got)
		}
		require.NotContains(t, got, "://")
		again, err := forge.NormalizeURL(got)
		require.NoError(t, err, "%q normalised to %q, which is refused", raw, got)
		require.Equal(t, got, again, "not idempotent for %q", raw)
		require.True(t, forge.SameRepository(raw, got))
	})
}
