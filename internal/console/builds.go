package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// Builds from Git in the console: a Git service's builds and tracked branch
// on its page in an environment, a build's page (its log live, Cancel), and
// the project's push webhook (its URL, making or rotating its secret, shown
// once, and the deliveries it received). Like everything else, each is a
// request to the API's own routes (tagged builds), in process.

func (c *Console) buildRoutes(m recorder) {
	p := "/o/{org}/p/{project}"
	m.HandleFunc("POST "+p+"/webhook/rotate", c.authed(c.rotateWebhook))
	s := p + "/e/{env}/s/{service}"
	m.HandleFunc("POST "+s+"/tracking", c.authed(c.track))
	m.HandleFunc("GET "+s+"/b/{build}", c.authed(c.buildPage))
	m.HandleFunc("GET "+s+"/b/{build}/events", c.authed(c.buildEvents))
	m.HandleFunc("POST "+s+"/b/{build}/cancel", c.authed(c.cancelBuild))
}

// shortCommit is a commit as the CLI shows it (12 hex digits).
func shortCommit(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// builtWhat says what a build builds: the branch, at its commit when known.
func builtWhat(b *api.Build) string {
	if b.Commit == "" {
		return "the head of " + b.Branch
	}
	return b.Branch + " at " + shortCommit(b.Commit)
}

// recentBuilds is how many builds the service page lists.
const recentBuilds = 10

// gitData is what the page of a Git service in an environment shows of its
// builds: the branch the environment tracks, and the latest builds on the
// environment's cluster.
type gitData struct {
	Tracking api.TrackingView
	Cluster  string
	Builds   []api.Build
	// CanBuilds says the role reads builds (builds:read).
	CanBuilds bool
}

func (c *Console) gitOfTarget(r *http.Request, s *session, v *view) (*gitData, error) {
	g := &gitData{}
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/tracking"), nil, &g.Tracking); err != nil {
		return nil, err
	}
	var env api.Environment
	org, project := "/api/v1/orgs/"+esc(r.PathValue("org")), "/projects/"+esc(r.PathValue("project"))
	if _, err := c.call(r, s.token, "GET", org+project+"/environments/"+esc(r.PathValue("env")), nil, &env); err != nil {
		return nil, err
	}
	g.Cluster = env.ClusterName
	if !v.Can(string(domain.ScopeBuildsRead)) {
		return g, nil
	}
	g.CanBuilds = true
	// The service's latest builds of every cluster, newest first; those of
	// this environment's cluster are its.
	bs, err := list[api.Build](c, r, s.token, org+project+"/builds?service="+url.QueryEscape(r.PathValue("service")), 50)
	if err != nil {
		return nil, err
	}
	for _, b := range bs {
		if b.ClusterID == env.ClusterID && len(g.Builds) < recentBuilds {
			g.Builds = append(g.Builds, b)
		}
	}
	return g, nil
}

// track sets the branch the service follows in the environment, or none.
func (c *Console) track(w http.ResponseWriter, r *http.Request, s *session) {
	req := api.TrackRequest{Branch: strings.TrimSpace(r.PostFormValue("branch")), None: r.PostFormValue("none") == "yes"}
	svc, env := r.PathValue("service"), r.PathValue("env")
	notice := "Pushes to " + req.Branch + " now build " + svc + " and deploy it to " + env + "."
	switch {
	case req.None:
		req.Branch = ""
		notice = svc + " follows no branch in " + env + ": pushes deploy nothing there."
	case req.Branch == "":
		if !c.allowed(w, r, s, domain.ScopeProjectsWrite) {
			return
		}
		c.invalid(w, r, s, "No branch", "Name the branch to follow, or choose Follow no branch.")
		return
	}
	c.act(w, r, s, "PUT", apiPath(r, "/tracking"), req, notice)
}

// buildAPI is the API path of the build the console path names.
func buildAPI(r *http.Request, tail string) string {
	return "/api/v1/orgs/" + esc(r.PathValue("org")) + "/builds/" + esc(r.PathValue("build")) + tail
}

