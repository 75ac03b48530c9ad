package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// The console's actions on variables, domains and replicas of a service in
// an environment, and on members, join tokens, clusters and servers in
// Settings. Like every other action they are requests to the API's own
// routes, in process: the API checks the scopes, validates, runs the
// commands (a change set in a protected environment) and writes the audit
// log. A destructive one is asked again on a confirmation page (a second
// form: the Content-Security-Policy allows no inline script, and htmx's
// hx-confirm would need one of its own).

// confirmedField is set by the confirmation page's form.
const confirmedField = "confirmed"

func (c *Console) actionRoutes(m recorder) {
	s := "/o/{org}/p/{project}/e/{env}/s/{service}"
	m.HandleFunc("POST "+s+"/variables", c.authed(c.setVariable))
	m.HandleFunc("POST "+s+"/variables/{name}/unset", c.authed(c.unsetVariable))
	m.HandleFunc("POST "+s+"/domains", c.authed(c.addDomain))
	m.HandleFunc("POST "+s+"/domains/{host}/remove", c.authed(c.removeDomain))
	m.HandleFunc("POST "+s+"/replicas", c.authed(c.scale))
	o := "/o/{org}"
	m.HandleFunc("POST "+o+"/settings/members/{user}/remove", c.authed(c.removeMember))
	m.HandleFunc("POST "+o+"/clusters/{cluster}/join-tokens/{token}/revoke", c.authed(c.revokeJoinToken))
	m.HandleFunc("POST "+o+"/clusters/{cluster}/delete", c.authed(c.deleteCluster))
	m.HandleFunc("POST "+o+"/clusters/{cluster}/servers/{server}/revoke", c.authed(c.revokeServer))
}

// Scopes lists every scope an API token can carry, for the token form.
func (v *view) Scopes() []string {
	out := make([]string, 0, len(domain.Scopes))
	for _, s := range domain.Scopes {
		out = append(out, string(s))
	}
	return out
}

type hiddenField struct{ Name, Value string }

type confirmData struct {
	Question, Button, Action, Back string
	Fields                         []hiddenField
}

// confirm says whether a destructive action was confirmed; if not, it
// answers with the confirmation page, whose form posts the same fields
// again with confirmed=yes. A role that lacks scope is refused at once (as
// the API would refuse the action), not shown a question it cannot answer.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request, s *session, scope domain.Scope, question, button, back string) bool {
	if r.PostFormValue(confirmedField) == "yes" {
		return true
	}
	if !c.allowed(w, r, s, scope) {
		return false
	}
	v := c.view(r, s, "Confirm", nil, "")
	d := &confirmData{Question: question, Button: button, Action: r.URL.EscapedPath(), Back: back}
	_ = r.ParseForm()
	keys := make([]string, 0, len(r.PostForm))
	for k := range r.PostForm {
		if k != csrfField && k != confirmedField {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, val := range r.PostForm[k] {
			d.Fields = append(d.Fields, hiddenField{k, val})
		}
	}
	v.Data = d
	c.render(w, r, http.StatusOK, "confirm", v)
	return false
}

// allowed says whether the user's role grants scope, and refuses the
// request as the API would (403) when it does not: for what the console
// answers itself before calling the API (a confirmation page, a form it
// cannot read), so that a role without the scope learns nothing more.
func (c *Console) allowed(w http.ResponseWriter, r *http.Request, s *session, scope domain.Scope) bool {
	if c.view(r, s, "", nil, "").Can(string(scope)) {
		return true
	}
	c.render(w, r, http.StatusForbidden, "error", c.view(r, s, "Forbidden", nil, "Your role in this organisation lacks the scope "+string(scope)+"."))
	return false
}

