package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
)

type auditData struct {
	Entries                             []api.AuditEntry
	Actor, Action, Target, Since, Until string
	Next                                string
	Query                               string
	// Later is the address of the next page: the filters and the cursor,
	// built here (html/template would escape a query written into the
	// href's query part as a single value, losing the filters).
	Later string
	// Live is the address of the organisation's audit stream, filtered as
	// the page and starting after its last row, when the page is the end
	// of the log (no next page, no until): new rows are added as they
	// happen. "" when the page is not live.
	Live string
}

func (c *Console) auditPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d := auditData{Actor: q.Get("actor"), Action: q.Get("action"), Target: q.Get("target"), Since: q.Get("since"), Until: q.Get("until")}
	aq := url.Values{}
	for k, v := range map[string]string{"actor": d.Actor, "action": d.Action, "target": d.Target, "since": d.Since, "until": d.Until, "cursor": q.Get("cursor")} {
		if v != "" {
			aq.Set(k, v)
		}
	}
	aq.Set("limit", "100")
	var page api.AuditPage
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/audit?"+aq.Encode()), nil, &page); err != nil {
		if ae, ok := asAPIError(err); ok && ae.Status < 500 && ae.Status != http.StatusForbidden && ae.Status != http.StatusNotFound {
			c.render(w, r, ae.Status, "audit", c.view(r, s, "Audit log", &d, ae.Message))
			return
		}
		c.fail(w, r, s, err)
		return
	}
	d.Entries, d.Next = page.Items, page.Next
	aq.Del("limit")
	aq.Del("cursor")
	d.Query = aq.Encode()
	if d.Next != "" {
		lq := url.Values{}
		for k, v := range aq {
			lq[k] = v
		}
		lq.Set("cursor", d.Next)
		d.Later = "/o/" + esc(r.PathValue("org")) + "/audit?" + lq.Encode()
	}
	if d.Next == "" && d.Until == "" {
		// The stream is filtered as the list (since too), so that starting
		// after the last row shown (or the cursor, or the beginning when no
		// entry matches) loses nothing between the page and the stream.
		lq := url.Values{}
		for _, k := range []string{"actor", "action", "target", "since"} {
			if v := aq.Get(k); v != "" {
				lq.Set(k, v)
			}
		}
		last := q.Get("cursor")
		if n := len(d.Entries); n > 0 {
			last = strconv.FormatInt(d.Entries[n-1].Seq, 10)
		}
		if last == "" {
			last = "0"
		}
		lq.Set("lastEventId", last)
		d.Live = "/o/" + esc(r.PathValue("org")) + "/audit/events?" + lq.Encode()
	}
	c.render(w, r, http.StatusOK, "audit", c.view(r, s, "Audit log", &d, ""))
}

// auditEvents is the API's audit stream of the organisation, for the audit
// page's script: with the page's filters and where the page ended (the
// browser's Last-Event-ID, when it reconnects, wins over lastEventId).
func (c *Console) auditEvents(w http.ResponseWriter, r *http.Request, s *session) {
	q := url.Values{}
	for _, k := range []string{"actor", "action", "target", "since", "lastEventId"} {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	p := apiPath(r, "/audit/events")
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	c.stream(w, r, s.token, p)
}

// auditLink is the console page of an audit log entry's target in the
// organisation org ("" when it has none, or the name is not a path).
func auditLink(org string, e api.AuditEntry) string {
	parts := strings.Split(e.Target.Name, "/")
	if len(parts) < 2 || parts[0] != org || slices.Contains(parts, "") {
		return ""
	}
	p := func(segs ...string) string {
		var b strings.Builder
		for _, s := range segs {
			b.WriteString("/" + url.PathEscape(s))
		}
		return b.String()
	}
	switch {
	case e.Target.Kind == "project" && len(parts) == 2,
		e.Target.Kind == "service" && len(parts) == 4:
		return p("o", org, "p", parts[1])
	case e.Target.Kind == "environment" && len(parts) == 3:
		return p("o", org, "p", parts[1], "e", parts[2])
	case e.Target.Kind == "deployment-target" && len(parts) == 4:
		return p("o", org, "p", parts[1], "e", parts[2], "s", parts[3])
	case e.Target.Kind == "deployment" && len(parts) == 4 && e.Target.ID != "":
		return p("o", org, "p", parts[1], "e", parts[2], "s", parts[3], "d", e.Target.ID)
	case e.Target.Kind == "changeset" && len(parts) == 3 && e.Target.ID != "":
		return p("o", org, "p", parts[1], "e", parts[2], "changesets", e.Target.ID)
	case (e.Target.Kind == "cluster" && len(parts) == 2) || (e.Target.Kind == "server" && len(parts) == 3):
		return p("o", org, "servers")
	}
	return ""
}
