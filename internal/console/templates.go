package console

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// noticeCookie carries the notice of an action to the page it redirects to.
const noticeCookie = "nebulactrl_notice"

type noticeKey struct{}

// view is what every page's template gets.
type view struct {
	Title   string
	CSRF    string
	Me      *api.MeResponse
	Org     *api.Organisation
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
		"join":            strings.Join,
		"auditLink":       auditLink,
		"short":           shortCommit,
		"buildOver":       func(status string) bool { return domain.BuildStatus(status).Terminal() },
		"latestHandshake": latestHandshake,
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

func (c *Console) view(r *http.Request, s *session, title string, data any, problem string) *view {
	v := &view{Title: title, Data: data, Problem: problem, Version: c.cfg.Version}
	if s != nil && s.token != "" {
		v.CSRF = csrfToken(s.token)
		v.Me = &s.me
		v.principal = domain.Principal{UserID: s.me.User.ID, InstanceAdmin: s.me.User.InstanceAdmin, Roles: map[string]domain.Role{}}
		for _, o := range s.me.Organisations {
			v.principal.Roles[o.ID] = domain.Role(o.Role)
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
