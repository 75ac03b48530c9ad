package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// Four eyes in the console as in the API: whoever opened a change set can
// neither approve nor reject it, even by posting the form the page hides
// from them; someone else can.
func TestOpenerCannotDecideTheirOwnChangeSet(t *testing.T) {
	t.Parallel()
	reg := registrytest.Start(t, "api:v1", "api:v2")
	srv := servertest.Start(t, servertest.Options{Insecure: []string{reg}})
	ada := srv.Setup(t, "ada@example.com", "acme")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", ada, map[string]any{"email": "bob@example.com", "password": password}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", ada, map[string]any{"email": "bob@example.com", "role": "admin"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", ada, map[string]any{"name": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", ada, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/environments", ada,
		map[string]any{"name": "production", "cluster": "eu-1", "protected": true}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/services", ada,
		map[string]any{"name": "api", "image": reg + "/api:v1"}, nil))
	env := "/api/v1/orgs/acme/projects/shop/environments/production"
	var res struct{ ChangeSet *api.ChangeSet }
	require.Equal(t, http.StatusAccepted, apiCall(t, "POST", srv.URL+env+"/services/api/deployments", ada, map[string]any{"image": reg + "/api:v2"}, &res))
	require.NotNil(t, res.ChangeSet)
	page := "/o/acme/p/shop/e/production/changesets/" + res.ChangeSet.ID

	status := func(token string) string {
		var cs api.ChangeSet
		require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+env+"/changesets/"+res.ChangeSet.ID, token, nil, &cs))
		return cs.Status
	}
	opener := newWebClient(t, srv.URL)
	resp, _ := opener.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	csrf := opener.csrf(page)
	for _, d := range []struct {
		decision string
		form     url.Values
	}{{"reject", url.Values{"reason": {"never mind"}}}, {"approve", url.Values{"version": {"1"}}}} {
		got := opener.status(consoleRoute{"POST " + page + "/" + d.decision, page + "/" + d.decision, d.form, ""}, csrf)
		require.Equal(t, http.StatusForbidden, got, "the opener's %s is refused, not redirected as done", d.decision)
		require.Equal(t, "open", status(ada), "nothing changed")
	}

	other := newWebClient(t, srv.URL)
	resp, _ = other.signIn("bob@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	got := other.status(consoleRoute{"POST " + page + "/reject", page + "/reject", url.Values{"reason": {"not now"}}, ""}, other.csrf(page))
	require.Equal(t, http.StatusSeeOther, got, "someone else's rejection is done")
	require.Equal(t, "rejected", status(ada))
}
