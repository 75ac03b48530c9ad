package console_test

import (
	"fmt"
	"html"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// TestAuditLaterEntriesKeepTheFilter: the audit page's "Later entries" link
// carries the page's filters with the cursor, so that the next page is the
// same filtered log (the template once escaped the whole query into one
// parameter: the next page lost its filters and showed every entry).
func TestAuditLaterEntriesKeepTheFilter(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	admin := srv.Setup(t, "ada@example.com", "acme")
	// 101 entries that match the filter (the page shows 100), then one
	// that does not.
	for i := range 101 {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", admin, map[string]any{"name": fmt.Sprintf("p%03d", i)}, nil))
	}
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", admin, map[string]any{"name": "eu-1"}, nil))

	ada := newWebClient(t, srv.URL)
	resp, _ := ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	resp, page := ada.get("/o/acme/audit?action=project.create")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 100, strings.Count(page, "<code>project.create</code>"))
	m := regexp.MustCompile(`<a href="([^"]+)">Later entries</a>`).FindStringSubmatch(page)
	require.NotNil(t, m, "a full page links to the later entries")
	later := html.UnescapeString(m[1])
	require.Contains(t, later, "action=project.create", "the link keeps the filter as a parameter")
	require.Contains(t, later, "cursor=")

	resp, page = ada.get(later)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `name="action" value="project.create"`, "the later page shows its filter")
	require.Equal(t, 1, strings.Count(page, "<code>project.create</code>"), "the 101st entry")
	require.NotContains(t, page, "<code>cluster.create</code>", "an entry the filter excludes is not on the later page")
	require.Contains(t, page, "p100")
}
