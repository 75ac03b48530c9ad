package httpapi_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

const staging = "/api/v1/orgs/acme/projects/shop/environments/staging"

// twoClusters is a control plane with clusters eu-1, eu-2 and eu-3, project shop
// and its environment staging on eu-1.
func twoClusters(t *testing.T) (*client, string) {
	t.Helper()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
		require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": name}).status)
	}
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}).status)
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", root, map[string]any{"name": "staging", "cluster": "eu-1"}).status)
	return c, root
}

// Two PATCHes with the same If-Match, at the same time: one is made (200),
// the other is refused (412), every time; the one made is what a read shows.
func TestConcurrentPatchesWithTheSameIfMatch(t *testing.T) {
	t.Parallel()
	c, root := twoClusters(t)
	var clusters []api.Cluster
	c.do("GET", "/api/v1/orgs/acme/clusters", root, nil).items(t, &clusters)
	ids := map[string]string{}
	for _, cl := range clusters {
		ids[cl.Name] = cl.ID
	}
	for round := range 8 {
		read := c.do("GET", staging, root, nil)
		require.Equal(t, 200, read.status)
		tag := read.header.Get("ETag")
		require.Regexp(t, `^"project-[0-9a-f-]+\.\d+"$`, tag)
		var now api.Environment
		read.json(t, &now)
		// Two real changes (neither leaves the environment where it is).
		var targets []string
		for _, name := range []string{"eu-1", "eu-2", "eu-3"} {
			if ids[name] != now.ClusterID {
				targets = append(targets, name)
			}
		}
		require.Len(t, targets, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		answers := make([]response, 2)
		for i, cluster := range targets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[i] = c.do("PATCH", staging, root, map[string]any{"cluster": cluster}, "If-Match", tag)
			}()
		}
		close(start)
		wg.Wait()
		statuses := []int{answers[0].status, answers[1].status}
		slices.Sort(statuses)
		require.Equal(t, []int{200, 412}, statuses, "round %d: %s / %s", round, answers[0].body, answers[1].body)
		won := slices.IndexFunc(answers, func(r response) bool { return r.status == 200 })
		lost := answers[1-won]
		code, msg := lost.errorCode(t)
		require.Equal(t, "precondition_failed", code)
		require.NotEmpty(t, msg)
		newTag := answers[won].header.Get("ETag")
		require.NotEmpty(t, newTag)
		require.NotEqual(t, tag, newTag, "the change made a new version")
		var env api.Environment
		after := c.do("GET", staging, root, nil)
		after.json(t, &env)
		require.Equal(t, ids[targets[won]], env.ClusterID, "round %d: the read shows the change that was made", round)
		require.Equal(t, newTag, after.header.Get("ETag"), "the PATCH's ETag is the resource's")
	}
}

