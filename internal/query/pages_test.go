package query_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/query"
)

// pageAll reads a list page by page (limit+1 rows, the last telling whether
// there is more) and returns the ids in the order read.
func pageAll(t *testing.T, limit int, read func(after string, limit int) []string, between func(page int)) []string {
	t.Helper()
	var out []string
	after := ""
	for page := 0; ; page++ {
		ids := read(after, limit+1)
		require.LessOrEqual(t, len(ids), limit+1)
		if len(ids) <= limit {
			return append(out, ids...)
		}
		out = append(out, ids[:limit]...)
		after = ids[limit-1]
		if between != nil {
			between(page)
		}
	}
}

// Deployments, releases and change sets read a page at a time visit every
// row once, in the order of the whole list, rows with equal times included,
// also while newer rows are added between pages.
func TestListsPageInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHistory(t)
	var rel []string
	for n := 1; n <= 9; n++ {
		// Three releases share each time: the order falls back on number, then id.
		rel = append(rel, h.release(h.prod, h.api, n, "api:x", `{"processes":[],"variables":[]}`, 10+n/3))
		h.deployment(h.prod, h.api, rel[len(rel)-1], "succeeded", "", 100+n/4)
	}
	h.release(h.stg, h.api, 1, "api:x", `{"processes":[],"variables":[]}`, 10)
	changeset := func(opened int) {
		h.exec(`INSERT INTO changesets (id, org_id, project_id, environment_id, status, description, changes, opened_by, opened_at, decided_by)
			VALUES ($1, $2, $3, $4, 'open', 'x', '[]', 'alice-id', $5, '')`, id(), h.org, h.project, h.prod, at(opened))
	}
	for n := range 8 {
		changeset(50 + n/3)
	}

	releases := func(after string, limit int) []string {
		rs, err := query.ReleasesAfter(ctx, h.pool, h.prod, h.api, after, limit)
		require.NoError(t, err)
		return releaseIDs(rs)
	}
	whole, err := query.Releases(ctx, h.pool, h.prod, h.api)
	require.NoError(t, err)
	require.Len(t, whole, 9)
	for _, limit := range []int{1, 2, 4, 9, 20} {
		require.Equal(t, releaseIDs(whole), pageAll(t, limit, releases, nil), "releases by %d", limit)
	}

	deployments := func(after string, limit int) []string {
		ds, err := query.DeploymentsAfter(ctx, h.pool, h.prod, h.api, after, limit)
		require.NoError(t, err)
		return deploymentIDs(ds)
	}
	wholeD, err := query.Deployments(ctx, h.pool, h.prod, h.api, 0)
	require.NoError(t, err)
	require.Len(t, wholeD, 9)
	for _, limit := range []int{1, 2, 4, 9} {
		require.Equal(t, deploymentIDs(wholeD), pageAll(t, limit, deployments, nil), "deployments by %d", limit)
	}
	// Newer deployments arrive while the pages are read: the rest of the
	// list, older than the cursor, is read as it was.
	got := pageAll(t, 2, deployments, func(page int) {
		h.deployment(h.prod, h.api, rel[0], "requested", "", 200+page)
	})
	require.Equal(t, deploymentIDs(wholeD), got)

	changeSets := func(after string, limit int) []string {
		cs, err := query.ChangeSetsAfter(ctx, h.pool, h.prod, "open", after, limit)
		require.NoError(t, err)
		return changeSetIDs(cs)
	}
	wholeC, err := query.ChangeSets(ctx, h.pool, h.prod, "open")
	require.NoError(t, err)
	require.Len(t, wholeC, 8)
	for _, limit := range []int{1, 3, 8} {
		require.Equal(t, changeSetIDs(wholeC), pageAll(t, limit, changeSets, nil), "change sets by %d", limit)
	}

	// An id that is not one, or names nothing of the list: an empty page.
	for _, after := range []string{"nope", id()} {
		require.Empty(t, releases(after, 5))
		require.Empty(t, deployments(after, 5))
		require.Empty(t, changeSets(after, 5))
	}
}
