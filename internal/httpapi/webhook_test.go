package httpapi_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// hookEnv is a control plane with a project whose Git services build from
// the repositories of the forges' example payloads.
type hookEnv struct {
	t      *testing.T
	c      *client
	root   string
	url    string // the webhook's path
	secret string
}

const shopPath = "/api/v1/orgs/acme/projects/shop"

func newHookEnv(t *testing.T) *hookEnv {
	t.Helper()
	srv := servertest.Start(t, servertest.Options{})
	h := &hookEnv{t: t, c: newClient(t, srv)}
	h.root = srv.Setup(t, "root@example.com", "acme")
	h.must(h.c.do("POST", "/api/v1/orgs/acme/clusters", h.root, map[string]any{"name": "eu-1"}), 201)
	h.must(h.c.do("POST", "/api/v1/orgs/acme/clusters", h.root, map[string]any{"name": "us-1"}), 201)
	h.must(h.c.do("POST", "/api/v1/orgs/acme/projects", h.root, map[string]any{"name": "shop"}), 201)
	h.must(h.c.do("POST", shopPath+"/environments", h.root, map[string]any{"name": "staging", "cluster": "eu-1"}), 201)
	h.must(h.c.do("POST", shopPath+"/environments", h.root, map[string]any{"name": "qa", "cluster": "eu-1"}), 201)
	h.must(h.c.do("POST", shopPath+"/environments", h.root, map[string]any{"name": "production", "cluster": "us-1", "protected": true}), 201)
	for _, s := range []struct{ name, url, branch string }{
		{"hello", "git@github.com:Codertocat/Hello-World.git", "master"}, // the ssh form of the payload's https clone URL
		{"engine", "https://gitlab.example.com/engines/analytical-engine", "main"},
		{"hooks", "http://localhost:3000/gitea/webhooks.git", "develop"},
		{"deployer", "https://codeberg.example/ops/deployer.git", "main"},
		{"shopapi", "https://bitbucket.org/acme/shop-api.git", "main"},
	} {
		h.must(h.c.do("POST", shopPath+"/services", h.root, map[string]any{"name": s.name, "gitUrl": s.url, "gitBranch": s.branch, "port": 8080}), 201)
	}
	// The deployer follows feature/x in qa only (Forgejo's example pushes it).
	h.must(h.c.do("PUT", shopPath+"/environments/qa/services/deployer/tracking", h.root, map[string]any{"branch": "feature/x"}), 200)
	var info api.WebhookInfo
	h.must(h.c.do("GET", shopPath+"/webhook", h.root, nil), 200).json(t, &info)
	require.False(t, info.SecretSet)
	var s api.WebhookSecret
	h.must(h.c.do("POST", shopPath+"/webhook/rotate", h.root, nil), 200).json(t, &s)
	require.True(t, strings.HasPrefix(s.URL, "http://127.0.0.1"+httpapi.HookPath), s.URL)
	require.NotEmpty(t, s.Secret)
	h.url, h.secret = strings.TrimPrefix(s.URL, "http://127.0.0.1"), s.Secret
	h.must(h.c.do("GET", shopPath+"/webhook", h.root, nil), 200).json(t, &info)
	require.True(t, info.SecretSet)
	require.NotContains(t, string(h.c.do("GET", shopPath+"/webhook", h.root, nil).body), s.Secret, "the secret is shown once")
	return h
}

func (h *hookEnv) must(res response, status int) response {
	h.t.Helper()
	require.Equal(h.t, status, res.status, string(res.body))
	return res
}

func payload(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../forge/testdata/" + name)
	require.NoError(t, err)
	return string(b)
}

