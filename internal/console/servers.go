package console

import (
	"net/http"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

// The Servers page and each server's page offer an agent upgrade only where
// the API would accept it, decided from what the API returns of the server
// (connected, version and skew, cannotUpgrade, noAgentBinary, lastUpgrade)
// in the order the API checks it (domain.ServerLink.Eligible).

// What a server's page offers its writers.
const (
	offerUpgrade = "upgrade" // Upgrade agent
	offerRetry   = "retry"   // Retry anyway: force after a roll back
)

// serverView is a server with what can be done about its agent.
type serverView struct {
	api.Server
	Cluster string
	// Offer is offerUpgrade, offerRetry or "" (nothing: Why says why, or
	// the agent runs the control plane's version).
	Offer string
	Why   string
	// InRollout: the server can be upgraded now by Upgrade agents (a staged
	// rollout takes only provably behind agents and no roll back).
	InRollout bool
}

// upgradeOffer decides what a server's page offers, as the API decides an
// upgrade of the agent to cp at now.
func upgradeOffer(s api.Server, cp string, now time.Time) (offer, why string) {
	last := s.LastUpgrade
	switch {
	case s.RevokedAt != nil:
		return "", "The server's credential is revoked."
	case !s.Connected:
		return "", "The server's agent is not connected."
	case last != nil && last.State == domain.UpgradeInProgress:
		return "", last.Message + "."
	case s.Version == cp || s.Skew == "":
		return "", ""
	case s.Skew == version.SkewNewer:
		return "", "The agent is newer than the control plane."
	case s.CannotUpgrade != "":
		if strings.HasPrefix(s.CannotUpgrade, "the agent ") {
			return "", "T" + s.CannotUpgrade[1:] + "."
		}
		return "", "The agent cannot upgrade itself: " + s.CannotUpgrade + "."
	case s.NoAgentBinary:
		arch := s.Arch
		if arch == "" {
			arch = "an unknown architecture"
		}
		return "", "The control plane carries no agent binary for " + arch + "."
	case last != nil && last.State == domain.UpgradeRolledBack && last.Version == cp && now.Before(last.At.Add(domain.RolledBackHold)):
		return offerRetry, ""
	}
	return offerUpgrade, ""
}

func (c *Console) serverView(k api.Cluster, s api.Server) serverView {
	v := serverView{Server: s, Cluster: k.Name}
	v.Offer, v.Why = upgradeOffer(s, c.cfg.Version, c.cfg.Now())
	v.InRollout = v.Offer == offerUpgrade && version.Behind(s.Version, c.cfg.Version)
	return v
}

type serverCluster struct {
	api.Cluster
	Servers []serverView
}

type serversData struct {
	Clusters []serverCluster
	Version  string
	// Rollout: Upgrade agents would upgrade at least one server, and no
	// rollout is in progress.
	Rollout bool
	// Switch shows the automatic upgrade switch (instance administrators
	// only); AutoUpgrade is the instance's setting then.
	Switch, AutoUpgrade bool
}

// servers reads the organisation's clusters and their servers.
func (c *Console) servers(r *http.Request, s *session) (*serversData, error) {
	d := &serversData{Version: c.cfg.Version}
	cl, err := list[api.Cluster](c, r, s.token, apiPath(r, "/clusters"), 0)
	if err != nil {
		return nil, err
	}
	rolling := false
	for _, k := range cl {
		ss, err := list[api.Server](c, r, s.token, apiPath(r, "/clusters/"+esc(k.Name)+"/servers"), 0)
		if err != nil {
			return nil, err
		}
		row := serverCluster{Cluster: k}
		for _, sv := range ss {
			v := c.serverView(k, sv)
			d.Rollout = d.Rollout || v.InRollout
			if u := sv.LastUpgrade; u != nil && u.State == domain.UpgradeInProgress && u.RolloutID != "" {
				rolling = true
			}
			row.Servers = append(row.Servers, v)
		}
		d.Clusters = append(d.Clusters, row)
	}
	d.Rollout = d.Rollout && !rolling
	return d, nil
}

func (c *Console) serversPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.servers(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	if s.me.User.InstanceAdmin {
		var st api.InstanceSettings
		if _, err := c.call(r, s.token, "GET", "/api/v1/instance/settings", nil, &st); err != nil {
			c.fail(w, r, s, err)
			return
		}
		d.Switch, d.AutoUpgrade = true, st.AgentAutoUpgrade
	}
	c.render(w, r, http.StatusOK, "servers", c.view(r, s, "Servers", d, ""))
}

// serverPage is one server: its agent's version, architecture, connection,
// last upgrade, and the upgrade it can be given.
func (c *Console) serverPage(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := c.servers(r, s)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	id := r.PathValue("server")
	for _, k := range d.Clusters {
		for _, sv := range k.Servers {
			if sv.ID == id {
				c.render(w, r, http.StatusOK, "server", c.view(r, s, "Server "+sv.Name, &sv, ""))
				return
			}
		}
	}
	c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "There is no server "+id+" in this organisation."))
}

func (c *Console) upgradeOne(w http.ResponseWriter, r *http.Request, s *session) {
	req := api.UpgradeRequest{Force: r.PostFormValue("force") == "true"}
	id := r.PathValue("server")
	if _, err := c.call(r, s.token, "POST", "/api/v1/servers/"+esc(id)+"/upgrade", req, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	back := "/o/" + esc(r.PathValue("org")) + "/servers"
	if r.PostFormValue("from") == "server" {
		back += "/" + esc(id)
	}
	c.done(w, r, back, "Upgrade requested.")
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

// setAutoUpgrade sets the instance's automatic agent upgrade, from the
// Servers page (next names it) or the Instance page.
func (c *Console) setAutoUpgrade(w http.ResponseWriter, r *http.Request, s *session) {
	on := r.PostFormValue("agentAutoUpgrade") == "on"
	if _, err := c.call(r, s.token, "PUT", "/api/v1/instance/settings", api.SettingsRequest{AgentAutoUpgrade: &on}, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	back := "/instance"
	if next := r.PostFormValue("next"); next != "" {
		back = safeNext(next)
	}
	c.done(w, r, back, "Automatic upgrade "+map[bool]string{true: "on", false: "off"}[on]+".")
}
