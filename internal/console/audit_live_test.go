package console_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// TestAuditLogIsLive opens the audit log page in headless Chromium and
// changes things through the API meanwhile: each new entry of the
// organisation appears as a row without a reload (linked to its target),
// another organisation's never does, and a filter chosen on the page
// applies to the rows that arrive after it.
func TestAuditLogIsLive(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0"})
	admin := srv.Setup(t, "ada@example.com", "acme")
	// ada is in globex too: the acme page must still show acme's only.
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs", admin, map[string]any{"name": "globex"}, nil))
	project := func(org, name string) {
		t.Helper()
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/"+org+"/projects", admin, map[string]any{"name": name}, nil))
	}
	row := func(target string) string {
		return `[...document.querySelectorAll('#audit-body tr')].some(tr => tr.innerText.includes(` + jsString(target) + `))`
	}

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", "/o/acme/audit", "#audit")
	require.True(t, b.has("#audit-live"), "the end of the log is live")
	eval[bool](b, "window.__notReloaded = true; true")
	before := eval[int](b, "document.querySelectorAll('#audit-body tr').length")

	project("acme", "live-shop")
	project("globex", "hidden-plans")
	project("acme", "after")
	b.waitJS(row("acme/live-shop")+" && "+row("acme/after"), "the new entries as rows")
	require.True(t, eval[bool](b, "window.__notReloaded === true"), "the rows came without a reload")
	require.False(t, eval[bool](b, row("globex/hidden-plans")), "another organisation's entry never arrives")
	require.Equal(t, before+2, eval[int](b, "document.querySelectorAll('#audit-body tr').length"), "each entry once")
	require.Equal(t, "/o/acme/p/live-shop", eval[string](b,
		`[...document.querySelectorAll('#audit-body tr')].find(tr => tr.innerText.includes('acme/live-shop')).querySelector('a').getAttribute('href')`),
		"a live row links to its target")
	require.Equal(t, "project.create", eval[string](b, `document.querySelector('#audit-body tr:last-child td:nth-child(3)').innerText`))
	b.visit("audit-live")

	// A filter (htmx swaps the rows, with a stream of their own).
	b.fill("#f-target", "acme/billing")
	b.do(chromedp.Click(chromedp.CSS("#filter")))
	b.waitJS(`location.search.includes('target=acme') && document.querySelector('#audit-empty') && document.querySelector('#audit-live')`, "the filtered, empty, live rows")
	require.True(t, eval[bool](b, "window.__notReloaded === true"))
	project("acme", "other")
	project("acme", "billing")
	b.waitJS(row("acme/billing"), "the filtered entry as a row")
	require.False(t, b.has("#audit-empty"), "the empty state goes with the first row")
	require.False(t, eval[bool](b, row("acme/other")), "an entry the filter leaves out never arrives")
	require.Equal(t, 1, eval[int](b, "document.querySelectorAll('#audit-body tr').length"))
	require.True(t, eval[bool](b, "window.__notReloaded === true"), "the rows came without a reload")
}
