package forge_test

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

const engine = "https://gitlab.example.com/engines/analytical-engine.git"

func TestGitLabPush(t *testing.T) {
	zero := strings.Repeat("0", 40)
	cases := []struct {
		name      string
		file      string
		event     string
		change    func(m map[string]any)
		wantEvent string
		want      forge.Push
	}{{
		name: "push", file: "gitlab/push.json", event: "Push Hook", wantEvent: "push",
		want: forge.Push{Repository: engine, Ref: "refs/heads/main", Branch: "main",
			Before: "95790bf891e76fee5e1747ab589903a6a1f80f22", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			Pusher: "ada", HeadMessage: "Fix the store's carry"},
	}, {
		name: "tag push reports the tagged commit", file: "gitlab/tag_push.json", event: "Tag Push Hook", wantEvent: "tag_push",
		want: forge.Push{Repository: engine, Ref: "refs/tags/v1.0.0", Tag: "v1.0.0",
			Before: zero, After: "5937ac0a7beb003549fc5fd26fc247adbce4a52e", Pusher: "ada"},
	}, {
		name: "feature/x", file: "gitlab/push.json", event: "Push Hook", wantEvent: "push",
		change: func(m map[string]any) { m["ref"] = "refs/heads/feature/x" },
		want: forge.Push{Repository: engine, Ref: "refs/heads/feature/x", Branch: "feature/x",
			Before: "95790bf891e76fee5e1747ab589903a6a1f80f22", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			Pusher: "ada", HeadMessage: "Fix the store's carry"},
	}, {
		name: "branch deletion", file: "gitlab/push.json", event: "Push Hook", wantEvent: "push",
		change: func(m map[string]any) {
			m["before"], m["after"], m["checkout_sha"], m["commits"] = m["after"], zero, nil, []any{}
		},
		want: forge.Push{Repository: engine, Ref: "refs/heads/main", Branch: "main",
			Before: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", After: zero, Deleted: true, Pusher: "ada"},
	}, {
		name: "system hook push", file: "gitlab/push.json", event: "System Hook", wantEvent: "push",
		want: forge.Push{Repository: engine, Ref: "refs/heads/main", Branch: "main",
			Before: "95790bf891e76fee5e1747ab589903a6a1f80f22", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			Pusher: "ada", HeadMessage: "Fix the store's carry"},
	}, {
		name: "deprecated repository object, user_name", file: "gitlab/push.json", event: "Push Hook", wantEvent: "push",
		change: func(m map[string]any) {
			delete(m, "project")
			delete(m, "user_username")
		},
		want: forge.Push{Repository: engine, Ref: "refs/heads/main", Branch: "main",
			Before: "95790bf891e76fee5e1747ab589903a6a1f80f22", After: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			Pusher: "Ada Lovelace", HeadMessage: "Fix the store's carry"},
	}}
	for _, c := range cases {
		for _, form := range []struct {
			name    string
			headers func(testing.TB, []byte, []byte, string) http.Header
		}{{"token", gitlabTokenHeaders}, {"signed", gitlabSignedHeaders}} {
			t.Run(c.name+"/"+form.name, func(t *testing.T) {
				body := load(t, c.file)
				if c.change != nil {
					body = edit(t, body, c.change)
				}
				d, err := verify(form.headers(t, secret, body, c.event), body, both)
				require.NoError(t, err)
				require.Equal(t, forge.GitLab, d.Provider)
				require.Equal(t, c.wantEvent, d.Event)
				require.NotNil(t, d.Push)
				want := c.want
				want.Changes = []forge.Change{{Ref: want.Ref, Branch: want.Branch, Tag: want.Tag,
					After: want.After, Before: want.Before, Deleted: want.Deleted, HeadMessage: want.HeadMessage}}
				require.Equal(t, want, *d.Push)
			})
		}
	}
}

func TestGitLabEvents(t *testing.T) {
	body := []byte(`{"object_kind":"merge_request","object_attributes":{"iid":1}}`)
	d, err := forge.Verify(gitlabTokenHeaders(t, secret, body, "Merge Request Hook"), body, both)
	require.NoError(t, err)
	require.Equal(t, forge.Delivery{Provider: forge.GitLab, ID: deliveryA, Event: "Merge Request Hook"}, d)

	body = []byte(`{"object_kind":"project_create","event_name":"project_create"}`)
	d, err = forge.Verify(gitlabTokenHeaders(t, secret, body, "System Hook"), body, both)
	require.NoError(t, err)
	require.Equal(t, "System Hook", d.Event)
	require.Nil(t, d.Push)

	// A push body under the tag push header (or the reverse) is refused.
	push := load(t, "gitlab/push.json")
	_, err = forge.Verify(gitlabTokenHeaders(t, secret, push, "Tag Push Hook"), push, both)
	require.ErrorIs(t, err, forge.ErrPayload)
}

func TestGitLabToken(t *testing.T) {
	body := load(t, "gitlab/push.json")
	h := gitlabTokenHeaders(t, secret, body, "Push Hook")
	h.Set("X-Gitlab-Token", string(secret)+" ")
	_, err := forge.Verify(h, body, both)
	require.NoError(t, err, "header values arrive trimmed")
	h.Set("X-Gitlab-Token", string(secret[:len(secret)-1]))
	_, err = forge.Verify(h, body, both)
	require.ErrorIs(t, err, forge.ErrBadSignature, "a prefix of the secret")
	h.Set("X-Gitlab-Token", string(secret)+"x")
	_, err = forge.Verify(h, body, both)
	require.ErrorIs(t, err, forge.ErrBadSignature, "the secret and more")
}

// TestGitLabSigned covers the Standard Webhooks form of GitLab's signing token.
func TestGitLabSigned(t *testing.T) {
	body := load(t, "gitlab/push.json")
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	whsec := []byte("whsec_" + base64.StdEncoding.EncodeToString(raw))
	id := "msg_" + deliveryA
	ts := strconv.FormatInt(fixedNow.Unix(), 10)
	headers := func(sig string) http.Header {
		h := gitlabTokenHeaders(t, nil, body, "Push Hook")
		h.Del("X-Gitlab-Token")
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		return h
	}
	good := standardSignature(t, whsec, id, fixedNow, body)
	other := standardSignature(t, stranger, id, fixedNow, body)

	t.Run("whsec key", func(t *testing.T) {
		d, err := verify(headers(good), body, forge.Secrets{whsec})
		require.NoError(t, err)
		require.Equal(t, id, d.ID, "the delivery id is webhook-id")
	})
	t.Run("whsec secret used as raw bytes does not match", func(t *testing.T) {
		m := hmac.New(sha256.New, whsec) // the whole string as the key, not decoded
		m.Write([]byte(id + "." + ts + "."))
		m.Write(body)
		rawSig := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
		_, err := verify(headers(rawSig), body, forge.Secrets{whsec})
		require.ErrorIs(t, err, forge.ErrBadSignature)
	})
	t.Run("whsec secret that is not base64 matches nothing", func(t *testing.T) {
		bad := []byte("whsec_not*base64")
		_, err := verify(headers(standardSignature(t, []byte("not*base64"), id, fixedNow, body)), body, forge.Secrets{bad})
		require.ErrorIs(t, err, forge.ErrBadSignature)
	})
	t.Run("several signatures, one valid", func(t *testing.T) {
		_, err := verify(headers(other+" v1a,bm90IGVkMjU1MTk= "+good), body, forge.Secrets{whsec})
		require.NoError(t, err)
	})
	t.Run("several signatures, none valid", func(t *testing.T) {
		_, err := verify(headers(other+" "+other), body, forge.Secrets{whsec})
		require.ErrorIs(t, err, forge.ErrBadSignature)
	})
	t.Run("only other schemes", func(t *testing.T) {
		_, err := verify(headers("v1a,bm90IGVkMjU1MTk= v2,"+good[3:]), body, forge.Secrets{whsec})
		require.ErrorIs(t, err, forge.ErrBadSignature)
	})
	t.Run("rotation: previous whsec key", func(t *testing.T) {
		_, err := verify(headers(good), body, forge.Secrets{secret, whsec})
		require.NoError(t, err)
	})
	for _, skew := range []time.Duration{-5 * time.Minute, 5 * time.Minute} {
		t.Run("timestamp at the edge "+skew.String(), func(t *testing.T) {
			v := forge.Verifier{Secrets: forge.Secrets{whsec}, Now: func() time.Time { return fixedNow.Add(skew) }}
			_, err := v.Verify(headers(good), body)
			require.NoError(t, err)
		})
	}
	for _, skew := range []time.Duration{-5*time.Minute - time.Second, 5*time.Minute + time.Second, 24 * time.Hour} {
		t.Run("stale or future timestamp "+skew.String(), func(t *testing.T) {
			v := forge.Verifier{Secrets: forge.Secrets{whsec}, Now: func() time.Time { return fixedNow.Add(skew) }}
			_, err := v.Verify(headers(good), body)
			require.ErrorIs(t, err, forge.ErrBadSignature)
		})
	}
	t.Run("now by default", func(t *testing.T) {
		_, err := forge.Verify(headers(good), body, forge.Secrets{whsec})
		require.ErrorIs(t, err, forge.ErrBadSignature, "fixedNow is long past")
		now := time.Now()
		h := headers(standardSignature(t, whsec, id, now, body))
		h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		_, err = forge.Verify(h, body, forge.Secrets{whsec})
		require.NoError(t, err)
	})
	broken := map[string]func(h http.Header){
		"timestamp moved":     func(h http.Header) { h.Set("webhook-timestamp", strconv.FormatInt(fixedNow.Unix()+1, 10)) },
		"id changed":          func(h http.Header) { h.Set("webhook-id", id+"x") },
		"no id":               func(h http.Header) { h.Del("webhook-id") },
		"id twice":            func(h http.Header) { h.Add("webhook-id", "msg_other") },
		"no timestamp":        func(h http.Header) { h.Del("webhook-timestamp") },
		"signed timestamp":    func(h http.Header) { h.Set("webhook-timestamp", "+"+ts) },
		"timestamp not a num": func(h http.Header) { h.Set("webhook-timestamp", "yesterday") },
		"signature not b64":   func(h http.Header) { h.Set("webhook-signature", "v1,!!!") },
		"signature no scheme": func(h http.Header) { h.Set("webhook-signature", good[3:]) },
		"signature too short": func(h http.Header) { h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(raw[:16])) },
	}
	for name, change := range broken {
		t.Run(name, func(t *testing.T) {
			h := headers(good)
			change(h)
			_, err := verify(h, body, forge.Secrets{whsec})
			require.ErrorIs(t, err, forge.ErrBadSignature)
		})
	}
	t.Run("signature wins over the token", func(t *testing.T) {
		h := headers(good)
		h.Set("X-Gitlab-Token", string(secret))
		_, err := verify(h, body, forge.Secrets{secret}) // the token matches, the signature does not
		require.ErrorIs(t, err, forge.ErrBadSignature)
		_, err = verify(h, body, forge.Secrets{whsec})
		require.NoError(t, err)
	})
}
