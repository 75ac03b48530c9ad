package console

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
)

type targetData struct {
	Project, Env string
	Target       api.TargetView
	Releases     []api.Release
	Deployments  []api.DeploymentView
	Variables    []api.Variable
	Domains      []api.Domain
	Replicas     int
	// Scale is each process's replicas in this environment (Scale).
	Scale  []api.ProcessReplicas
	Events string
	// Git is what a Git service has in this environment (nil for an
	// image's).
	Git *gitData
}

func (c *Console) targetPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := targetData{Project: r.PathValue("project"), Env: r.PathValue("env"), Events: consolePath(r)[:strings.LastIndex(consolePath(r), "/s/")] + "/events"}
	tp := apiPath(r)
	_, err := c.call(r, s.token, "GET", tp, nil, &d.Target)
	if err == nil {
		d.Releases, err = list[api.Release](c, r, s.token, tp+"/releases", 0)
	}
	if err == nil {
		d.Deployments, err = list[api.DeploymentView](c, r, s.token, tp+"/deployments", 10)
	}
	if err == nil {
		d.Variables, err = list[api.Variable](c, r, s.token, tp+"/variables", 0)
	}
	if err == nil {
		d.Domains, err = list[api.Domain](c, r, s.token, tp+"/domains", 0)
	}
	if err == nil {
		d.Scale, err = list[api.ProcessReplicas](c, r, s.token, tp+"/replicas", 0)
	}
	v := c.view(r, s, d.Target.Service.Name+" in "+d.Env, &d, "")
	if err == nil && d.Target.Service.Source.GitURL != "" {
		d.Git, err = c.gitOfTarget(r, s, v)
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	// Secret values never reach the browser, even were the API to send one.
	for i := range d.Variables {
		if d.Variables[i].Secret {
			d.Variables[i].Value = ""
		}
	}
	for _, p := range d.Scale {
		d.Replicas += p.Replicas
	}
	slices.SortFunc(d.Releases, func(a, b api.Release) int { return b.Number - a.Number })
	c.render(w, r, http.StatusOK, "target", v)
}

// deploy deploys an image (or the service's again); a Git service's deploy
// builds the tracked branch's head, or the commit asked for, and deploys
// when the build succeeds (the API answers with the build).
func (c *Console) deploy(w http.ResponseWriter, r *http.Request, s *session) {
	var out api.DeployResponse
	req := api.DeployRequest{Image: strings.TrimSpace(r.PostFormValue("image")), Commit: strings.TrimSpace(r.PostFormValue("commit"))}
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/deployments"), req, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.afterDeploy(w, r, out)
}

func (c *Console) afterDeploy(w http.ResponseWriter, r *http.Request, out api.DeployResponse) {
	switch {
	case out.Deployment != nil:
		c.done(w, r, consolePath(r)+"/d/"+esc(out.Deployment.ID), "")
	case out.ChangeSet != nil:
		c.changed(w, r, out.ChangeSet, "")
	case out.Build != nil:
		// A Git service's deploy waits for its build: its page follows it.
		c.done(w, r, consolePath(r)+"/b/"+esc(out.Build.ID), "Building "+builtWhat(out.Build)+": "+r.PathValue("service")+" deploys to "+r.PathValue("env")+" when the build succeeds.")
	default:
		c.done(w, r, consolePath(r), "Done.")
	}
}

func (c *Console) rollback(w http.ResponseWriter, r *http.Request, s *session) {
	n, err := strconv.Atoi(r.PostFormValue("release"))
	if err != nil || n < 1 {
		c.render(w, r, http.StatusUnprocessableEntity, "error", c.view(r, s, "Invalid release", nil, "Choose a release number to roll back to."))
		return
	}
	var out api.DeployResponse
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/rollback"), api.RollbackRequest{Release: n}, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.afterDeploy(w, r, out)
}

func (c *Console) resume(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/resume-deploys"), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, consolePath(r), "Automatic deploys resumed.")
}

type deploymentData struct {
	Project, Env, Service string
	D                     api.DeploymentDetail
	Events                string
}

func (c *Console) deploymentPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := deploymentData{Project: r.PathValue("project"), Env: r.PathValue("env"), Service: r.PathValue("service")}
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/deployments/"+esc(r.PathValue("deployment"))), nil, &d.D); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d.Events = consolePath(r) + "/d/" + esc(d.D.ID) + "/events"
	c.render(w, r, http.StatusOK, "deployment", c.view(r, s, "Deployment of release "+strconv.Itoa(d.D.ReleaseNumber), &d, ""))
}

// deploymentEvents is the API's deployment stream, for the page's script.
func (c *Console) deploymentEvents(w http.ResponseWriter, r *http.Request, s *session) {
	c.stream(w, r, s.token, apiPath(r, "/deployments/"+esc(r.PathValue("deployment"))+"/events"))
}

type logsData struct {
	Lines []api.LogLine
	// Self is the fragment's own address: it reloads itself every few seconds.
	Self string
}

// logs is the service's latest container log lines, a fragment that htmx
// loads into the service page and refreshes.
func (c *Console) logs(w http.ResponseWriter, r *http.Request, s *session) {
	var page api.LogPage
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/logs?limit=200"), nil, &page); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "logs", c.view(r, s, "Logs", &logsData{Lines: page.Items, Self: consolePath(r) + "/logs"}, ""))
}