// A stale If-Match changes nothing, on PATCH, PUT and DELETE; without
// If-Match (or with *) changes are made as before.
func TestIfMatch(t *testing.T) {
	t.Parallel()
	c, root := twoClusters(t)
	read := c.do("GET", staging, root, nil)
	tag := read.header.Get("ETag")
	require.NotEmpty(t, tag)

	// The project changes (a variable), so the tag read before is stale.
	put := c.do("PUT", staging+"/variables", root, map[string]any{"variables": []map[string]any{{"name": "A", "value": "1"}}}, "If-Match", tag)
	require.Equal(t, 200, put.status, string(put.body))
	fresh := put.header.Get("ETag")
	require.NotEqual(t, tag, fresh)
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"PATCH", staging, map[string]any{"cluster": "eu-2"}},
		{"PUT", staging + "/variables", map[string]any{"variables": []map[string]any{{"name": "A", "value": "2"}}}},
		{"DELETE", staging + "/variables/A", nil},
		{"DELETE", staging, nil},
		{"DELETE", "/api/v1/orgs/acme/projects/shop", nil},
	} {
		for _, stale := range []string{tag, `W/` + fresh, `"org-x.1"`, `"project-` + "nope" + `.1"`, "garbage"} {
			r := c.do(tc.method, tc.path, root, tc.body, "If-Match", stale)
			require.Equal(t, http.StatusPreconditionFailed, r.status, "%s %s If-Match %s: %s", tc.method, tc.path, stale, r.body)
			code, _ := r.errorCode(t)
			require.Equal(t, "precondition_failed", code)
		}
	}
	// Nothing changed: the same version, the same variable, the environment there.
	again := c.do("GET", staging, root, nil)
	require.Equal(t, 200, again.status)
	require.Equal(t, fresh, again.header.Get("ETag"))
	var vars []api.Variable
	c.do("GET", staging+"/variables", root, nil).items(t, &vars)
	require.Len(t, vars, 1)
	require.Equal(t, "1", vars[0].Value)

	// Access comes first: without the scope, a stale tag is 403, not 412
	// (nothing learnt of the version), and so is the current one.
	var reader struct {
		Token string `json:"token"`
	}
	c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "reader", "scopes": []string{"projects:read"}}).json(t, &reader)
	require.NotEmpty(t, reader.Token)
	for _, tg := range []string{tag, fresh} {
		r := c.do("PATCH", staging, reader.Token, map[string]any{"cluster": "eu-2"}, "If-Match", tg)
		require.Equal(t, 403, r.status, string(r.body))
	}

	// One of several tags, the current one among them, matches.
	r := c.do("PATCH", staging, root, map[string]any{"cluster": "eu-2"}, "If-Match", tag+", "+fresh)
	require.Equal(t, 200, r.status, string(r.body))
	// * and no If-Match: today's behaviour.
	require.Equal(t, 200, c.do("PATCH", staging, root, map[string]any{"cluster": "eu-1"}, "If-Match", "*").status)
	require.Equal(t, 200, c.do("PATCH", staging, root, map[string]any{"cluster": "eu-2"}).status)
	// DELETE with the current tag deletes.
	cur := c.do("GET", staging, root, nil).header.Get("ETag")
	del := c.do("DELETE", staging+"/variables/A", root, nil, "If-Match", cur)
	require.Equal(t, 200, del.status, string(del.body))
	require.NotEqual(t, cur, del.header.Get("ETag"))
	c.do("GET", staging+"/variables", root, nil).items(t, &vars)
	require.Empty(t, vars)

	// Other streams: the instance settings and a member's role.
	set := c.do("GET", "/api/v1/instance/settings", root, nil)
	require.Regexp(t, `^"instance\.\d+"$`, set.header.Get("ETag"))
	r = c.do("PATCH", "/api/v1/instance/settings", root, map[string]any{"agentAutoUpgrade": false}, "If-Match", set.header.Get("ETag"))
	require.Equal(t, 200, r.status, string(r.body))
	require.Equal(t, 412, c.do("PATCH", "/api/v1/instance/settings", root, map[string]any{"agentAutoUpgrade": true}, "If-Match", set.header.Get("ETag")).status)
	var settings api.InstanceSettings
	c.do("GET", "/api/v1/instance/settings", root, nil).json(t, &settings)
	require.False(t, settings.AgentAutoUpgrade)
	org := c.do("GET", "/api/v1/orgs/acme", root, nil)
	require.Regexp(t, `^"org-[0-9a-f-]+\.\d+"$`, org.header.Get("ETag"))
}

