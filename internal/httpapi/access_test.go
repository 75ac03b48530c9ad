package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// Access that is taken away ends at once, for a stream too: an organisation
// audit stream opened on one replica stops delivering the moment its
// principal loses access through the other replica (removed from the
// organisation, the token revoked, signed out, the role lowered below
// audit:read). Nothing that happens afterwards reaches it, not even the
// entry of the change itself, and the server ends the stream when it next
// has something to send.
func TestStreamsEndWhenAccessEnds(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{})
	b := servertest.Start(t, servertest.Options{DatabaseURL: a.DatabaseURL, SecretKey: a.SecretKey})
	ca, cb := newClient(t, a), newClient(t, b)
	root := a.Setup(t, "root@example.com", "acme")
	must := func(r response, status int) response {
		t.Helper()
		require.Equal(t, status, r.status, string(r.body))
		return r
	}
	project := 0
	newProject := func() string {
		project++
		name := "p" + strings.Repeat("x", project)
		must(ca.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": name}), http.StatusCreated)
		return "acme/" + name
	}

	var session, tokenID string // the user's own session and API token, in the token case
	cases := []struct {
		name string
		// open returns the token the stream reads with; take ends its access.
		open func(t *testing.T, id, email string) string
		take func(t *testing.T, id, token string)
	}{
		{"removed from the organisation", nil, func(t *testing.T, id, _ string) {
			must(ca.do("DELETE", "/api/v1/orgs/acme/members/"+id, root, nil), http.StatusNoContent)
		}},
		{"role lowered below audit:read", nil, func(t *testing.T, id, _ string) {
			must(ca.do("PATCH", "/api/v1/orgs/acme/members/"+id, root, map[string]any{"role": "member"}), http.StatusOK)
		}},
		{"signed out", nil, func(t *testing.T, _, token string) {
			must(ca.do("DELETE", "/api/v1/sessions/current", token, nil), http.StatusNoContent)
		}},
		{"token revoked", func(t *testing.T, _, email string) string {
			session = login(t, ca, email)
			var tok api.CreatedToken
			must(ca.do("POST", "/api/v1/tokens", session, map[string]any{"name": "reader", "scopes": []string{"audit:read"}}),
				http.StatusCreated).json(t, &tok)
			tokenID = tok.ID
			return tok.Secret
		}, func(t *testing.T, _, _ string) {
			must(ca.do("DELETE", "/api/v1/tokens/"+tokenID, session, nil), http.StatusNoContent)
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			email := "admin" + strings.Repeat("i", i+1) + "@example.com"
			var u api.User
			must(ca.do("POST", "/api/v1/users", root, map[string]any{"email": email, "password": "correct horse battery staple"}), http.StatusCreated).json(t, &u)
			must(ca.do("POST", "/api/v1/orgs/acme/members", root, map[string]any{"email": email, "role": "admin"}), http.StatusCreated)
			token := login(t, ca, email)
			if tc.open != nil {
				token = tc.open(t, u.ID, email)
			}
			s := cb.openStream(t, "/api/v1/orgs/acme/audit/events", token, "")
			before := newProject()
			require.Equal(t, before, auditOf(t, s).Target.Name, "the stream works before")

			tc.take(t, u.ID, token)
			after := newProject()
			select {
			case <-s.ended:
			case e := <-s.events:
				t.Fatalf("after access ended the stream delivered %s %s", e.name, e.data)
			case <-time.After(10 * time.Second):
				t.Fatalf("the stream did not end when it had %s to send; so far:\n%s", after, s.raw.String())
			}
			require.Empty(t, s.events, "nothing after access ended")
			require.Contains(t, s.raw.String(), ": the stream ends: ")
			require.NotContains(t, s.raw.String(), after)
			s.validate()
			// And a new stream is refused.
			r := cb.do("GET", "/api/v1/orgs/acme/audit/events", token, nil)
			require.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound}, r.status, string(r.body))
		})
	}
}
