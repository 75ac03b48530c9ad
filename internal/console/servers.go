package console

import (
	"net/http"

	"github.com/nebulactrl/nebulactrl/api"
)

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
	cl, err := list[api.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	for _, k := range cl {
		var row clusterRow
		row.Cluster = k
		if row.Servers, err = list[api.Server](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/servers"), 0); err != nil {
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
