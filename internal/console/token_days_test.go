package console_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// TestTokenFormRefusesBadExpiry: Settings' token form with an expiry that
// is not a whole number of days from 1 is refused with a clear error and
// makes no token (it read "abc" or "0" as no expiry and made a token that
// never expires); a good one makes a token that expires.
func TestTokenFormRefusesBadExpiry(t *testing.T) {
	srv := servertest.Start(t, servertest.Options{})
	srv.Setup(t, "ada@example.com", "acme")
	ada := newWebClient(t, srv.URL)
	resp, _ := ada.signIn("ada@example.com", password)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	session := sessionCookie(t, resp).Value
	token := ada.csrf("/o/acme/settings")

	type tok struct {
		Name      string
		ExpiresAt *string
	}
	tokens := func() []tok {
		var out struct{ Items []tok }
		require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/tokens", session, nil, &out))
		return out.Items
	}
	for _, days := range []string{"abc", "0", "-3", "1.5", "99999999999999999999999"} {
		resp, page := ada.post("/o/acme/settings/tokens", url.Values{"name": {"ci-" + days}, "scope": {"projects:read"}, "days": {days}, "csrf": {token}}, nil)
		require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "days %q", days)
		require.Contains(t, page, "whole number of days", "days %q", days)
		require.NotContains(t, page, `id="new-token-value"`, "days %q", days)
		for _, tk := range tokens() {
			require.NotEqual(t, "ci-"+days, tk.Name, "days %q made a token", days)
		}
	}
	resp, page := ada.post("/o/acme/settings/tokens", url.Values{"name": {"ci"}, "scope": {"projects:read"}, "days": {" 30 "}, "csrf": {token}}, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `id="new-token-value"`)
	found := false
	for _, tk := range tokens() {
		if tk.Name == "ci" {
			found = true
			require.NotNil(t, tk.ExpiresAt, "a token made with days expires")
		}
	}
	require.True(t, found)
}
