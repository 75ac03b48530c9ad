package console

import (
	"net/http"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
)

// The Mesh page: the organisation's WireGuard mesh as GET .../mesh answers
// it, every node with its address, key fingerprint, endpoint, latest
// handshake and whether it is reachable (or why not), the clusters meshed by
// node address only and why, and, for servers:write, Rotate keys per
// cluster.

type meshData struct {
	api.Mesh
	// Clusters names the clusters with nodes, in order, for the Rotate
	// buttons.
	Clusters []string
}

// latestHandshake is a node's latest handshake with any peer.
func latestHandshake(n api.MeshNode) *time.Time {
	var out *time.Time
	for _, p := range n.Peers {
		if p.LastHandshake != nil && (out == nil || p.LastHandshake.After(*out)) {
			out = p.LastHandshake
		}
	}
	return out
}

func (c *Console) meshPage(w http.ResponseWriter, r *http.Request, s *session) {
	var m api.Mesh
	if _, err := c.call(r, s.token, "GET", apiPath(r, "/mesh"), nil, &m); err != nil {
		c.fail(w, r, s, err)
		return
	}
	d := &meshData{Mesh: m}
	for _, n := range m.Nodes {
		if len(d.Clusters) == 0 || d.Clusters[len(d.Clusters)-1] != n.Cluster {
			d.Clusters = append(d.Clusters, n.Cluster)
		}
	}
	c.render(w, r, http.StatusOK, "mesh", c.view(r, s, "Mesh", d, ""))
}

// rotateMesh asks a cluster's nodes for new keys.
func (c *Console) rotateMesh(w http.ResponseWriter, r *http.Request, s *session) {
	var res api.MeshRotateResponse
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/clusters/"+esc(r.PathValue("cluster"))+"/mesh/rotate"), api.MeshRotateRequest{}, &res); err != nil {
		c.fail(w, r, s, err)
		return
	}
	msg := "Every node of " + r.PathValue("cluster") + " was asked for a new key already."
	if len(res.Nodes) > 0 {
		msg = "New keys asked of the nodes of " + r.PathValue("cluster") + "."
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/mesh", msg)
}