// Every 201 says where the created resource is, also when replayed, and
// the place answers (without the secret a creation shows once).
func TestLocationOfCreatedResources(t *testing.T) {
	t.Parallel()
	c, root := twoClusters(t)
	for _, tc := range []struct {
		path, key string
		body      any
		want      string
		read      bool
	}{
		{"/api/v1/orgs", "o", map[string]any{"name": "beta"}, "/api/v1/orgs/beta", true},
		{"/api/v1/orgs/acme/projects", "p", map[string]any{"name": "web"}, "/api/v1/orgs/acme/projects/web", true},
		{"/api/v1/orgs/acme/clusters", "c", map[string]any{"name": "us-1"}, "/api/v1/orgs/acme/clusters/us-1", true},
		{"/api/v1/orgs/acme/projects/web/environments", "e", map[string]any{"name": "prod", "cluster": "us-1"}, "/api/v1/orgs/acme/projects/web/environments/prod", true},
		{"/api/v1/orgs/acme/projects/shop/services", "s", map[string]any{"name": "api", "image": "registry.example.com/api@sha256:" + strings.Repeat("a", 64)}, "/api/v1/orgs/acme/projects/shop/services/api", true},
		{staging + "/services/api/domains", "d", map[string]any{"host": "API.Example.com"}, staging + "/services/api/domains/api.example.com", true},
		{"/api/v1/orgs/acme/clusters/us-1/join-tokens", "j", map[string]any{"expiresInHours": 1}, "/api/v1/orgs/acme/clusters/us-1/join-tokens/", false},
		{"/api/v1/tokens", "t", map[string]any{"name": "ci", "scopes": []string{"projects:read"}}, "/api/v1/tokens/", false},
		{"/api/v1/users", "u", map[string]any{"email": "bob@example.com", "password": "correct horse battery"}, "/api/v1/users/", false},
		{"/api/v1/orgs/acme/members", "m", map[string]any{"email": "bob@example.com", "role": "member"}, "/api/v1/orgs/acme/members/", false},
	} {
		r := c.do("POST", tc.path, root, tc.body, "Idempotency-Key", tc.key)
		require.Equal(t, 201, r.status, "%s: %s", tc.path, r.body)
		loc := r.header.Get("Location")
		if tc.read {
			require.Equal(t, tc.want, loc)
			require.Equal(t, 200, c.do("GET", loc, root, nil).status, loc)
		} else {
			var created struct {
				ID     string `json:"id"`
				UserID string `json:"userId"`
				Secret string `json:"token"`
			}
			r.json(t, &created)
			id := created.ID
			if tc.path == "/api/v1/orgs/acme/members" {
				id = created.UserID
			}
			require.NotEmpty(t, id)
			require.Equal(t, tc.want+id, loc)
			got := c.do("GET", loc, root, nil)
			require.Equal(t, 200, got.status, "%s: %s", loc, got.body)
			require.Contains(t, string(got.body), id)
			if created.Secret != "" {
				require.NotContains(t, string(got.body), created.Secret, "a secret is shown once, never read back")
			}
		}
		replay := c.do("POST", tc.path, root, tc.body, "Idempotency-Key", tc.key)
		require.Equal(t, 201, replay.status)
		require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
		require.Equal(t, loc, replay.header.Get("Location"), "a replay says where, too")
	}
	s := c.do("POST", "/api/v1/sessions", "", map[string]any{"email": "bob@example.com", "password": "correct horse battery"})
	require.Equal(t, 201, s.status)
	require.Equal(t, "/api/v1/me", s.header.Get("Location"), "a session is the caller of /api/v1/me with its token")
	var session struct {
		Token string `json:"token"`
	}
	s.json(t, &session)
	require.NotEmpty(t, session.Token)
	me := c.do("GET", "/api/v1/me", session.Token, nil)
	require.Equal(t, 200, me.status)
	require.Contains(t, string(me.body), "bob@example.com")
	// Someone else's token is not found, not shown.
	var toks struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	c.do("GET", "/api/v1/tokens", root, nil).json(t, &toks)
	require.NotEmpty(t, toks.Items)
	require.Equal(t, 404, c.do("GET", "/api/v1/tokens/"+toks.Items[0].ID, session.Token, nil).status)
}

