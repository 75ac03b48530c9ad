package console

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

type settingsData struct {
	Roles      []string
	Members    []api.Member
	Tokens     []api.Token
	Clusters   []api.Cluster
	NewToken   string
	JoinTokens map[string][]api.JoinToken
	// Servers are each cluster's servers (Revoke server).
	Servers   map[string][]api.Server
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
	if d.Members, err = list[api.Member](c, r, s.token, apiPath(r, "/members"), 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	if d.Tokens, err = list[api.Token](c, r, s.token, "/api/v1/tokens", 0); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d.Tokens = slices.DeleteFunc(d.Tokens, func(t api.Token) bool { return t.Session })
	if v.Can(string(domain.ScopeServersRead)) {
		if d.Clusters, err = list[api.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0); err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.JoinTokens = map[string][]api.JoinToken{}
		d.Servers = map[string][]api.Server{}
		for _, k := range d.Clusters {
			if jt, err := list[api.JoinToken](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/join-tokens"), 0); err == nil {
				d.JoinTokens[k.Name] = jt
			}
			if sv, err := list[api.Server](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/servers"), 0); err == nil {
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
