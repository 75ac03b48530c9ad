package forge_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

const helloWorld = "https://github.com/Codertocat/Hello-World.git"

// TestGitHubExamples: every vendored example verifies once signed, as
// the event its file name says.
func TestGitHubExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "github", "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 5)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			event := strings.SplitN(filepath.Base(f), "-", 2)[0]
			event = strings.TrimSuffix(event, ".json")
			d, err := forge.Verify(githubHeaders(t, secret, body, event), body, both)
			require.NoError(t, err)
			require.Equal(t, forge.GitHub, d.Provider)
			require.Equal(t, event, d.Event)
			require.Equal(t, deliveryA, d.ID)
			require.Equal(t, event == "push", d.Push != nil)
		})
	}
}

func TestGitHubPush(t *testing.T) {
	const head = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	zero := strings.Repeat("0", 40)
	cases := []struct {
		name   string
		file   string
		change func(m map[string]any)
		want   forge.Push
	}{{
		name: "branch created",
		file: "github/push-branch-created.json",
		want: forge.Push{Repository: helloWorld, Ref: "refs/heads/master", Branch: "master",
			After: head, Before: zero, Pusher: "Codertocat", HeadMessage: "Initial commit"},
	}, {
		name: "tag created",
		file: "github/push-tag-created.json",
		want: forge.Push{Repository: helloWorld, Ref: "refs/tags/simple-tag", Tag: "simple-tag",
			After: head, Before: zero, Pusher: "Codertocat", HeadMessage: "Adding a .gitignore file"},
	}, {
		name: "tag deleted",
		file: "github/push-tag-deleted.json",
		want: forge.Push{Repository: helloWorld, Ref: "refs/tags/simple-tag", Tag: "simple-tag",
			After: zero, Before: head, Deleted: true, Pusher: "Codertocat"},
	}, {
		name: "branch feature/x",
		file: "github/push-branch-created.json",
		change: func(m map[string]any) {
			m["ref"] = "refs/heads/feature/x"
		},
		want: forge.Push{Repository: helloWorld, Ref: "refs/heads/feature/x", Branch: "feature/x",
			After: head, Before: zero, Pusher: "Codertocat", HeadMessage: "Initial commit"},
	}, {
		name: "branch deleted by the deleted flag",
		file: "github/push-branch-created.json",
		change: func(m map[string]any) {
			m["deleted"] = true
			m["head_commit"] = nil
		},
		want: forge.Push{Repository: helloWorld, Ref: "refs/heads/master", Branch: "master",
			After: head, Before: zero, Deleted: true, Pusher: "Codertocat"},
	}, {
		name: "ssh URL when there is no clone URL",
		file: "github/push-branch-created.json",
		change: func(m map[string]any) {
			delete(m["repository"].(map[string]any), "clone_url")
		},
		want: forge.Push{Repository: "git@github.com:Codertocat/Hello-World.git", Ref: "refs/heads/master", Branch: "master",
			After: head, Before: zero, Pusher: "Codertocat", HeadMessage: "Initial commit"},
	}, {
		name: "other refs have neither branch nor tag",
		file: "github/push-branch-created.json",
		change: func(m map[string]any) {
			m["ref"] = "refs/notes/commits"
		},
		want: forge.Push{Repository: helloWorld, Ref: "refs/notes/commits",
			After: head, Before: zero, Pusher: "Codertocat", HeadMessage: "Initial commit"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := load(t, c.file)
			if c.change != nil {
				body = edit(t, body, c.change)
			}
			d, err := forge.Verify(githubHeaders(t, secret, body, "push"), body, both)
			require.NoError(t, err)
			require.NotNil(t, d.Push)
			want := c.want
			want.Changes = []forge.Change{{Ref: want.Ref, Branch: want.Branch, Tag: want.Tag,
				After: want.After, Before: want.Before, Deleted: want.Deleted, HeadMessage: want.HeadMessage}}
			require.Equal(t, want, *d.Push)
		})
	}
}

func TestGitHubEvents(t *testing.T) {
	for _, f := range []string{"github/ping.json", "github/ping-organization.json"} {
		body := load(t, f)
		d, err := forge.Verify(githubHeaders(t, secret, body, "ping"), body, both)
		require.NoError(t, err)
		require.Equal(t, forge.Delivery{Provider: forge.GitHub, ID: deliveryA, Event: "ping"}, d)
	}

	// Other events are named as given and not read beyond being JSON.
	body := []byte(`{"action":"opened","issue":{"number":1}}`)
	d, err := forge.Verify(githubHeaders(t, secret, body, "issues"), body, both)
	require.NoError(t, err)
	require.Equal(t, forge.Delivery{Provider: forge.GitHub, ID: deliveryA, Event: "issues"}, d)

	for _, bad := range []string{"zen", `{"zen":`, `{"zen":1}x`} {
		_, err = forge.Verify(githubHeaders(t, secret, []byte(bad), "ping"), []byte(bad), both)
		require.ErrorIs(t, err, forge.ErrPayload, bad)
	}
}

