package forge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

func TestGiteaPush(t *testing.T) {
	zero := strings.Repeat("0", 40)
	const (
		before = "28e1879d029cb852e4844d9c718537df08844e03"
		after  = "bffeb74224043ba2feb48d137756c8a9331c449a"
		repo   = "http://localhost:3000/gitea/webhooks.git"
	)
	cases := []struct {
		name   string
		change func(m map[string]any)
		want   forge.Push
	}{{
		name: "branch push, message from the commit with the new id",
		want: forge.Push{Repository: repo, Ref: "refs/heads/develop", Branch: "develop",
			Before: before, After: after, Pusher: "gitea", HeadMessage: "Webhooks everywhere"},
	}, {
		name:   "tag push",
		change: func(m map[string]any) { m["ref"], m["before"] = "refs/tags/v1.2.3", zero },
		want: forge.Push{Repository: repo, Ref: "refs/tags/v1.2.3", Tag: "v1.2.3",
			Before: zero, After: after, Pusher: "gitea", HeadMessage: "Webhooks everywhere"},
	}, {
		name: "branch deletion, which Gitea marks by the zero id alone",
		change: func(m map[string]any) {
			m["before"], m["after"], m["commits"] = after, zero, []any{}
		},
		want: forge.Push{Repository: repo, Ref: "refs/heads/develop", Branch: "develop",
			Before: after, After: zero, Deleted: true, Pusher: "gitea"},
	}, {
		name: "SHA-256 repository",
		change: func(m map[string]any) {
			m["before"], m["after"], m["commits"] = strings.Repeat("ab", 32), strings.Repeat("cd", 32), []any{}
		},
		want: forge.Push{Repository: repo, Ref: "refs/heads/develop", Branch: "develop",
			Before: strings.Repeat("ab", 32), After: strings.Repeat("cd", 32), Pusher: "gitea"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := load(t, "gitea/push.json")
			if c.change != nil {
				body = edit(t, body, c.change)
			}
			d, err := forge.Verify(giteaHeaders(t, secret, body, "push"), body, both)
			require.NoError(t, err)
			require.Equal(t, forge.Gitea, d.Provider, "not GitHub, whose headers Gitea also sends")
			require.Equal(t, deliveryA, d.ID)
			require.NotNil(t, d.Push)
			want := c.want
			want.Changes = []forge.Change{{Ref: want.Ref, Branch: want.Branch, Tag: want.Tag,
				After: want.After, Before: want.Before, Deleted: want.Deleted, HeadMessage: want.HeadMessage}}
			require.Equal(t, want, *d.Push)
		})
	}
}

func TestGiteaSignatureForms(t *testing.T) {
	body := load(t, "gitea/push.json")
	cases := map[string]struct {
		set  func(h http.Header)
		want error
	}{
		"with a sha256= prefix": {func(h http.Header) {
			h.Set("X-Gitea-Signature", "sha256="+hexMAC(secret, body))
		}, forge.ErrBadSignature},
		"hook without secret, as Gitea sends it": {func(h http.Header) {
			for _, n := range signatureHeaders {
				h.Set(n, "")
			}
			h.Set("X-Hub-Signature", "sha1=")
			h.Set("X-Hub-Signature-256", "sha256=")
		}, forge.ErrUnsigned},
		"hook without secret: Gitea's empty signature alone": {func(h http.Header) {
			for _, n := range signatureHeaders {
				h.Del(n)
			}
			h.Set("X-Gitea-Signature", "")
		}, forge.ErrUnsigned},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := giteaHeaders(t, secret, body, "push")
			c.set(h)
			_, err := forge.Verify(h, body, both)
			require.ErrorIs(t, err, c.want)
		})
	}
}

func TestForgejo(t *testing.T) {
	body := load(t, "forgejo/push.json")
	t.Run("feature/x, exactly", func(t *testing.T) {
		d, err := forge.Verify(forgejoHeaders(t, secret, body, "push"), body, both)
		require.NoError(t, err)
		require.Equal(t, forge.Forgejo, d.Provider, "Forgejo's headers win over Gitea's")
		require.Equal(t, "push", d.Event)
		require.Equal(t, &forge.Push{
			Repository: "https://codeberg.example/ops/deployer.git",
			Ref:        "refs/heads/feature/x", Branch: "feature/x",
			Before: "9c5ef7ef1bd5b09f3ba6a18f8ad2c5e5b3c8e4a1", After: "4f2d8c61e0a9b7d3c5e1f8a2b6c4d0e9f7a3b5c1",
			Pusher: "grace", HeadMessage: "Deploy feature x behind a flag",
			Changes: []forge.Change{{Ref: "refs/heads/feature/x", Branch: "feature/x",
				Before: "9c5ef7ef1bd5b09f3ba6a18f8ad2c5e5b3c8e4a1", After: "4f2d8c61e0a9b7d3c5e1f8a2b6c4d0e9f7a3b5c1",
				HeadMessage: "Deploy feature x behind a flag"}},
		}, d.Push)
	})
	t.Run("Forgejo's ids are read, not Gitea's", func(t *testing.T) {
		h := forgejoHeaders(t, secret, body, "push")
		h.Set("X-Forgejo-Delivery", "forgejo-id")
		h.Set("X-Gitea-Event", "issues")
		d, err := forge.Verify(h, body, both)
		require.NoError(t, err)
		require.Equal(t, "forgejo-id", d.ID)
		require.Equal(t, "push", d.Event)
	})
	t.Run("a bad Forgejo signature is not rescued by Gitea's", func(t *testing.T) {
		h := forgejoHeaders(t, secret, body, "push")
		h.Set("X-Forgejo-Signature", hexMAC(stranger, body))
		_, err := forge.Verify(h, body, both)
		require.ErrorIs(t, err, forge.ErrBadSignature)
	})
	t.Run("tag push", func(t *testing.T) {
		tag := edit(t, body, func(m map[string]any) { m["ref"] = "refs/tags/v2" })
		d, err := forge.Verify(forgejoHeaders(t, secret, tag, "push"), tag, both)
		require.NoError(t, err)
		require.Equal(t, "v2", d.Push.Tag)
		require.Empty(t, d.Push.Branch)
	})
}
