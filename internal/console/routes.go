package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
)

// Routes lists the console's routes ("METHOD PATTERN"), for the
// authorisation matrix test.
func (c *Console) Routes() []string { return slices.Clone(c.patterns) }

// recorder registers routes on the console's mux and remembers them.
type recorder struct{ c *Console }

func (r recorder) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	r.c.patterns = append(r.c.patterns, pattern)
	r.c.mux.HandleFunc(pattern, h)
}

func (c *Console) routes() {
	m := recorder{c}
	m.HandleFunc("GET /static/{hash}/{file}", c.serveStatic)
	m.HandleFunc("GET /signin", c.signInPage)
	m.HandleFunc("POST /signin", c.signIn)
	m.HandleFunc("POST /signout", c.authed(c.signOut))
	m.HandleFunc("GET /{$}", c.authed(c.home))
	m.HandleFunc("GET /switch", c.authed(c.switchOrg))
	m.HandleFunc("GET /me", c.authed(c.mePage))

	o := "/o/{org}"
	m.HandleFunc("GET "+o, c.authed(c.overview))
	m.HandleFunc("POST "+o+"/projects", c.authed(c.createProject))
	m.HandleFunc("GET "+o+"/audit", c.authed(c.auditPage))
	m.HandleFunc("GET "+o+"/audit/events", c.authed(c.auditEvents))
	m.HandleFunc("GET "+o+"/settings", c.authed(c.settings))
	m.HandleFunc("POST "+o+"/settings/tokens", c.authed(c.createToken))
	m.HandleFunc("POST "+o+"/settings/members", c.authed(c.addMember))
	m.HandleFunc("POST "+o+"/settings/members/{user}/role", c.authed(c.changeRole))
	m.HandleFunc("POST "+o+"/settings/tokens/{token}/revoke", c.authed(c.revokeToken))
	m.HandleFunc("POST "+o+"/clusters", c.authed(c.createCluster))
	m.HandleFunc("POST "+o+"/clusters/{cluster}/join-tokens", c.authed(c.createJoinToken))
	m.HandleFunc("GET "+o+"/servers", c.authed(c.serversPage))
	m.HandleFunc("GET "+o+"/servers/{server}", c.authed(c.serverPage))
	m.HandleFunc("POST "+o+"/servers/upgrade", c.authed(c.upgradeAll))
	m.HandleFunc("POST "+o+"/servers/{server}/upgrade", c.authed(c.upgradeOne))
	m.HandleFunc("GET "+o+"/mesh", c.authed(c.meshPage))
	m.HandleFunc("POST "+o+"/mesh/clusters/{cluster}/rotate", c.authed(c.rotateMesh))

	p := o + "/p/{project}"
	m.HandleFunc("GET "+p, c.authed(c.projectPage))
	m.HandleFunc("POST "+p+"/environments", c.authed(c.createEnvironment))
	m.HandleFunc("POST "+p+"/services", c.authed(c.createService))
	e := p + "/e/{env}"
	m.HandleFunc("GET "+e, c.authed(c.environmentPage))
	m.HandleFunc("GET "+e+"/changesets", c.authed(c.changeSetsPage))
	m.HandleFunc("GET "+e+"/changesets/{changeset}", c.authed(c.changeSetPage))
	m.HandleFunc("POST "+e+"/changesets/{changeset}/{decision}", c.authed(c.decideChangeSet))
	m.HandleFunc("GET "+e+"/events", c.authed(c.environmentEvents))
	s := e + "/s/{service}"
	m.HandleFunc("GET "+s, c.authed(c.targetPage))
	m.HandleFunc("POST "+s+"/deploy", c.authed(c.deploy))
	m.HandleFunc("POST "+s+"/rollback", c.authed(c.rollback))
	m.HandleFunc("POST "+s+"/resume", c.authed(c.resume))
	m.HandleFunc("GET "+s+"/logs", c.authed(c.logs))
	m.HandleFunc("GET "+s+"/d/{deployment}", c.authed(c.deploymentPage))
	m.HandleFunc("GET "+s+"/d/{deployment}/events", c.authed(c.deploymentEvents))

	c.actionRoutes(m)
	c.buildRoutes(m)
	c.webhookRoutes(m)

	m.HandleFunc("GET /instance", c.authed(c.instancePage))
	m.HandleFunc("POST /instance/auto-upgrade", c.authed(c.setAutoUpgrade))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", &view{Title: "Not found", Problem: "There is no page at " + r.URL.Path + "."})
	})
}

func esc(s string) string { return url.PathEscape(s) }

// apiPath is the API path of what the console path names.
func apiPath(r *http.Request, tail ...string) string {
	p := "/api/v1/orgs/" + esc(r.PathValue("org"))
	if v := r.PathValue("project"); v != "" {
		p += "/projects/" + esc(v)
	}
	if v := r.PathValue("env"); v != "" {
		p += "/environments/" + esc(v)
	}
	if v := r.PathValue("service"); v != "" {
		p += "/services/" + esc(v)
	}
	for _, t := range tail {
		p += t
	}
	return p
}

// consolePath is the console page of what the request's path names.
func consolePath(r *http.Request) string {
	p := "/o/" + esc(r.PathValue("org"))
	if v := r.PathValue("project"); v != "" {
		p += "/p/" + esc(v)
	}
	if v := r.PathValue("env"); v != "" {
		p += "/e/" + esc(v)
	}
	if v := r.PathValue("service"); v != "" {
		p += "/s/" + esc(v)
	}
	return p
}

// list reads a list route of the API: every page (limit 0), or the first
// limit items.
func list[T any](c *Console, r *http.Request, token, p string, limit int) ([]T, error) {
	sep := "?"
	if strings.Contains(p, "?") {
		sep = "&"
	}
	var all []T
	next := ""
	for {
		u := p + sep + "limit=1000"
		if limit > 0 {
			u = p + sep + "limit=" + strconv.Itoa(limit)
		}
		if next != "" {
			u += "&cursor=" + url.QueryEscape(next)
		}
		var pg api.Page[T]
		if _, err := c.call(r, token, "GET", u, nil, &pg); err != nil {
			return nil, err
		}
		all = append(all, pg.Items...)
		if pg.Next == "" || limit > 0 {
			return all, nil
		}
		if pg.Next == next || len(pg.Items) == 0 {
			// A page that does not advance would loop for ever (the Go
			// client refuses it the same way).
			return nil, fmt.Errorf("listing %s: the page after cursor %q does not advance", p, next)
		}
		next = pg.Next
	}
}