func hexHMAC(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// signed returns the headers of a delivery of provider, signed with secret
// ("" signs nothing).
func signed(provider, event, id, secret, body string) []string {
	switch provider {
	case "github":
		h := []string{"X-GitHub-Event", event, "X-GitHub-Delivery", id}
		if secret != "" {
			h = append(h, "X-Hub-Signature-256", "sha256="+hexHMAC(secret, body))
		}
		return h
	case "gitlab":
		h := []string{"X-Gitlab-Event", event, "X-Gitlab-Event-UUID", id}
		if secret != "" {
			h = append(h, "X-Gitlab-Token", secret)
		}
		return h
	case "gitea":
		h := []string{"X-Gitea-Event", event, "X-Gitea-Delivery", id}
		if secret != "" {
			h = append(h, "X-Gitea-Signature", hexHMAC(secret, body))
		}
		return h
	case "forgejo":
		h := []string{"X-Forgejo-Event", event, "X-Forgejo-Delivery", id}
		if secret != "" {
			h = append(h, "X-Forgejo-Signature", hexHMAC(secret, body))
		}
		return h
	case "bitbucket":
		h := []string{"X-Event-Key", event, "X-Request-UUID", id}
		if secret != "" {
			h = append(h, "X-Hub-Signature", "sha256="+hexHMAC(secret, body))
		}
		return h
	}
	panic(provider)
}

func (h *hookEnv) deliver(provider, event, id, secret, body string) response {
	h.t.Helper()
	return h.c.do("POST", h.url, "", body, signed(provider, event, id, secret, body)...)
}

func (h *hookEnv) builds() []api.Build {
	var bs []api.Build
	h.must(h.c.do("GET", shopPath+"/builds?limit=1000", h.root, nil), 200).items(h.t, &bs)
	return bs
}

func (h *hookEnv) deliveries() []api.Delivery {
	var ds []api.Delivery
	h.must(h.c.do("GET", shopPath+"/webhook/deliveries?limit=1000", h.root, nil), 200).items(h.t, &ds)
	return ds
}

// Every forge's real push payload, signed with the project's secret, queues
// the builds of the services that build from the pushed repository in the
// environments that track the branch, once; a redelivery is a no-op, and
// a bad or missing signature is refused with nothing recorded.
func TestPushWebhooksOfEveryForge(t *testing.T) {
	t.Parallel()
	h := newHookEnv(t)
	cases := []struct {
		provider, event, file string
		service, commit       string
		envs, builds          int
	}{
		{"github", "push", "github/push-branch-created.json", "hello", "6113728f27ae82c7b1a177c8d03f9e96e0adf246", 3, 2},
		{"gitlab", "Push Hook", "gitlab/push.json", "engine", "", 3, 2},
		{"gitea", "push", "gitea/push.json", "hooks", "", 3, 2},
		{"forgejo", "push", "forgejo/push.json", "deployer", "", 1, 1},
		{"bitbucket", "repo:push", "bitbucket/repo-push.json", "shopapi", "", 3, 2},
	}
	for _, tc := range cases {
		body := payload(t, tc.file)
		id := uuid.NewString()
		before := len(h.builds())
		// Refused, recording nothing: no signature, a wrong one, one
		// over another body.
		h.must(h.deliver(tc.provider, tc.event, id, "", body), 401)
		h.must(h.deliver(tc.provider, tc.event, id, "not-the-secret", body), 401)
		if tc.provider != "gitlab" { // GitLab's token does not sign the body
			sig := signed(tc.provider, tc.event, id, h.secret, body)
			h.must(h.c.do("POST", h.url, "", body+" ", sig...), 401)
		}
		require.Len(t, h.builds(), before, "%s: nothing is built before the signature matched", tc.provider)
		require.Empty(t, filterDeliveries(h.deliveries(), id))

		var res api.HookResponse
		h.must(h.deliver(tc.provider, tc.event, id, h.secret, body), 200).json(t, &res)
		require.Equal(t, "building", res.Outcome, "%s: %s", tc.provider, res.Reason)
		// Staging and qa share eu-1: one build there; production is on us-1.
		require.Len(t, res.Builds, tc.builds, tc.provider)
		h.must(h.deliver(tc.provider, tc.event, id, h.secret, body), 200).json(t, &res)
		require.Equal(t, "duplicate", res.Outcome, "%s: a redelivery is a no-op", tc.provider)

		var mine []api.Build
		require.Eventually(t, func() bool {
			mine = nil
			for _, b := range h.builds() {
				if b.Service == tc.service {
					mine = append(mine, b)
				}
			}
			return len(mine) == len(res.Builds)
		}, 10*time.Second, 50*time.Millisecond, tc.provider)
		envs := 0
		for _, b := range mine {
			envs += len(b.Environments)
			require.Equal(t, "push", b.Trigger)
			require.True(t, b.Automatic)
			require.Len(t, b.Commit, 40)
			if tc.commit != "" {
				require.Equal(t, tc.commit, b.Commit)
			}
		}
		require.Equal(t, tc.envs, envs, "%s: every environment that tracks the branch, and none other", tc.provider)
		d := filterDeliveries(h.deliveries(), res.DeliveryID)
		require.Len(t, d, 1, "%s: recorded once", tc.provider)
		require.Equal(t, "building", d[0].Outcome)
		require.Equal(t, tc.provider, d[0].Provider)
	}
	var audit api.AuditPage
	h.must(h.c.do("GET", "/api/v1/orgs/acme/audit?action=webhook.delivery", h.root, nil), 200).json(t, &audit)
	require.Len(t, audit.Items, len(cases), "each delivery is audited once")
	h.must(h.c.do("GET", "/api/v1/orgs/acme/audit?action=build.queue", h.root, nil), 200).json(t, &audit)
	require.NotEmpty(t, audit.Items)
}

func filterDeliveries(ds []api.Delivery, id string) []api.Delivery {
	var out []api.Delivery
	for _, d := range ds {
		if d.ID == id || d.ForgeID == id {
			out = append(out, d)
		}
	}
	return out
}

// Pushes nothing tracks, tags, deletions and pings are recorded with the
// reason and build nothing; a body that is not JSON or too large is refused.
func TestWebhookDeliveriesThatBuildNothing(t *testing.T) {
	t.Parallel()
	h := newHookEnv(t)
	push := payload(t, "github/push-branch-created.json")
	untracked := strings.Replace(push, `"ref": "refs/heads/master"`, `"ref": "refs/heads/feature/master"`, 1)
	require.NotEqual(t, push, untracked)
	other := strings.ReplaceAll(push, "Codertocat/Hello-World", "Codertocat/Other")
	for _, tc := range []struct {
		provider, event, body, outcome, reason string
	}{
		{"github", "push", untracked, "ignored", "no environment tracks branch feature/master"},
		{"github", "push", other, "ignored", "no service of this project builds from"},
		{"github", "push", payload(t, "github/push-tag-created.json"), "ignored", "tag pushes are not built"},
		{"github", "push", payload(t, "github/push-tag-deleted.json"), "ignored", "tag"},
		{"gitlab", "Tag Push Hook", payload(t, "gitlab/tag_push.json"), "ignored", "tag pushes are not built"},
		{"bitbucket", "repo:push", payload(t, "bitbucket/repo-push-branch-deleted.json"), "ignored", "was deleted"},
		{"github", "ping", payload(t, "github/ping.json"), "ping", ""},
	} {
		var res api.HookResponse
		h.must(h.deliver(tc.provider, tc.event, uuid.NewString(), h.secret, tc.body), 200).json(t, &res)
		require.Equal(t, tc.outcome, res.Outcome, tc.reason)
		require.Contains(t, res.Reason, tc.reason)
		d := filterDeliveries(h.deliveries(), res.DeliveryID)
		require.Len(t, d, 1)
		require.Equal(t, tc.outcome, d[0].Outcome)
		require.Contains(t, d[0].Reason, tc.reason, "the delivery list says why")
	}
	// Signed, but not a payload.
	h.must(h.deliver("github", "push", uuid.NewString(), h.secret, "this is not JSON"), 400)
	h.must(h.deliver("github", "push", "", h.secret, push), 400)
	// Too large: refused before anything else.
	big := `{"pad":"` + strings.Repeat("x", 1<<20) + `"}`
	h.must(h.deliver("github", "push", uuid.NewString(), h.secret, big), 413)
	// A URL of no project, or a malformed one, proves nothing.
	h.must(h.c.do("POST", httpapi.HookPath+uuid.NewString(), "", push, signed("github", "push", uuid.NewString(), h.secret, push)...), 401)
	require.Empty(t, h.builds(), "nothing was built")
}

// A rotation makes a new secret; the one before is accepted for the grace
// period, so a forge can be updated meanwhile.
func TestWebhookSecretRotation(t *testing.T) {
	t.Parallel()
	h := newHookEnv(t)
	old := h.secret
	var s api.WebhookSecret
	h.must(h.c.do("POST", shopPath+"/webhook/rotate", h.root, nil), 200).json(t, &s)
	require.NotEqual(t, old, s.Secret)
	require.NotNil(t, s.PreviousUntil)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *s.PreviousUntil, time.Minute)
	ping := payload(t, "github/ping.json")
	h.must(h.deliver("github", "ping", uuid.NewString(), old, ping), 200)
	h.must(h.deliver("github", "ping", uuid.NewString(), s.Secret, ping), 200)
	// Rotating needs a token (the route takes projects:write).
	h.must(h.c.do("POST", shopPath+"/webhook/rotate", "", nil), 401)
}