// readBuild reads the build the path names, which must be of the path's
// project and service (a build of another is not found here).
func (c *Console) readBuild(w http.ResponseWriter, r *http.Request, s *session) (api.Build, bool) {
	var b api.Build
	if _, err := c.call(r, s.token, "GET", buildAPI(r, ""), nil, &b); err != nil {
		c.fail(w, r, s, err)
		return b, false
	}
	if b.Project != r.PathValue("project") || b.Service != r.PathValue("service") {
		c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil,
			"There is no build "+strconv.Quote(r.PathValue("build"))+" of "+r.PathValue("service")+" in project "+r.PathValue("project")+"."))
		return b, false
	}
	return b, true
}

// buildLines is how many lines of its output the build page shows at
// first; the rest arrive over its stream.
const buildLines = 5000

type buildData struct {
	Project, Env, Service string
	B                     api.Build
	Lines                 []api.BuildLine
	// Last is the id of the last line shown ("0": none), where the stream
	// starts; Events the stream's address ("" once the build is over).
	Last, Events string
	// Deploys names the environments the build deploys to when it succeeds.
	Deploys []string
}

func (c *Console) buildPage(w http.ResponseWriter, r *http.Request, s *session) {
	b, ok := c.readBuild(w, r, s)
	if !ok {
		return
	}
	d := buildData{Project: r.PathValue("project"), Env: r.PathValue("env"), Service: r.PathValue("service"), B: b, Last: "0"}
	var page api.BuildLogPage
	if _, err := c.call(r, s.token, "GET", buildAPI(r, "/logs?limit="+strconv.Itoa(buildLines)), nil, &page); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d.Lines = page.Items
	if page.Next != "" {
		d.Last = page.Next
	}
	envs, err := list[api.Environment](c, r, s.token, "/api/v1/orgs/"+esc(r.PathValue("org"))+"/projects/"+esc(d.Project)+"/environments", 0)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	for _, id := range b.Environments {
		for _, e := range envs {
			if e.ID == id {
				d.Deploys = append(d.Deploys, e.Name)
			}
		}
	}
	if !domain.BuildStatus(b.Status).Terminal() {
		d.Events = consolePath(r) + "/b/" + esc(b.ID) + "/events?lastEventId=" + url.QueryEscape(d.Last)
	}
	c.render(w, r, http.StatusOK, "build", c.view(r, s, "Build of "+d.Service+": "+builtWhat(&b), &d, ""))
}

// buildEvents is the API's stream of the build's output, for the build
// page's script: from the last line the page showed (the browser's
// Last-Event-ID, when it reconnects, wins over lastEventId).
func (c *Console) buildEvents(w http.ResponseWriter, r *http.Request, s *session) {
	if _, ok := c.readBuild(w, r, s); !ok {
		return
	}
	p := buildAPI(r, "/logs/events")
	if v := r.URL.Query().Get("lastEventId"); v != "" {
		p += "?lastEventId=" + url.QueryEscape(v)
	}
	c.stream(w, r, s.token, p)
}

// cancelBuild cancels the build (builds:write; the API refuses a build that
// is over, 409) and shows it again.
func (c *Console) cancelBuild(w http.ResponseWriter, r *http.Request, s *session) {
	var b api.Build
	if _, err := c.call(r, s.token, "POST", buildAPI(r, "/cancel"), nil, &b); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, consolePath(r)+"/b/"+esc(b.ID), "Build "+b.ID+" "+b.Status+".")
}

// rotateWebhook makes the project's webhook secret (the first, or a new
// one: the previous is accepted 24 hours more) and shows it on the project
// page, in this answer only: not in an address, not stored.
func (c *Console) rotateWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	var out api.WebhookSecret
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/webhook/rotate"), nil, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.renderProject(w, r, s, &projectData{NewSecret: &out})
}