// Every list pages with limit and cursor: following next visits every item
// once, in order, also when items come and go between pages.
func TestListsArePaged(t *testing.T) {
	t.Parallel()
	c, root := twoClusters(t)
	var want []string
	for i := range 7 {
		name := "p" + strconv.Itoa(i)
		require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": name}).status)
	}
	var all []api.Project
	whole := c.do("GET", "/api/v1/orgs/acme/projects", root, nil)
	whole.items(t, &all)
	for _, p := range all {
		want = append(want, p.Name)
	}
	require.Len(t, want, 8)
	var page struct {
		Next string `json:"next"`
	}
	whole.json(t, &page)
	require.Empty(t, page.Next, "one page when it fits")

	follow := func(limit int, between func(page int)) []string {
		var got []string
		next := ""
		for n := 0; ; n++ {
			path := "/api/v1/orgs/acme/projects?limit=" + strconv.Itoa(limit)
			if next != "" {
				path += "&cursor=" + next
			}
			r := c.do("GET", path, root, nil)
			require.Equal(t, 200, r.status, string(r.body))
			var p struct {
				Items []api.Project `json:"items"`
				Next  string        `json:"next"`
			}
			r.json(t, &p)
			require.LessOrEqual(t, len(p.Items), limit)
			for _, it := range p.Items {
				got = append(got, it.Name)
			}
			if p.Next == "" {
				return got
			}
			require.Len(t, p.Items, limit, "a page before the last is full")
			next = p.Next
			if between != nil {
				between(n)
			}
		}
	}
	require.Equal(t, want, follow(3, nil))
	require.Equal(t, want, follow(1, nil))
	require.Equal(t, want, follow(8, nil))

	// A project deleted behind the cursor, and one added behind it: no item
	// of the rest is skipped or seen twice.
	got := follow(3, func(n int) {
		if n == 0 {
			require.Equal(t, 204, c.do("DELETE", "/api/v1/orgs/acme/projects/"+want[1], root, nil).status)
			require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "a0"}).status)
		}
	})
	require.Equal(t, want[:3], got[:3])
	require.Equal(t, want[3:], got[3:], "the pages after the cursor")

	// The cursor's own item deleted between pages: the next page starts at
	// the item that followed it.
	all = nil
	c.do("GET", "/api/v1/orgs/acme/projects", root, nil).items(t, &all)
	want = want[:0]
	for _, p := range all {
		want = append(want, p.Name)
	}
	got = follow(3, func(n int) {
		if n == 0 {
			require.Equal(t, 204, c.do("DELETE", "/api/v1/orgs/acme/projects/"+want[2], root, nil).status)
		}
	})
	require.Equal(t, want[:3], got[:3])
	require.Equal(t, want[3:], got[3:], "nothing after the deleted cursor item is skipped")

	// A list paged by PageKey (variables: the same name may stand in two
	// scopes): a variable added before the cursor and one after it, between
	// pages, neither repeat nor skip a row that was there.
	vars := func(names ...string) {
		var in []map[string]any
		for _, n := range names {
			in = append(in, map[string]any{"name": n, "value": "1"})
		}
		require.Equal(t, 200, c.do("PUT", staging+"/variables", root, map[string]any{"variables": in}).status)
	}
	vars("V1", "V3", "V5", "V7")
	var seen []string
	next := ""
	for page := 0; ; page++ {
		path := staging + "/variables?limit=2"
		if next != "" {
			path += "&cursor=" + next
		}
		var p struct {
			Items []api.Variable `json:"items"`
			Next  string         `json:"next"`
		}
		c.do("GET", path, root, nil).json(t, &p)
		for _, v := range p.Items {
			seen = append(seen, v.Name)
		}
		if p.Next == "" {
			break
		}
		next = p.Next
		if page == 0 {
			vars("V0", "V6")
		}
	}
	require.Equal(t, []string{"V1", "V3", "V5", "V6", "V7"}, seen)

	for _, bad := range []string{"?limit=0", "?limit=1001", "?limit=x", "?cursor=!!", "?cursor=e30x"} {
		r := c.do("GET", "/api/v1/orgs/acme/projects"+bad, root, nil)
		require.Equal(t, 400, r.status, bad)
		code, _ := r.errorCode(t)
		require.Equal(t, "invalid_request", code)
	}
}

