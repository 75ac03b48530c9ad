package httpapi_test

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/stretchr/testify/require"
)

// Four-eyes without exceptions (found from outside: a Member deleted a
// service or the whole project of a protected environment at once, an Admin
// turned protection off with one PATCH, an Admin demoted an Owner).
func TestFourEyesHasNoLoopholes(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	c := r.c
	const pw = "correct horse battery staple"
	session := func(email string) string {
		t.Helper()
		var s struct{ Token string }
		r.must(c.do("POST", "/api/v1/sessions", "", map[string]any{"email": email, "password": pw}), 201).json(t, &s)
		return s.Token
	}
	for email, role := range map[string]string{"admin@example.com": "admin", "member@example.com": "member"} {
		r.must(c.do("POST", "/api/v1/users", r.root, map[string]any{"email": email, "password": pw}), 201)
		r.must(c.do("POST", "/api/v1/orgs/acme/members", r.root, map[string]any{"email": email, "role": role}), 201)
	}
	admin, member := session("admin@example.com"), session("member@example.com")
	const prod = "/api/v1/orgs/acme/projects/shop/environments/production"

	// The service runs in production (its deploy approved by someone else).
	var res struct{ ChangeSet *api.ChangeSet }
	r.must(c.do("POST", prod+"/services/api/deployments", member, map[string]any{}), 202).json(t, &res)
	require.NotNil(t, res.ChangeSet)
	r.must(c.do("POST", prod+"/changesets/"+res.ChangeSet.ID+"/approve", admin, map[string]any{"version": res.ChangeSet.Version}), 200)

	waits := func(method, path, token string, body any) api.ChangeSet {
		t.Helper()
		var cs api.ChangeSet
		r.must(c.do(method, path, token, body), 202).json(t, &cs)
		require.Equal(t, "open", cs.Status)
		return cs
	}
	// A Member deletes the service: it waits; the Member cannot approve it.
	cs := waits("DELETE", "/api/v1/orgs/acme/projects/shop/services/api", member, nil)
	r.must(c.do("GET", "/api/v1/orgs/acme/projects/shop/services/api", r.root, nil), 200)
	r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/approve", member, map[string]any{"version": cs.Version}), 403)
	// Nor reject it: a decision, either way, is someone else's (the entry
	// would read "rejected by" the person who asked).
	code, _ := r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/reject", member, map[string]any{"reason": "never mind"}), 403).errorCode(t)
	require.Equal(t, "forbidden", code)
	var still api.ChangeSet
	r.must(c.do("GET", prod+"/changesets/"+cs.ID, r.root, nil), 200).json(t, &still)
	require.Equal(t, "open", still.Status, "a refused rejection changes nothing")
	r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/reject", admin, map[string]any{"reason": "keep it"}), 200)

	// The whole project: waits too.
	cs = waits("DELETE", "/api/v1/orgs/acme/projects/shop", admin, nil)
	r.must(c.do("GET", "/api/v1/orgs/acme/projects/shop", r.root, nil), 200)
	r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/reject", r.root, nil), 200)

	// Turning protection off with one PATCH: waits for someone else.
	cs = waits("PATCH", prod, admin, map[string]any{"protected": false})
	var env api.Environment
	r.must(c.do("GET", prod, r.root, nil), 200).json(t, &env)
	require.True(t, env.Protected)
	r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/approve", admin, map[string]any{"version": cs.Version}), 403)
	r.must(c.do("POST", prod+"/changesets/"+cs.ID+"/approve", r.root, map[string]any{"version": cs.Version}), 200)
	r.must(c.do("GET", prod, r.root, nil), 200).json(t, &env)
	require.False(t, env.Protected, "approved by someone else, it happens")

	// An Admin cannot demote or remove an Owner, nor make one.
	var me struct {
		User struct{ ID string } `json:"user"`
	}
	r.must(c.do("GET", "/api/v1/me", r.root, nil), 200).json(t, &me)
	require.NotEmpty(t, me.User.ID)
	r.must(c.do("PATCH", "/api/v1/orgs/acme/members/"+me.User.ID, admin, map[string]any{"role": "member"}), 403)
	r.must(c.do("DELETE", "/api/v1/orgs/acme/members/"+me.User.ID, admin, nil), 403)
	var members []api.Member
	r.must(c.do("GET", "/api/v1/orgs/acme/members", r.root, nil), 200).items(t, &members)
	for _, m := range members {
		if m.Role == "member" {
			r.must(c.do("PATCH", "/api/v1/orgs/acme/members/"+m.UserID, admin, map[string]any{"role": "owner"}), 403)
		}
	}
	// The last Owner cannot be removed, not even by themself.
	r.must(c.do("DELETE", "/api/v1/orgs/acme/members/"+me.User.ID, r.root, nil), 409)
}
