package console

import (
	"net/http"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// clusterRow is a cluster with its connection state.
type clusterRow struct {
	api.ClusterResponse
	Servers []api.Server
}

type overviewData struct {
	Projects   []api.Project
	Clusters   []clusterRow
	InProgress []progressRow
	Activity   []api.AuditEntry
	CanAudit   bool
	PublicURL  string
}

type progressRow struct {
	Project, Env, Service string
	D                     api.DeploymentView
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	d := overviewData{PublicURL: c.cfg.PublicURL}
	var err error
	if d.Projects, err = list[api.Project](c, r, s.token, apiPath(r, "/projects"), 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := c.view(r, s, "Overview", &d, "")
	if v.Can(string(domain.ScopeServersRead)) {
		cl, err := list[api.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		for _, k := range cl {
			var row clusterRow
			if _, err := c.call(r, s.token, "GET", apiPath(r, "/clusters/"+esc(k.Name)), nil, &row.ClusterResponse); err != nil {
				c.fail(w, r, s, err)
				return
			}
			d.Clusters = append(d.Clusters, row)
		}
	}
	// The organisation's deployments in progress: one read of the API.
	ds, err := list[api.DeploymentInProgress](c, r, s.token, apiPath(r, "/deployments?status=in-progress"), 0)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	for _, x := range ds {
		d.InProgress = append(d.InProgress, progressRow{Project: x.Project, Env: x.Environment, Service: x.Service,
			D: api.DeploymentView{Deployment: x.Deployment, Blockers: x.Blockers}})
	}
	if v.Can(string(domain.ScopeAuditRead)) {
		d.CanAudit = true
		var page api.AuditPage
		if _, err := c.call(r, s.token, "GET", apiPath(r, "/audit?limit=10&order=newest"), nil, &page); err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.Activity = page.Items
	}
	c.render(w, r, http.StatusOK, "overview", v)
}

func (c *Console) createProject(w http.ResponseWriter, r *http.Request, s *session) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/projects"), api.CreateProjectRequest{Name: name}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/p/"+esc(name), "Project "+name+" created.")
}
