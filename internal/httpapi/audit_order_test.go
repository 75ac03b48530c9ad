package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// The audit log lists the latest entries first with ?order=newest, its
// cursor going back in time, page after page, until the first entry.
func TestAuditNewestFirst(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	c := newClient(t, srv)
	root := srv.Setup(t, "root@example.com", "acme")
	for i := range 7 {
		require.Equal(t, http.StatusCreated, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": fmt.Sprintf("p%d", i)}).status)
	}
	var all api.AuditPage
	c.do("GET", "/api/v1/orgs/acme/audit?limit=1000", root, nil).json(t, &all)
	var got []int64
	cursor := ""
	for range 10 {
		var page api.AuditPage
		r := c.do("GET", "/api/v1/orgs/acme/audit?order=newest&limit=3"+cursor, root, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.json(t, &page)
		for _, e := range page.Items {
			got = append(got, e.Seq)
		}
		if page.Next == "" {
			break
		}
		cursor = "&cursor=" + page.Next
	}
	var want []int64
	for i := len(all.Items) - 1; i >= 0; i-- {
		want = append(want, all.Items[i].Seq)
	}
	require.Equal(t, want, got, "every entry once, newest first")
	require.Equal(t, "acme/p6", all.Items[len(all.Items)-1].Target.Name)
	code, _ := c.do("GET", "/api/v1/orgs/acme/audit?order=sideways", root, nil).errorCode(t)
	require.Equal(t, "invalid_request", code)
}
