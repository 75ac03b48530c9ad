package console_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// The overview's recent activity is the organisation's latest entries, not
// its first ten.
func TestOverviewShowsTheLatestActivity(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	ada := srv.Setup(t, "ada@example.com", "acme")
	for i := range 15 {
		require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", ada, map[string]any{"name": fmt.Sprintf("project-%02d", i)}, nil))
	}
	w := newWebClient(t, srv.URL)
	resp, _ := w.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, err := w.http.Get(srv.URL + "/o/acme")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	page := string(b)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "acme/project-14", "the latest entry is there")
	require.NotContains(t, page, "acme/project-00", "the oldest is not")
}
