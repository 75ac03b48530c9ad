package console

import (
	"cmp"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// cell is one environment × service of the project matrix; Held is the
// reason the environment's desired state holds the service ("" if not held).
type cell struct {
	Env, Service string
	C            api.MatrixCell
	Held         string
}

// matrixPage is how many services the project matrix shows at a time.
const matrixPage = 50

type projectData struct {
	// Next is the cursor of the next page of services; Paged says this is
	// not the first page.
	Next     string
	Paged    bool
	Project  api.Project
	Envs     []api.Environment
	Services []api.Service
	Rows     [][]cell
	Clusters []api.Cluster
	// Webhook is the project's push webhook, Deliveries the latest it
	// received (builds:read), NewSecret the secret just made: in this
	// answer only.
	Webhook    api.WebhookInfo
	Deliveries []api.Delivery
	NewSecret  *api.WebhookSecret
}

func (c *Console) projectPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderProject(w, r, s, &projectData{})
}

func (c *Console) renderProject(w http.ResponseWriter, r *http.Request, s *session, d *projectData) {
	pp := apiPath(r)
	_, err := c.call(r, s.token, "GET", pp, nil, &d.Project)
	if err == nil {
		d.Envs, err = list[api.Environment](c, r, s.token, pp+"/environments", 0)
	}
	if err == nil {
		// The matrix shows a page of services at a time, every cell of
		// the page read at once (the API's matrix route and its cursor).
		u := pp + "/matrix?limit=" + strconv.Itoa(matrixPage)
		if cur := r.URL.Query().Get("cursor"); cur != "" {
			u += "&cursor=" + url.QueryEscape(cur)
			d.Paged = true
		}
		var pg api.Page[api.MatrixRow]
		if _, err = c.call(r, s.token, "GET", u, nil, &pg); err == nil {
			d.Next = pg.Next
			d.Rows = make([][]cell, len(pg.Items))
			for i, row := range pg.Items {
				d.Services = append(d.Services, row.Service)
				// The columns are d.Envs (read before the matrix): each
				// row's cells are put under them by environment id, so an
				// environment created or deleted between the two reads
				// cannot shift a cell under another's header.
				byEnv := make(map[string]api.MatrixCell, len(row.Cells))
				for _, mc := range row.Cells {
					byEnv[mc.EnvironmentID] = mc
				}
				d.Rows[i] = make([]cell, len(d.Envs))
				for j, env := range d.Envs {
					mc, ok := byEnv[env.ID]
					if !ok {
						mc = api.MatrixCell{EnvironmentID: env.ID, Environment: env.Name}
					}
					d.Rows[i][j] = cell{Env: env.Name, Service: row.Service.Name, C: mc}
					if mc.Held {
						d.Rows[i][j].Held = cmp.Or(mc.HeldReason, "held")
					}
				}
			}
		}
	}
	if err == nil {
		_, err = c.call(r, s.token, "GET", pp+"/webhook", nil, &d.Webhook)
	}
	v := c.view(r, s, "Project "+d.Project.Name, d, "")
	if err == nil && v.Can(string(domain.ScopeBuildsRead)) {
		d.Deliveries, err = list[api.Delivery](c, r, s.token, pp+"/webhook/deliveries", 20)
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if v.Can(string(domain.ScopeProjectsWrite)) && v.Can(string(domain.ScopeServersRead)) {
		d.Clusters, _ = list[api.Cluster](c, r, s.token, "/api/v1/orgs/"+esc(r.PathValue("org"))+"/clusters", 0)
	}
	c.render(w, r, http.StatusOK, "project", v)
}

func (c *Console) createEnvironment(w http.ResponseWriter, r *http.Request, s *session) {
	req := api.CreateEnvironmentRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Cluster: r.PostFormValue("cluster"), Protected: r.PostFormValue("protected") == "on"}
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/environments"), req, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, consolePath(r), "Environment "+req.Name+" created.")
}

func (c *Console) createService(w http.ResponseWriter, r *http.Request, s *session) {
	// An image, or a Git repository that the service is built from (the
	// API refuses both, or neither).
	req := api.ServiceRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Image: strings.TrimSpace(r.PostFormValue("image")),
		GitURL: strings.TrimSpace(r.PostFormValue("gitUrl")), GitBranch: strings.TrimSpace(r.PostFormValue("gitBranch")),
		Dockerfile: strings.TrimSpace(r.PostFormValue("dockerfile"))}
	if p := r.PostFormValue("port"); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			c.render(w, r, http.StatusUnprocessableEntity, "error", c.view(r, s, "Invalid port", nil, "The port must be a whole number."))
			return
		}
		req.Port = &n
	}
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/services"), req, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, consolePath(r), "Service "+req.Name+" created.")
}
