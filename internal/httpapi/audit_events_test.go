package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// auditOf reads an organisation audit stream's next event as an entry.
func auditOf(t *testing.T, s *stream) api.AuditEntry {
	t.Helper()
	e := s.next()
	require.Equal(t, "audit", e.name, "%s", e.data)
	var a api.AuditEntry
	require.NoError(t, json.Unmarshal(e.data, &a))
	require.Equal(t, strconv.FormatInt(a.Seq, 10), e.id, "an audit event's id is its seq")
	return a
}

// An organisation's live audit log: each new entry of the organisation
// arrives as an event (another organisation's never), in seq order;
// Last-Event-ID resumes after an entry with nothing lost or repeated; the
// list's filters apply; the scope is audit:read.
func TestOrganisationAuditEventStream(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, servertest.Options{})
	c := newClient(t, srv)
	root := srv.Setup(t, "root@example.com", "acme")
	must := func(r response, status int) response {
		t.Helper()
		require.Equal(t, status, r.status, string(r.body))
		return r
	}
	must(c.do("POST", "/api/v1/users", root, map[string]any{"email": "other@example.com", "password": "correct horse battery staple"}), 201)
	other := login(t, c, "other@example.com")
	must(c.do("POST", "/api/v1/orgs", other, map[string]any{"name": "globex"}), 201)

	const events = "/api/v1/orgs/acme/audit/events"
	all := c.openStream(t, events, root, "")
	only := c.openStream(t, events+"?target=acme/billing", root, "")
	// Entries of acme and of globex, interleaved.
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}), 201)
	must(c.do("POST", "/api/v1/orgs/globex/projects", other, map[string]any{"name": "secret-plans"}), 201)
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "billing"}), 201)
	must(c.do("POST", "/api/v1/orgs/globex/projects", other, map[string]any{"name": "more-plans"}), 201)

	first := auditOf(t, all)
	require.Equal(t, "acme/shop", first.Target.Name, "%+v", first)
	second := auditOf(t, all)
	require.Equal(t, "acme/billing", second.Target.Name, "the other organisation's entry in between never arrives: %+v", second)
	require.Greater(t, second.Seq, first.Seq)
	select {
	case e := <-all.events:
		t.Fatalf("nothing more of acme, and nothing of globex: %s %s", e.name, e.data)
	case <-time.After(1500 * time.Millisecond):
	}
	all.close()
	all.validate()

	// The filter: only the billing project's entry.
	filtered := auditOf(t, only)
	require.Equal(t, second.Seq, filtered.Seq, "%+v", filtered)
	only.close()
	only.validate()

	// Resumed after the first entry: the second, then what comes next.
	resumed := c.openStream(t, events, root, strconv.FormatInt(first.Seq, 10))
	require.Equal(t, second.Seq, auditOf(t, resumed).Seq, "resumed after %d: nothing lost, nothing repeated", first.Seq)
	must(c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "web"}), 201)
	require.Equal(t, "acme/web", auditOf(t, resumed).Target.Name)
	resumed.close()
	resumed.validate()

	// The stream's entries are the list's.
	var page api.AuditPage
	must(c.do("GET", "/api/v1/orgs/acme/audit?cursor="+strconv.FormatInt(first.Seq-1, 10)+"&limit=2", root, nil), 200).json(t, &page)
	require.Len(t, page.Items, 2)
	require.Equal(t, []int64{first.Seq, second.Seq}, []int64{page.Items[0].Seq, page.Items[1].Seq})
	require.Equal(t, strconv.FormatInt(second.Seq, 10), page.Next, "a full page has a next")

	// Bad input and scopes.
	r := c.do("GET", events, root, nil, "Last-Event-ID", "yesterday")
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	r = c.do("GET", events+"?since=yesterday", root, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	r = c.do("GET", "/api/v1/orgs/acme/audit?cursor=abc", root, nil)
	require.Equal(t, http.StatusBadRequest, r.status, string(r.body))
	require.Equal(t, http.StatusNotFound, c.do("GET", events, other, nil).status, "globex's owner does not see acme")
	var reader api.CreatedToken
	must(c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "reader", "scopes": []string{"projects:read"}}), 201).json(t, &reader)
	r = c.do("GET", events, reader.Secret, nil)
	require.Equal(t, http.StatusForbidden, r.status, string(r.body))
	_, msg := r.errorCode(t)
	require.Contains(t, msg, "audit:read")
}