// The document lists, per operation, the errors it can give and the
// headers and parameters of these contracts.
func TestDocumentedContracts(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	statuses := func(method, path string) []int {
		op := c.doc.Paths.Find(path).GetOperation(method)
		require.NotNil(t, op, "%s %s", method, path)
		var out []int
		for code := range op.Responses.Map() {
			n, err := strconv.Atoi(code)
			require.NoError(t, err)
			out = append(out, n)
		}
		slices.Sort(out)
		return out
	}
	require.Equal(t, []int{200, 400, 401, 422, 500, 503}, statuses("GET", "/api/v1/me"))
	require.Equal(t, []int{201, 400, 401, 413, 415, 422, 429, 500, 503}, statuses("POST", "/api/v1/sessions"))
	require.Equal(t, []int{200, 400, 401, 403, 404, 422, 500, 503}, statuses("GET", "/api/v1/orgs/{org}/projects"))
	require.Equal(t, []int{201, 400, 401, 403, 404, 409, 410, 413, 415, 422, 500, 503}, statuses("POST", "/api/v1/orgs/{org}/projects"))
	require.Equal(t, []int{200, 202, 400, 401, 403, 404, 409, 412, 413, 415, 422, 500, 503},
		statuses("PATCH", "/api/v1/orgs/{org}/projects/{project}/environments/{env}"))

	seen := map[string]bool{}
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if created := op.Responses.Status(201); created != nil {
				require.Contains(t, created.Value.Headers, "Location", "%s %s", method, path)
			}
			hasIfMatch := op.Parameters.GetByInAndName("header", "If-Match") != nil
			require.Equal(t, hasIfMatch, op.Responses.Status(412) != nil, "%s %s: If-Match and 412 go together", method, path)
			if hasIfMatch {
				seen["If-Match"] = true
				if ok := op.Responses.Status(200); ok != nil {
					require.Contains(t, ok.Value.Headers, "ETag", "%s %s", method, path)
				}
			}
			ok := op.Responses.Status(200)
			if ok == nil || ok.Value.Content.Get("application/json") == nil {
				continue
			}
			sch := ok.Value.Content.Get("application/json").Schema
			if sch.Ref == "" || !stringsHasSuffix(sch.Ref, "Page") {
				continue
			}
			seen["page"] = true
			require.NotNil(t, op.Parameters.GetByInAndName("query", "limit"), "%s %s", method, path)
			require.NotNil(t, op.Parameters.GetByInAndName("query", "cursor"), "%s %s", method, path)
			page := c.doc.Components.Schemas[sch.Ref[len("#/components/schemas/"):]]
			require.NotNil(t, page)
			require.Contains(t, page.Value.Properties, "items")
			require.Contains(t, page.Value.Properties, "next")
			require.Equal(t, openapi3.TypeArray, page.Value.Properties["items"].Value.Type.Slice()[0])
		}
	}
	require.True(t, seen["If-Match"] && seen["page"], "%v", seen)
	raw, err := json.Marshal(c.doc.Info.License)
	require.NoError(t, err)
	require.Contains(t, string(raw), `"url"`)
}

func stringsHasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

// A read whose resource's last change the projections have not handled (they
// are stuck at it) is answered as it stands, without an ETag, within a few
// seconds: not refused, and not tagged with a version the body lacks.
func TestReadWithoutETagWhileTheProjectionsAreBehind(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	var org api.Organisation
	read := c.do("GET", "/api/v1/orgs/acme", root, nil)
	read.json(t, &org)
	tag := read.header.Get("ETag")
	require.Regexp(t, `^"org-`+org.ID+`\.\d+"$`, tag)
	v, err := strconv.Atoi(tag[len(`"org-`+org.ID+`.`) : len(tag)-1])
	require.NoError(t, err)

	pool, err := pgxpool.New(t.Context(), s.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	// An event of the organisation's stream that no projection can handle.
	_, err = pool.Exec(t.Context(), `INSERT INTO events (stream_id, stream_version, org_id, event_type, schema_version, payload,
		actor_kind, actor_id, actor_name, request_id, occurred_at)
		VALUES ($1, $2, $3, 'mystery.happened', 1, '{}', 'system', 'test', 'test', 'r', now())`, "org-"+org.ID, v+1, org.ID)
	require.NoError(t, err)

	start := time.Now()
	after := c.do("GET", "/api/v1/orgs/acme", root, nil)
	require.Equal(t, 200, after.status, string(after.body))
	require.Less(t, time.Since(start), 8*time.Second)
	require.Empty(t, after.header.Get("ETag"), "no tag of a version the read model does not show")
	var same api.Organisation
	after.json(t, &same)
	require.Equal(t, org.ID, same.ID)
}