// Generated bodies and headers, signed with anything but the secret, never
// reach a build or a recorded delivery.
func TestGeneratedWebhooksNeverBuild(t *testing.T) {
	t.Parallel()
	h := newHookEnv(t)
	rng := rand.New(rand.NewPCG(1, 2))
	push := payload(t, "github/push-branch-created.json")
	names := []string{"X-Hub-Signature-256", "X-Hub-Signature", "X-Gitlab-Token", "X-Gitea-Signature", "X-Forgejo-Signature",
		"webhook-signature", "webhook-id", "webhook-timestamp", "X-GitHub-Event", "X-Gitlab-Event", "X-Event-Key", "X-Gitea-Event",
		"X-GitHub-Delivery", "X-Request-UUID", "X-Gitlab-Event-UUID"}
	values := func() string {
		switch rng.IntN(6) {
		case 0:
			return "sha256=" + hexHMAC(fmt.Sprint(rng.Int()), push)
		case 1:
			return "sha256="
		case 2:
			return strings.Repeat("a", rng.IntN(300))
		case 3:
			return "v1," + hexHMAC("x", push)
		case 4:
			return fmt.Sprint(time.Now().Unix())
		}
		return "push"
	}
	for i := 0; i < 300; i++ {
		body := push
		if rng.IntN(2) == 0 {
			b := []byte(push)
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			body = string(b)
		}
		var hs []string
		for j := rng.IntN(6); j > 0; j-- {
			hs = append(hs, names[rng.IntN(len(names))], values())
		}
		res := h.c.do("POST", h.url, "", body, hs...)
		require.Contains(t, []int{400, 401}, res.status, "%v: %s", hs, res.body)
	}
	require.Empty(t, h.builds())
	require.Empty(t, h.deliveries())
}
