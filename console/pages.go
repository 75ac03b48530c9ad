package console

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/query"
	"github.com/nebulactrl/nebulactrl/telemetry"
)

// noticeCookie carries the notice of an action to the page it redirects to.
const noticeCookie = "nebulactrl_notice"

type noticeKey struct{}

// view is what every page's template gets.
type view struct {
	Title   string
	CSRF    string
	Me      *api.MeResponse
	Org     *query.Organisation
	Version string
	// Notice and Problem are shown at the top of the page.
	Notice, Problem string
	Data            any
	principal       domain.Principal
}

// Can says whether the signed-in user's role in the current organisation
// grants scope: write buttons show only then (the API checks it anyway).
func (v *view) Can(scope string) bool {
	if v.Me == nil {
		return false
	}
	orgID := ""
	if v.Org != nil {
		orgID = v.Org.ID
	}
	return v.principal.Allow(orgID, domain.Scope(scope)) == nil
}

// session is a signed-in request.
type session struct {
	token string
	me    api.MeResponse
}

func (c *Console) parseTemplates() error {
	funcs := template.FuncMap{
		"asset": c.assetURL,
		"when": func(t any) string {
			switch v := t.(type) {
			case time.Time:
				if v.IsZero() {
					return "—"
				}
				return v.UTC().Format("2006-01-02 15:04:05 UTC")
			case *time.Time:
				if v == nil || v.IsZero() {
					return "never"
				}
				return v.UTC().Format("2006-01-02 15:04:05 UTC")
			}
			return ""
		},
		"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"path": func(parts ...string) string {
			var b strings.Builder
			for _, p := range parts {
				b.WriteString("/")
				b.WriteString(url.PathEscape(p))
			}
			return b.String()
		},
		"deref": func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		},
		"terminal": func(status string) bool {
			return status == string(domain.StatusSucceeded) || status == string(domain.StatusFailed) || status == string(domain.StatusSuperseded)
		},
		"join":      strings.Join,
		"auditLink": auditLink,
		"short":     shortCommit,
		"buildOver": func(status string) bool { return domain.BuildStatus(status).Terminal() },
	}
	layout, err := templateFS.ReadFile("templates/layout.html")
	if err != nil {
		return err
	}
	names, err := templateFS.ReadDir("templates")
	if err != nil {
		return err
	}
	c.pages = map[string]*template.Template{}
	for _, n := range names {
		if n.Name() == "layout.html" {
			continue
		}
		b, err := templateFS.ReadFile("templates/" + n.Name())
		if err != nil {
			return err
		}
		t, err := template.New("layout").Funcs(funcs).Parse(string(layout))
		if err != nil {
			return fmt.Errorf("console: layout: %w", err)
		}
		if _, err := t.Parse(string(b)); err != nil {
			return fmt.Errorf("console: %s: %w", n.Name(), err)
		}
		c.pages[strings.TrimSuffix(n.Name(), ".html")] = t
	}
	return nil
}

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
	m.HandleFunc("POST "+o+"/servers/upgrade", c.authed(c.upgradeAll))
	m.HandleFunc("POST "+o+"/servers/{server}/upgrade", c.authed(c.upgradeOne))

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

	m.HandleFunc("GET /instance", c.authed(c.instancePage))
	m.HandleFunc("POST /instance/auto-upgrade", c.authed(c.setAutoUpgrade))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.render(w, r, http.StatusNotFound, "error", &view{Title: "Not found", Problem: "There is no page at " + r.URL.Path + "."})
	})
}

