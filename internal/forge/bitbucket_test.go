package forge_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

const shopAPI = "https://bitbucket.org/acme/shop-api"

func TestBitbucketPush(t *testing.T) {
	zero := strings.Repeat("0", 40)
	const (
		oldHead = "1e65c05c1d5171631d92438a13901ca7dae9618c"
		newHead = "c4b2b7914156a878aa7c9da452a09fb50c2091f2"
	)
	push := load(t, "bitbucket/repo-push.json")
	firstChange := func(m map[string]any) map[string]any {
		return m["push"].(map[string]any)["changes"].([]any)[0].(map[string]any)
	}
	cases := []struct {
		name   string
		body   []byte
		change func(m map[string]any)
		want   []forge.Change
		repo   string
	}{{
		name: "branch moved",
		body: push,
		want: []forge.Change{{Ref: "refs/heads/main", Branch: "main", Before: oldHead, After: newHead,
			HeadMessage: "Check out with a saved card"}},
	}, {
		name: "branch deleted",
		body: load(t, "bitbucket/repo-push-branch-deleted.json"),
		want: []forge.Change{{Ref: "refs/heads/feature/old-cart", Branch: "feature/old-cart",
			Before: "7d3e6c3a2b1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d", After: zero, Deleted: true}},
	}, {
		name: "feature/x created",
		body: push,
		change: func(m map[string]any) {
			c := firstChange(m)
			c["old"], c["created"] = nil, true
			c["new"].(map[string]any)["name"] = "feature/x"
		},
		want: []forge.Change{{Ref: "refs/heads/feature/x", Branch: "feature/x", Before: zero, After: newHead,
			HeadMessage: "Check out with a saved card"}},
	}, {
		name: "tag created",
		body: push,
		change: func(m map[string]any) {
			c := firstChange(m)
			c["old"] = nil
			c["new"].(map[string]any)["type"] = "tag"
			c["new"].(map[string]any)["name"] = "v1.4.0"
		},
		want: []forge.Change{{Ref: "refs/tags/v1.4.0", Tag: "v1.4.0", Before: zero, After: newHead,
			HeadMessage: "Check out with a saved card"}},
	}, {
		name: "several changes: the first is the push's",
		body: push,
		change: func(m map[string]any) {
			changes := m["push"].(map[string]any)["changes"].([]any)
			tag := map[string]any{"new": map[string]any{"type": "tag", "name": "v2",
				"target": map[string]any{"hash": oldHead, "message": "Add the cart"}}, "old": nil}
			m["push"].(map[string]any)["changes"] = append(changes, tag)
		},
		want: []forge.Change{
			{Ref: "refs/heads/main", Branch: "main", Before: oldHead, After: newHead, HeadMessage: "Check out with a saved card"},
			{Ref: "refs/tags/v2", Tag: "v2", Before: zero, After: oldHead, HeadMessage: "Add the cart"},
		},
	}, {
		name: "SHA-256 repository, branch deleted",
		body: push,
		change: func(m map[string]any) {
			c := firstChange(m)
			c["new"], c["closed"] = nil, true
			c["old"].(map[string]any)["target"] = map[string]any{"hash": strings.Repeat("e", 64)}
		},
		want: []forge.Change{{Ref: "refs/heads/main", Branch: "main", Before: strings.Repeat("e", 64),
			After: strings.Repeat("0", 64), Deleted: true}},
	}, {
		name: "repository from full_name without links",
		body: push,
		change: func(m map[string]any) {
			delete(m["repository"].(map[string]any), "links")
		},
		want: []forge.Change{{Ref: "refs/heads/main", Branch: "main", Before: oldHead, After: newHead,
			HeadMessage: "Check out with a saved card"}},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := c.body
			if c.change != nil {
				body = edit(t, body, c.change)
			}
			d, err := forge.Verify(bitbucketHeaders(t, secret, body, "repo:push"), body, both)
			require.NoError(t, err)
			require.Equal(t, forge.Delivery{Provider: forge.Bitbucket, ID: deliveryA, Event: "push", Push: d.Push}, d)
			first := c.want[0]
			require.Equal(t, &forge.Push{
				Repository: shopAPI, Ref: first.Ref, Branch: first.Branch, Tag: first.Tag,
				After: first.After, Before: first.Before, Deleted: first.Deleted,
				Pusher: "linus", HeadMessage: first.HeadMessage, Changes: c.want,
			}, d.Push)
			require.True(t, forge.SameRepository(d.Push.Repository, "git@bitbucket.org:acme/shop-api.git"))
		})
	}
}

func TestBitbucketRefused(t *testing.T) {
	push := load(t, "bitbucket/repo-push.json")
	change := func(m map[string]any) map[string]any {
		return m["push"].(map[string]any)["changes"].([]any)[0].(map[string]any)
	}
	refused := map[string]func(m map[string]any){
		"no changes":          func(m map[string]any) { m["push"].(map[string]any)["changes"] = []any{} },
		"no push":             func(m map[string]any) { delete(m, "push") },
		"neither new nor old": func(m map[string]any) { c := change(m); c["new"], c["old"] = nil, nil },
		"unknown ref type":    func(m map[string]any) { change(m)["new"].(map[string]any)["type"] = "bookmark" },
		"new and old differ":  func(m map[string]any) { change(m)["new"].(map[string]any)["name"] = "other" },
		"short hash": func(m map[string]any) {
			change(m)["new"].(map[string]any)["target"] = map[string]any{"hash": "c4b2b79"}
		},
		"no repository":        func(m map[string]any) { delete(m, "repository") },
		"repository has no id": func(m map[string]any) { m["repository"] = map[string]any{"name": "shop-api"} },
	}
	for name, mutate := range refused {
		t.Run(name, func(t *testing.T) {
			body := edit(t, push, mutate)
			_, err := forge.Verify(bitbucketHeaders(t, secret, body, "repo:push"), body, both)
			require.ErrorIs(t, err, forge.ErrPayload)
		})
	}
}

func TestBitbucketEvents(t *testing.T) {
	body := []byte(`{"test":true}`)
	d, err := forge.Verify(bitbucketHeaders(t, secret, body, "diagnostics:ping"), body, both)
	require.NoError(t, err)
	require.Equal(t, forge.Delivery{Provider: forge.Bitbucket, ID: deliveryA, Event: "ping"}, d)

	body = []byte(`{"pullrequest":{"id":1}}`)
	d, err = forge.Verify(bitbucketHeaders(t, secret, body, "pullrequest:created"), body, both)
	require.NoError(t, err)
	require.Equal(t, "pullrequest:created", d.Event)
	require.Nil(t, d.Push)
}

func TestBitbucketSignatureForms(t *testing.T) {
	body := load(t, "bitbucket/repo-push.json")
	h := bitbucketHeaders(t, secret, body, "repo:push")
	h.Set("X-Hub-Signature", "sha1="+sha1MAC(secret, body))
	_, err := forge.Verify(h, body, both)
	require.ErrorIs(t, err, forge.ErrBadSignature, "SHA-1 is not accepted")

	h.Set("X-Hub-Signature", hexMAC(secret, body))
	_, err = forge.Verify(h, body, both)
	require.ErrorIs(t, err, forge.ErrBadSignature, "the sha256= prefix is required")
}
