package console

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// environmentEvents is the API's environment stream, for the page's script.
func (c *Console) environmentEvents(w http.ResponseWriter, r *http.Request, s *session) {
	c.stream(w, r, s.token, apiPath(r, "/events"))
}

type changeSetsData struct {
	Project, Env string
	Sets         []api.ChangeSet
}

func (c *Console) changeSetsPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := changeSetsData{Project: r.PathValue("project"), Env: r.PathValue("env")}
	var err error
	if d.Sets, err = list[api.ChangeSet](c, r, s.token, apiPath(r, "/changesets"), 0); err != nil {
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

type environmentData struct {
	Project string
	Env     api.Environment
	// At, Revision and Compare are what the form asked for.
	At, Revision, Compare string
	Rev                   *api.Revision
	Other                 *api.Revision
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
	var rev api.Revision
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
		var other api.Revision
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
