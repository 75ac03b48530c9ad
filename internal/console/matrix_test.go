package console_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// TestProjectMatrixAndOverview: the project page's cells (from the API's
// project matrix) show each service's release, deployment status and
// blocker, and a held service with its reason; the overview lists the
// organisation's deployments in progress (from the API's list of them).
func TestProjectMatrixAndOverview(t *testing.T) {
	regHost := registrytest.Start(t)
	srv := servertest.Start(t, servertest.Options{Insecure: []string{regHost}})
	admin := srv.Setup(t, "ada@example.com", "acme")
	shop := srv.URL + "/api/v1/orgs/acme/projects/shop"
	img := regHost + "/api:v1"
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{srv.URL + "/api/v1/orgs/acme/clusters", map[string]any{"name": "eu-1"}},
		{srv.URL + "/api/v1/orgs/acme/projects", map[string]any{"name": "shop"}},
		{shop + "/environments", map[string]any{"name": "staging", "cluster": "eu-1"}},
		{shop + "/environments", map[string]any{"name": "production", "cluster": "eu-1"}},
		{shop + "/services", map[string]any{"name": "api", "image": img}},
		{shop + "/services", map[string]any{"name": "db", "image": img}},
	} {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", c.path, admin, c.body, nil), c.path)
	}
	st := shop + "/environments/staging/services/"
	require.Equal(t, http.StatusOK, apiCall(t, "PUT", st+"db/variables", admin, map[string]any{"variables": []map[string]any{{"name": "URL", "value": "postgres://db"}}}, nil))
	require.Equal(t, http.StatusOK, apiCall(t, "PUT", st+"api/variables", admin, map[string]any{"variables": []map[string]any{{"name": "DB_URL", "value": "${{ db.URL }}"}}}, nil))
	for _, s := range []string{"api", "db"} {
		require.Equal(t, http.StatusAccepted, apiCall(t, "POST", st+s+"/deployments", admin, map[string]any{}, nil))
	}

	ada := newWebClient(t, srv.URL)
	resp, _ := ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	cellOf := func(page, key string) string {
		t.Helper()
		m := regexp.MustCompile(`data-cell="` + regexp.QuoteMeta(key) + `"[\s\S]*?</td>`).FindString(page)
		require.NotEmpty(t, m, "a cell %s in the matrix", key)
		return m
	}
	project := func() string {
		t.Helper()
		resp, page := ada.get("/o/acme/p/shop")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return page
	}

	// No agent: the deployments stay in progress, blocked on delivery.
	require.Eventually(t, func() bool {
		return strings.Contains(cellOf(project(), "api/staging"), "blocked: delivery")
	}, 20*time.Second, 50*time.Millisecond)
	page := project()
	cell := cellOf(page, "api/staging")
	require.Contains(t, cell, "release 1")
	require.Regexp(t, `badge st-(requested|delivering)`, cell)
	require.NotContains(t, cell, "held:")
	require.Contains(t, cellOf(page, "api/production"), "not deployed")
	require.NotContains(t, cellOf(page, "api/production"), "badge st-")
	require.Contains(t, cellOf(page, "db/staging"), "release 1")

	_, overview := ada.get("/o/acme")
	progress := regexp.MustCompile(`<ul id="in-progress">[\s\S]*?</ul>`).FindString(overview)
	require.Contains(t, progress, "api in shop/staging: release 1")
	require.Contains(t, progress, "db in shop/staging: release 1")
	require.Contains(t, progress, "blocked: delivery")

	// Deleting db holds api in staging: the cell says why.
	require.Equal(t, http.StatusNoContent, apiCall(t, "DELETE", shop+"/services/db", admin, nil, nil))
	require.Eventually(t, func() bool {
		return strings.Contains(cellOf(project(), "api/staging"), "held:")
	}, 20*time.Second, 50*time.Millisecond)
	page = project()
	require.Regexp(t, `held: [^<]*db[^<]*deleted`, cellOf(page, "api/staging"))
	require.NotContains(t, page, `data-cell="db/`, "a deleted service leaves the matrix")
	_, overview = ada.get("/o/acme")
	require.NotContains(t, overview, "db in shop/staging", "a deleted service's deployment is not in progress")
	require.Contains(t, overview, "api in shop/staging")
}