// authed runs h for a signed-in user (the session cookie's token, checked
// by the API's GET /api/v1/me), after checking the CSRF token of anything
// but GET; without a session, pages go to the sign-in form.
func (c *Console) authed(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(sessionCookie)
		s := &session{}
		if err == nil && ck.Value != "" {
			s.token = ck.Value
			if _, err := c.call(r, s.token, "GET", "/api/v1/me", nil, &s.me); err != nil {
				if ae, ok := asAPIError(err); !ok || ae.Status != http.StatusUnauthorized {
					c.fail(w, r, nil, err)
					return
				}
				s.token = ""
			}
		}
		if s.token == "" {
			if r.Method != http.MethodGet || r.Header.Get("HX-Request") != "" {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !checkCSRF(r, s.token) {
				c.render(w, r, http.StatusForbidden, "error", c.view(r, s, "Forbidden", nil, "The form was stale or came from another site (CSRF token missing or wrong). Reload the page and try again."))
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Vary", "Cookie, HX-Request")
		if ck, err := r.Cookie(noticeCookie); err == nil && r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
			// The notice of the action that sent the browser here, shown once.
			if n, err := url.QueryUnescape(ck.Value); err == nil && len(n) < 300 {
				r = r.WithContext(context.WithValue(r.Context(), noticeKey{}, n))
			}
			http.SetCookie(w, &http.Cookie{Name: noticeCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
		}
		if org := r.PathValue("org"); org != "" && !slices.ContainsFunc(s.me.Organisations, func(o query.Organisation) bool { return o.Name == org }) {
			// As in the API: to a non-member the organisation does not exist.
			c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "There is no organisation "+strconv.Quote(org)+"."))
			return
		}
		h(w, r, s)
	}
}

func (c *Console) view(r *http.Request, s *session, title string, data any, problem string) *view {
	v := &view{Title: title, Data: data, Problem: problem, Version: c.cfg.Version}
	if s != nil && s.token != "" {
		v.CSRF = csrfToken(s.token)
		v.Me = &s.me
		v.principal = domain.Principal{UserID: s.me.User.ID, InstanceAdmin: s.me.User.InstanceAdmin, Roles: map[string]domain.Role{}}
		for _, o := range s.me.Organisations {
			v.principal.Roles[o.ID] = o.Role
		}
		if name := r.PathValue("org"); name != "" {
			for i := range s.me.Organisations {
				if s.me.Organisations[i].Name == name {
					v.Org = &s.me.Organisations[i]
				}
			}
		}
	}
	if n, ok := r.Context().Value(noticeKey{}).(string); ok {
		v.Notice = n
	}
	return v
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "no page "+page, http.StatusInternalServerError)
		return
	}
	name := "layout"
	if t.Lookup("fragment") != nil {
		// A page that is a fragment (htmx swaps it into a page) has no layout.
		name = "fragment"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		c.log.Error("console: rendering", "page", page, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an API error on an error page with the API's status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status := http.StatusInternalServerError
	msg := "Something went wrong: " + err.Error()
	if ae, ok := asAPIError(err); ok {
		status, msg = ae.Status, ae.Message
	} else {
		c.log.Error("console", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, status, "error", c.view(r, s, http.StatusText(status), nil, msg))
}

// done sends the browser back to a page after an action (303, so a reload
// does not repeat it), with a notice.
//
// The notice travels in a short-lived cookie, not in the address: a link
// made elsewhere cannot put words on a console page.
func (c *Console) done(w http.ResponseWriter, r *http.Request, to, notice string) {
	if notice != "" {
		http.SetCookie(w, &http.Cookie{Name: noticeCookie, Value: url.QueryEscape(notice), Path: "/", MaxAge: 60, HttpOnly: true,
			Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
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

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.renderSignIn(w, r, http.StatusOK, "")
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, problem string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Value: tok, Path: "/signin", HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode, MaxAge: 3600})
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostFormValue("next")
	}
	v := &view{Title: "Sign in", CSRF: tok, Problem: problem, Version: c.cfg.Version, Data: map[string]string{"Next": safeNext(next), "Email": r.PostFormValue("email")}}
	c.render(w, r, status, "signin", v)
}

// safeNext keeps a redirect after sign-in on this site: a path of its own,
// with no control character or backslash anywhere (a browser drops tabs and
// newlines from a URL and reads \ as /, so "/\t/evil.example" would
// become "//evil.example", another site).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/signin") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ck, err := r.Cookie(loginCSRFCookie)
	if err != nil || !sameOriginOrNone(r) || loginTokenBad(ck.Value, r.PostFormValue(csrfField)) {
		c.renderSignIn(w, r, http.StatusForbidden, "The sign-in form was stale or came from another site. Try again.")
		return
	}
	var sess api.SessionResponse
	_, err = c.call(r, "", "POST", "/api/v1/sessions", api.LoginRequest{Email: r.PostFormValue("email"), Password: r.PostFormValue("password")}, &sess)
	if err != nil {
		status, msg := http.StatusInternalServerError, err.Error()
		if ae, ok := asAPIError(err); ok {
			status, msg = ae.Status, ae.Message
		}
		c.renderSignIn(w, r, status, msg)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Value: "", Path: "/signin", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sess.Token, Path: "/", Expires: sess.ExpiresAt, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// loginTokenBad says whether the double-submitted sign-in tokens differ (constant time).
func loginTokenBad(cookie, field string) bool {
	return cookie == "" || !constantTimeEqual(cookie, field)
}

func sameOriginOrNone(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o == "" || o == "null" || sameOrigin(o, r)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "DELETE", "/api/v1/sessions/current", nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, s *session) {
	if len(s.me.Organisations) == 0 {
		c.render(w, r, http.StatusOK, "me", c.view(r, s, "Who am I", nil, ""))
		return
	}
	http.Redirect(w, r, "/o/"+esc(s.me.Organisations[0].Name), http.StatusSeeOther)
}

func (c *Console) switchOrg(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("org")
	for _, o := range s.me.Organisations {
		if o.Name == name {
			http.Redirect(w, r, "/o/"+esc(o.Name), http.StatusSeeOther)
			return
		}
	}
	c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "You are not a member of an organisation named "+strconv.Quote(name)+"."))
}

func (c *Console) mePage(w http.ResponseWriter, r *http.Request, s *session) {
	c.render(w, r, http.StatusOK, "me", c.view(r, s, "Who am I", nil, ""))
}

// clusterRow is a cluster with its connection state.
type clusterRow struct {
	api.ClusterResponse
	Servers []query.Server
}

type overviewData struct {
	Projects   []query.Project
	Clusters   []clusterRow
	InProgress []progressRow
	Activity   []query.AuditEntry
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
	if d.Projects, err = list[query.Project](c, r, s.token, apiPath(r, "/projects"), 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	v := c.view(r, s, "Overview", &d, "")
	if v.Can(string(domain.ScopeServersRead)) {
		cl, err := list[query.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0)
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
		if _, err := c.call(r, s.token, "GET", apiPath(r, "/audit?limit=10"), nil, &page); err != nil {
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
	Project  query.Project
	Envs     []query.Environment
	Services []query.Service
	Rows     [][]cell
	Clusters []query.Cluster
	// Webhook is the project's push webhook, Deliveries the latest it
	// received (builds:read), NewSecret the secret just made: in this
	// answer only.
	Webhook    api.WebhookInfo
	Deliveries []query.Delivery
	NewSecret  *api.WebhookSecret
}

func (c *Console) projectPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderProject(w, r, s, &projectData{})
}

func (c *Console) renderProject(w http.ResponseWriter, r *http.Request, s *session, d *projectData) {
	pp := apiPath(r)
	_, err := c.call(r, s.token, "GET", pp, nil, &d.Project)
	if err == nil {
		d.Envs, err = list[query.Environment](c, r, s.token, pp+"/environments", 0)
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
		d.Deliveries, err = list[query.Delivery](c, r, s.token, pp+"/webhook/deliveries", 20)
	}
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if v.Can(string(domain.ScopeProjectsWrite)) && v.Can(string(domain.ScopeServersRead)) {
		d.Clusters, _ = list[query.Cluster](c, r, s.token, "/api/v1/orgs/"+esc(r.PathValue("org"))+"/clusters", 0)
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

type targetData struct {
	Project, Env string
	Target       api.TargetView
	Releases     []query.Release
	Deployments  []api.DeploymentView
	Variables    []query.Variable
	Domains      []query.Domain
	Replicas     int
	// Scale is each process's replicas in this environment (Scale).
	Scale  []query.ProcessReplicas
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
		d.Releases, err = list[query.Release](c, r, s.token, tp+"/releases", 0)
	}
	if err == nil {
		d.Deployments, err = list[api.DeploymentView](c, r, s.token, tp+"/deployments", 10)
	}
	if err == nil {
		d.Variables, err = list[query.Variable](c, r, s.token, tp+"/variables", 0)
	}
	if err == nil {
		d.Domains, err = list[query.Domain](c, r, s.token, tp+"/domains", 0)
	}
	if err == nil {
		d.Scale, err = list[query.ProcessReplicas](c, r, s.token, tp+"/replicas", 0)
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
	slices.SortFunc(d.Releases, func(a, b query.Release) int { return b.Number - a.Number })
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

// environmentEvents is the API's environment stream, for the page's script.
func (c *Console) environmentEvents(w http.ResponseWriter, r *http.Request, s *session) {
	c.stream(w, r, s.token, apiPath(r, "/events"))
}

type changeSetsData struct {
	Project, Env string
	Sets         []query.ChangeSet
}

func (c *Console) changeSetsPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := changeSetsData{Project: r.PathValue("project"), Env: r.PathValue("env")}
	var err error
	if d.Sets, err = list[query.ChangeSet](c, r, s.token, apiPath(r, "/changesets"), 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "changesets", c.view(r, s, "Change sets of "+d.Env, &d, ""))
}

type changeSetData struct {
	Project, Env string
	CS           api.ChangeSetView
	Mine         bool
	Expires      time.Time
}

func (c *Console) changeSetPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := changeSetData{Project: r.PathValue("project"), Env: r.PathValue("env")}
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/changesets/"+esc(r.PathValue("changeset"))), nil, &d.CS); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d.Mine = d.CS.OpenedBy == s.me.User.ID
	d.Expires = d.CS.OpenedAt.Add(c.cfg.ApprovalTTL)
	c.render(w, r, http.StatusOK, "changeset", c.view(r, s, "Change set", &d, ""))
}

func (c *Console) decideChangeSet(w http.ResponseWriter, r *http.Request, s *session) {
	decision := r.PathValue("decision")
	if decision != "approve" && decision != "reject" {
		c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "A change set is approved or rejected."))
		return
	}
	version, _ := strconv.Atoi(r.PostFormValue("version"))
	id := r.PathValue("changeset")
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/changesets/"+esc(id)+"/"+decision),
		api.ChangeSetDecision{Version: version, Reason: r.PostFormValue("reason")}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, consolePath(r)+"/changesets/"+esc(id), "Change set "+decision+"d.")
}

type auditData struct {
	Entries                             []query.AuditEntry
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

type settingsData struct {
	Roles      []string
	Members    []query.Member
	Tokens     []query.Token
	Clusters   []query.Cluster
	NewToken   string
	JoinTokens map[string][]query.JoinToken
	// Servers are each cluster's servers (Revoke server).
	Servers   map[string][]query.Server
	Created   *api.CreatedJoinToken
	PublicURL string
}

func (c *Console) settings(w http.ResponseWriter, r *http.Request, s *session) {
	c.renderSettings(w, r, s, &settingsData{})
}

func (c *Console) renderSettings(w http.ResponseWriter, r *http.Request, s *session, d *settingsData) {
	d.PublicURL = c.cfg.PublicURL
	d.Roles = []string{string(domain.RoleViewer), string(domain.RoleMember), string(domain.RoleAdmin), string(domain.RoleOwner)}
	v := c.view(r, s, "Settings", d, "")
	var err error
	if d.Members, err = list[query.Member](c, r, s.token, apiPath(r, "/members"), 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	if d.Tokens, err = list[query.Token](c, r, s.token, "/api/v1/tokens", 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d.Tokens = slices.DeleteFunc(d.Tokens, func(t query.Token) bool { return t.Session })
	if v.Can(string(domain.ScopeServersRead)) {
		if d.Clusters, err = list[query.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0); err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.JoinTokens = map[string][]query.JoinToken{}
		d.Servers = map[string][]query.Server{}
		for _, k := range d.Clusters {
			if jt, err := list[query.JoinToken](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/join-tokens"), 0); err == nil {
				d.JoinTokens[k.Name] = jt
			}
			if sv, err := list[query.Server](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/servers"), 0); err == nil {
				d.Servers[k.Name] = sv
			}
		}
	}
	c.render(w, r, http.StatusOK, "settings", v)
}

func (c *Console) createToken(w http.ResponseWriter, r *http.Request, s *session) {
	_ = r.ParseForm()
	req := api.CreateTokenRequest{Name: strings.TrimSpace(r.PostFormValue("name")), Scopes: r.PostForm["scope"]}
	if n := strings.TrimSpace(r.PostFormValue("days")); n != "" {
		// A bad expiry is refused, not read as none (0 makes a token
		// that never expires).
		days, err := strconv.Atoi(n)
		if err != nil || days < 1 || days > 3650 {
			if !c.allowed(w, r, s, domain.ScopeTokensWrite) {
				return
			}
			c.invalid(w, r, s, "Invalid expiry", "The expiry must be a whole number of days from 1 to 3650, or empty for a token that does not expire.")
			return
		}
		req.ExpiresInDays = days
	}
	var out api.CreatedToken
	if _, err := c.call(r, s.token, "POST", "/api/v1/tokens", req, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	// The secret is in this answer only: not in a URL, not stored.
	c.renderSettings(w, r, s, &settingsData{NewToken: out.Secret})
}

func (c *Console) addMember(w http.ResponseWriter, r *http.Request, s *session) {
	req := api.AddMemberRequest{Email: strings.TrimSpace(r.PostFormValue("email")), Role: r.PostFormValue("role")}
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/members"), req, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/settings", req.Email+" added as "+req.Role+".")
}

func (c *Console) createCluster(w http.ResponseWriter, r *http.Request, s *session) {
	var out api.ClusterResponse
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/clusters"), api.CreateClusterRequest{Name: strings.TrimSpace(r.PostFormValue("name"))}, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.renderSettings(w, r, s, &settingsData{Created: out.JoinToken})
}

func (c *Console) createJoinToken(w http.ResponseWriter, r *http.Request, s *session) {
	var out api.CreatedJoinToken
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/clusters/"+esc(r.PathValue("cluster"))+"/join-tokens"), api.JoinTokenRequest{}, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.renderSettings(w, r, s, &settingsData{Created: &out})
}

type serversData struct {
	Clusters []clusterRow
	Version  string
	// Archs maps a server's id to its architecture (from the instance
	// administrator's upgrade view; empty for others).
	Archs map[string]string
}

func (c *Console) serversPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := serversData{Version: c.cfg.Version, Archs: map[string]string{}}
	if s.me.User.InstanceAdmin {
		var iu api.InstanceUpgrade
		if _, err := c.call(r, s.token, "GET", "/api/v1/instance/upgrade", nil, &iu); err == nil {
			d.Version = iu.Version
			for _, sv := range iu.Servers {
				d.Archs[sv.ID] = sv.Arch
			}
		}
	}
	cl, err := list[query.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	for _, k := range cl {
		var row clusterRow
		row.Cluster = k
		if row.Servers, err = list[query.Server](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/servers"), 0); err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.Clusters = append(d.Clusters, row)
	}
	c.render(w, r, http.StatusOK, "servers", c.view(r, s, "Servers", &d, ""))
}

func (c *Console) upgradeOne(w http.ResponseWriter, r *http.Request, s *session) {
	req := api.UpgradeRequest{Force: r.PostFormValue("force") == "true"}
	if _, err := c.call(r, s.token, "POST", "/api/v1/servers/"+esc(r.PathValue("server"))+"/upgrade", req, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/servers", "Upgrade requested.")
}

func (c *Console) upgradeAll(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "POST", "/api/v1/servers/upgrade", api.RolloutRequest{Org: r.PathValue("org")}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/servers", "Upgrade of the organisation's agents started, one server at a time.")
}

func (c *Console) instancePage(w http.ResponseWriter, r *http.Request, s *session) {
	var d api.InstanceUpgrade
	if _, err := c.call(r, s.token, "GET", "/api/v1/instance/upgrade", nil, &d); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "instance", c.view(r, s, "Instance", &d, ""))
}

func (c *Console) setAutoUpgrade(w http.ResponseWriter, r *http.Request, s *session) {
	on := r.PostFormValue("agentAutoUpgrade") == "on"
	if _, err := c.call(r, s.token, "PUT", "/api/v1/instance/settings", api.SettingsRequest{AgentAutoUpgrade: &on}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/instance", "Automatic upgrade "+map[bool]string{true: "on", false: "off"}[on]+".")
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

type logsData struct {
	Lines []telemetry.LogLine
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

// auditLink is the console page of an audit log entry's target in the
// organisation org ("" when it has none, or the name is not a path).
func auditLink(org string, e query.AuditEntry) string {
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

type environmentData struct {
	Project string
	Env     query.Environment
	// At, Revision and Compare are what the form asked for.
	At, Revision, Compare string
	Rev                   *projections.Revision
	Other                 *projections.Revision
	Diff                  []string
	Missing               string
}

// environmentPage shows what ran in an environment: its latest revision,
// revision N, or the one in force at a time, and what changed since another
// revision (from the API's GET .../state).
func (c *Console) environmentPage(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	d := environmentData{Project: r.PathValue("project"), At: q.Get("at"), Revision: q.Get("revision"), Compare: q.Get("compare")}
	if _, err := c.call(r, s.token, "GET", apiPath(r), nil, &d.Env); err != nil {
		c.fail(w, r, s, err)
		return
	}
	sel := url.Values{}
	switch {
	case d.At != "":
		sel.Set("at", d.At)
	case d.Revision != "":
		sel.Set("revision", d.Revision)
	}
	var rev projections.Revision
	status := http.StatusOK
	v := c.view(r, s, "Environment "+d.Env.Name, &d, "")
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/state?"+sel.Encode()), nil, &rev); err != nil {
		ae, ok := asAPIError(err)
		if !ok || ae.Status >= 500 || ae.Status == http.StatusForbidden {
			c.fail(w, r, s, err)
			return
		}
		// No revision then, or a bad time: said on the page, with the form.
		status, v.Problem = ae.Status, ae.Message
		if ae.Status == http.StatusNotFound && sel.Encode() == "" {
			status, v.Problem = http.StatusOK, "No revision yet: one is compiled when the environment's first service is deployed."
		}
	} else {
		d.Rev = &rev
	}
	if d.Rev != nil && d.Compare != "" {
		var other projections.Revision
		if _, err := c.call(r, s.token, "GET", apiPath(r, "/state?revision="+url.QueryEscape(d.Compare)), nil, &other); err != nil {
			if ae, ok := asAPIError(err); ok && ae.Status < 500 && ae.Status != http.StatusForbidden {
				status, v.Problem = ae.Status, "Revision "+d.Compare+": "+ae.Message
			} else {
				c.fail(w, r, s, err)
				return
			}
		} else {
			d.Other = &other
			d.Diff = documentDiff(other.Document, rev.Document)
		}
	}
	c.render(w, r, status, "environment", v)
}

// documentDiff says, service by service, what changed from document a to
// document b: release image, held, replicas, variables (a secret's sealed
// value is compared as stored, never opened or shown), domains.
func documentDiff(a, b desiredstate.Document) []string {
	var out []string
	old := map[string]desiredstate.Service{}
	for _, s := range a.Services {
		old[s.Name] = s
	}
	seen := map[string]bool{}
	for _, n := range b.Services {
		seen[n.Name] = true
		o, ok := old[n.Name]
		if !ok {
			out = append(out, n.Name+": added")
			continue
		}
		if img(o) != img(n) {
			out = append(out, n.Name+": image "+img(o)+" → "+img(n))
		}
		if o.Held != n.Held || o.HeldReason != n.HeldReason {
			out = append(out, fmt.Sprintf("%s: held %v → %v %s", n.Name, o.Held, n.Held, n.HeldReason))
		}
		reps := map[string]int{}
		for _, p := range o.Processes {
			reps[p.Name] = p.Replicas
		}
		for _, p := range n.Processes {
			if r, ok := reps[p.Name]; !ok || r != p.Replicas {
				out = append(out, fmt.Sprintf("%s: %s replicas %d → %d", n.Name, p.Name, reps[p.Name], p.Replicas))
			}
		}
		vars := map[string]desiredstate.Variable{}
		for _, v := range o.Variables {
			vars[v.Name] = v
		}
		for _, v := range n.Variables {
			ov, ok := vars[v.Name]
			switch {
			case !ok:
				out = append(out, n.Name+": variable "+v.Name+" set")
			case (v.Secret == nil) != (ov.Secret == nil):
				out = append(out, n.Name+": variable "+v.Name+" changed (now "+map[bool]string{true: "secret", false: "plain"}[v.Secret != nil]+")")
			case v.Secret == nil && ov.Value != v.Value:
				out = append(out, n.Name+": variable "+v.Name+" changed")
			case v.Secret != nil && (v.Secret.DataKeyID != ov.Secret.DataKeyID || !bytes.Equal(v.Secret.Ciphertext, ov.Secret.Ciphertext)):
				// Sealed values are compared as they are stored (a
				// revision copies them, it does not seal again): a
				// different one was set.
				out = append(out, n.Name+": secret variable "+v.Name+" changed")
			}
			delete(vars, v.Name)
		}
		for name := range vars {
			out = append(out, n.Name+": variable "+name+" unset")
		}
		if strings.Join(o.Domains, " ") != strings.Join(n.Domains, " ") {
			out = append(out, n.Name+": domains "+strings.Join(o.Domains, ", ")+" → "+strings.Join(n.Domains, ", "))
		}
	}
	for _, o := range a.Services {
		if !seen[o.Name] {
			out = append(out, o.Name+": removed")
		}
	}
	slices.Sort(out)
	return out
}

func img(s desiredstate.Service) string {
	if s.Release == nil {
		return "none"
	}
	return fmt.Sprintf("release %d (%s)", s.Release.Number, s.Release.Image)
}

func (c *Console) changeRole(w http.ResponseWriter, r *http.Request, s *session) {
	role := r.PostFormValue("role")
	if _, err := c.call(r, s.token, "PATCH", apiPath(r, "/members/"+esc(r.PathValue("user"))), api.ChangeRoleRequest{Role: role}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/settings", "Role changed to "+role+".")
}

func (c *Console) revokeToken(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "DELETE", "/api/v1/tokens/"+esc(r.PathValue("token")), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/settings", "Token revoked.")
}