func TestUnusableDeliveryID(t *testing.T) {
	body := load(t, "github/ping.json")
	for _, id := range []string{strings.Repeat("a", 257), "id\x00with-nul", "id\u202e"} {
		h := githubHeaders(t, secret, body, "ping")
		h.Set("X-GitHub-Delivery", id)
		_, err := forge.Verify(h, body, both)
		require.ErrorIs(t, err, forge.ErrNoDeliveryID, "%q", id)
	}
}

func TestGitHubSignatureForms(t *testing.T) {
	body := load(t, "github/push-branch-created.json")
	good := hexMAC(secret, body)
	cases := map[string]struct {
		set  func(h http.Header)
		want error
	}{
		"SHA-1 only": {func(h http.Header) { h.Del("X-Hub-Signature-256") }, forge.ErrUnsigned},
		"no prefix":  {func(h http.Header) { h.Set("X-Hub-Signature-256", good) }, forge.ErrBadSignature},
		"sha1 prefix on the 256 header": {func(h http.Header) {
			h.Set("X-Hub-Signature-256", "sha1="+good)
		}, forge.ErrBadSignature},
		"not hex":   {func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+strings.Repeat("zz", 32)) }, forge.ErrBadSignature},
		"too short": {func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+good[:62]) }, forge.ErrBadSignature},
		"too long":  {func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+good+"00") }, forge.ErrBadSignature},
		"empty value": {func(h http.Header) {
			h.Set("X-Hub-Signature-256", "")
			h.Del("X-Hub-Signature")
		}, forge.ErrUnsigned},
		"upper-case hex": {func(h http.Header) { h.Set("X-Hub-Signature-256", "sha256="+strings.ToUpper(good)) }, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			h := githubHeaders(t, secret, body, "push")
			c.set(h)
			_, err := forge.Verify(h, body, both)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
		})
	}
}

// TestCleaning: what a payload says is bounded and cleaned before it is
// returned, or refused when cleaning would change its meaning.
func TestCleaning(t *testing.T) {
	base := load(t, "github/push-branch-created.json")
	push := func(t *testing.T, change func(m map[string]any)) (*forge.Push, error) {
		body := edit(t, base, change)
		d, err := forge.Verify(githubHeaders(t, secret, body, "push"), body, both)
		return d.Push, err
	}
	t.Run("pusher and message lose control characters", func(t *testing.T) {
		p, err := push(t, func(m map[string]any) {
			m["pusher"] = map[string]any{"name": "eve\x00\x1b[31m\u202e"}
			m["head_commit"].(map[string]any)["message"] = "\tFix\x07 the\u0085 bug\r\nbody"
		})
		require.NoError(t, err)
		require.Equal(t, "eve[31m", p.Pusher)
		require.Equal(t, "Fix the bug", p.HeadMessage)
	})
	t.Run("message bounded to 200 bytes of UTF-8", func(t *testing.T) {
		p, err := push(t, func(m map[string]any) {
			m["head_commit"].(map[string]any)["message"] = strings.Repeat("é", 150)
		})
		require.NoError(t, err)
		require.Equal(t, strings.Repeat("é", 100), p.HeadMessage)
	})
	t.Run("pusher bounded", func(t *testing.T) {
		p, err := push(t, func(m map[string]any) {
			m["pusher"] = map[string]any{"name": strings.Repeat("a", 1000)}
		})
		require.NoError(t, err)
		require.Len(t, p.Pusher, 256)
	})
	refused := map[string]func(m map[string]any){
		"upper-case commit":       func(m map[string]any) { m["after"] = strings.ToUpper(m["after"].(string)) },
		"short commit":            func(m map[string]any) { m["after"] = "6113728" },
		"no before":               func(m map[string]any) { delete(m, "before") },
		"ref with a newline":      func(m map[string]any) { m["ref"] = "refs/heads/main\nrefs/heads/prod" },
		"ref with a space":        func(m map[string]any) { m["ref"] = "refs/heads/a b" },
		"ref with ..":             func(m map[string]any) { m["ref"] = "refs/heads/../../etc" },
		"ref not under refs/":     func(m map[string]any) { m["ref"] = "main" },
		"ref too long":            func(m map[string]any) { m["ref"] = "refs/heads/" + strings.Repeat("x", 1024) },
		"no repository":           func(m map[string]any) { delete(m, "repository") },
		"repository without URLs": func(m map[string]any) { m["repository"] = map[string]any{"name": "x"} },
		"repository URL too long": func(m map[string]any) {
			m["repository"].(map[string]any)["clone_url"] = "https://github.com/a/" + strings.Repeat("b", 2048)
		},
		"repository URL with a control character": func(m map[string]any) {
			m["repository"].(map[string]any)["clone_url"] = "https://github.com/a/b\x00.git"
		},
		"repository URL of another scheme": func(m map[string]any) {
			m["repository"].(map[string]any)["clone_url"] = "file:///etc/passwd"
		},
		"repository URL as an option": func(m map[string]any) {
			m["repository"].(map[string]any)["clone_url"] = "--upload-pack=touch /tmp/x"
		},
		"deleted of wrong type": func(m map[string]any) { m["deleted"] = "yes" },
	}
	for name, change := range refused {
		t.Run(name, func(t *testing.T) {
			p, err := push(t, change)
			require.ErrorIs(t, err, forge.ErrPayload)
			require.Nil(t, p)
		})
	}
}