// change sends a change to the API and returns the change set it waits in
// when the environment is protected (202), or nil when it was made.
func (c *Console) change(r *http.Request, s *session, method, p string, body any) (*api.ChangeSet, error) {
	var raw json.RawMessage
	status, err := c.call(r, s.token, method, p, body, &raw)
	if err != nil || status != http.StatusAccepted {
		return nil, err
	}
	// A variable change answers {"variables":…, "changeSet":…}; the others
	// answer the change set itself.
	var wrapped struct {
		ChangeSet *api.ChangeSet `json:"changeSet"`
	}
	if err := json.Unmarshal(raw, &wrapped); err == nil && wrapped.ChangeSet != nil {
		return wrapped.ChangeSet, nil
	}
	var cs api.ChangeSet
	if err := json.Unmarshal(raw, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// changed sends the browser back to the service page, or, when the change
// waits for approval, to its change set's page.
func (c *Console) changed(w http.ResponseWriter, r *http.Request, cs *api.ChangeSet, notice string) {
	p := consolePath(r)
	if cs != nil {
		c.done(w, r, p[:strings.LastIndex(p, "/s/")]+"/changesets/"+esc(cs.ID),
			"The environment is protected: the change waits for approval in change set "+cs.ID+".")
		return
	}
	c.done(w, r, p, notice)
}

func (c *Console) invalid(w http.ResponseWriter, r *http.Request, s *session, title, msg string) {
	c.render(w, r, http.StatusUnprocessableEntity, "error", c.view(r, s, title, nil, msg))
}

func (c *Console) setVariable(w http.ResponseWriter, r *http.Request, s *session) {
	name := strings.TrimSpace(r.PostFormValue("name"))
	in := api.VariableInput{Name: name, Value: r.PostFormValue("value"), Secret: r.PostFormValue("secret") == "on"}
	// The notice never repeats a value: a secret's value goes to the API
	// and nowhere else.
	c.act(w, r, s, "PUT", apiPath(r, "/variables"), api.SetVariablesRequest{Variables: []api.VariableInput{in}}, "Variable "+name+" set.")
}

func (c *Console) unsetVariable(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("name")
	if !c.confirm(w, r, s, domain.ScopeProjectsWrite, "Unset the variable "+name+" of "+r.PathValue("service")+" in "+r.PathValue("env")+"?", "Unset "+name, consolePath(r)) {
		return
	}
	c.act(w, r, s, "DELETE", apiPath(r, "/variables/"+esc(name)), nil, "Variable "+name+" unset.")
}

func (c *Console) addDomain(w http.ResponseWriter, r *http.Request, s *session) {
	host := strings.TrimSpace(r.PostFormValue("host"))
	c.act(w, r, s, "POST", apiPath(r, "/domains"), api.AddDomainRequest{Host: host}, "Domain "+host+" added.")
}

func (c *Console) removeDomain(w http.ResponseWriter, r *http.Request, s *session) {
	host := r.PathValue("host")
	if !c.confirm(w, r, s, domain.ScopeProjectsWrite, "Stop routing "+host+" to "+r.PathValue("service")+" in "+r.PathValue("env")+"?", "Remove "+host, consolePath(r)) {
		return
	}
	c.act(w, r, s, "DELETE", apiPath(r, "/domains/"+esc(host)), nil, "Domain "+host+" removed.")
}

func (c *Console) scale(w http.ResponseWriter, r *http.Request, s *session) {
	n, err := strconv.Atoi(strings.TrimSpace(r.PostFormValue("replicas")))
	if err != nil || n < 0 {
		if !c.allowed(w, r, s, domain.ScopeProjectsWrite) {
			return
		}
		c.invalid(w, r, s, "Invalid replicas", "The number of replicas must be a whole number, 0 or more.")
		return
	}
	process := r.PostFormValue("process")
	c.act(w, r, s, "PUT", apiPath(r, "/replicas"), api.ScaleRequest{Process: process, Replicas: &n}, "Process "+process+" scaled to "+strconv.Itoa(n)+".")
}

func settingsPath(r *http.Request) string { return "/o/" + esc(r.PathValue("org")) + "/settings" }

func (c *Console) removeMember(w http.ResponseWriter, r *http.Request, s *session) {
	who := r.PostFormValue("email")
	if who == "" {
		who = "this member"
	}
	if !c.confirm(w, r, s, domain.ScopeMembersWrite, "Remove "+who+" from "+r.PathValue("org")+"? Their access ends at once.", "Remove member", settingsPath(r)) {
		return
	}
	// The API refuses to remove the last owner: its error is shown as it is.
	if _, err := c.call(r, s.token, "DELETE", apiPath(r, "/members/"+esc(r.PathValue("user"))), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, settingsPath(r), "Removed "+who+".")
}

func (c *Console) revokeJoinToken(w http.ResponseWriter, r *http.Request, s *session) {
	cl, id := r.PathValue("cluster"), r.PathValue("token")
	if !c.confirm(w, r, s, domain.ScopeServersWrite, "Revoke the join token "+id+" of cluster "+cl+"? No agent can join with it afterwards.", "Revoke join token", settingsPath(r)) {
		return
	}
	if _, err := c.call(r, s.token, "DELETE", apiPath(r, "/clusters/"+esc(cl)+"/join-tokens/"+esc(id)), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, settingsPath(r), "Join token "+id+" revoked.")
}

func (c *Console) deleteCluster(w http.ResponseWriter, r *http.Request, s *session) {
	cl := r.PathValue("cluster")
	if !c.confirm(w, r, s, domain.ScopeServersWrite, "Delete the cluster "+cl+"? Its servers and join tokens go with it. A cluster that runs an environment cannot be deleted.", "Delete cluster "+cl, settingsPath(r)) {
		return
	}
	if _, err := c.call(r, s.token, "DELETE", apiPath(r, "/clusters/"+esc(cl)), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, settingsPath(r), "Cluster "+cl+" deleted.")
}

func (c *Console) revokeServer(w http.ResponseWriter, r *http.Request, s *session) {
	cl, id := r.PathValue("cluster"), r.PathValue("server")
	name := r.PostFormValue("name")
	if name == "" {
		name = id
	}
	if !c.confirm(w, r, s, domain.ScopeServersWrite, "Revoke the server "+name+" of cluster "+cl+"? Its agent is disconnected at once and refused afterwards.", "Revoke server", settingsPath(r)) {
		return
	}
	if _, err := c.call(r, s.token, "DELETE", apiPath(r, "/clusters/"+esc(cl)+"/servers/"+esc(id)), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, settingsPath(r), "Server "+name+" revoked.")
}

// act sends one change to the API and answers with what became of it: the
// change set it waits in (a protected environment), or notice.
func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session, method, path string, body any, notice string) {
	cs, err := c.change(r, s, method, path, body)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.changed(w, r, cs, notice)
}
