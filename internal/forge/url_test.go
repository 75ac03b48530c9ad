package forge_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/forge"
)

func TestNormalizeURL(t *testing.T) {
	same := map[string][]string{
		"github.com/Codertocat/Hello-World": {
			"https://github.com/Codertocat/Hello-World.git",
			"https://github.com/Codertocat/Hello-World",
			"https://github.com/Codertocat/Hello-World/",
			"https://github.com/Codertocat/Hello-World.git/",
			"http://github.com/Codertocat/Hello-World",
			"HTTPS://GitHub.COM/Codertocat/Hello-World",
			"https://github.com:443/Codertocat/Hello-World",
			"https://x-access-token:ghs_secret@github.com/Codertocat/Hello-World.git",
			"git@github.com:Codertocat/Hello-World.git",
			"git@github.com:Codertocat/Hello-World",
			"github.com:Codertocat/Hello-World.git",
			"ssh://git@github.com/Codertocat/Hello-World.git",
			"ssh://git@github.com:22/Codertocat/Hello-World.git",
			"git://github.com/Codertocat/Hello-World.git",
			"github.com/Codertocat/Hello-World",
			"github.com./Codertocat/Hello-World",
		},
		"localhost/gitea/webhooks": {
			"http://localhost:3000/gitea/webhooks.git",
			"ssh://gitea@localhost:2222/gitea/webhooks.git",
			"gitea@localhost:gitea/webhooks.git",
			"gitea@localhost:/gitea/webhooks.git",
		},
		"gitlab.example.com/group/sub/project": {
			"https://gitlab.example.com/group/sub/project.git",
			"git@gitlab.example.com:group/sub/project.git",
		},
		"[::1]/a/b": {
			"ssh://git@[::1]:22/a/b.git",
			"https://[::1]/a/b",
			"git@[::1]:a/b.git",
			"[::1]/a/b",
		},
	}
	for want, forms := range same {
		for _, f := range forms {
			got, err := forge.NormalizeURL(f)
			require.NoError(t, err, f)
			require.Equal(t, want, got, f)
			again, err := forge.NormalizeURL(got)
			require.NoError(t, err)
			require.Equal(t, got, again, "idempotent")
			require.True(t, forge.SameRepository(f, forms[0]), f)
		}
	}

	different := [][2]string{
		{"https://github.com/alice/app", "https://github.com/bob/app"},
		{"https://github.com/alice/app", "https://github.com/alice/app2"},
		{"https://github.com/alice/app", "https://gitlab.com/alice/app"},
		{"https://gitlab.com/Alice/App", "https://gitlab.com/alice/app"}, // path case kept off github.com
		{"https://github.com/alice/app", "https://github.com/alice/app/extra"},
		{"https://github.com/alice/app", "https://github.com.evil.example/alice/app"},
		{"https://github.com/alice/app", "not a url"},
	}
	for _, d := range different {
		require.False(t, forge.SameRepository(d[0], d[1]), d)
	}
	require.True(t, forge.SameRepository("https://github.com/Codertocat/Hello-World", "git@github.com:codertocat/hello-world.git"),
		"GitHub names are case-insensitive")

	refused := []string{
		"",
		"https://github.com",
		"https://github.com/",
		"https://github.com/.git",
		"https:///owner/repo",
		"https://user@/owner/repo",
		"file:///srv/git/repo.git",
		"ftp://example.com/owner/repo",
		"git+ssh://git@github.com/owner/repo",
		"ext::sh -c touch% /tmp/pwned",
		"host::transport",
		"C:/repos/project",
		"/srv/git/repo.git",
		"./repo",
		"../repo",
		"repo",
		"-uhttps://github.com/owner/repo",
		"--upload-pack=x@host:repo",
		"https://github.com/owner/repo\n",
		"https://github.com/own\x00er/repo",
		"https://github.com/owner/repo\u202e",
		"https://github.com/owner/re po",
		`https://github.com\owner\repo`,
		"https://github.com/owner/repo?ref=main",
		"https://github.com/owner/repo#main",
		"https://github.com/owner/../victim/repo",
		"https://github.com/owner/./repo",
		"https://github.com/owner//repo",
		"https://github.com:abc/owner/repo",
		"https://github.com:123456/owner/repo",
		"https://[::1/owner/repo",
		"https://[zz]/owner/repo",
		"https://-github.com/owner/repo",
		"https://github..com/owner/repo",
		"https://gíthub.com/owner/repo",
		"https://github.com/owner/repo\xff",
		"ssh://git@github.com:owner/repo.git",
		"git@github.com:",
	}
	for _, r := range refused {
		_, err := forge.NormalizeURL(r)
		require.Error(t, err, "%q", r)
	}
}
