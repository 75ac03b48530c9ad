package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/transport"
)

// mesh answers the organisation's mesh: every node with its address, key
// fingerprint, endpoint and each peer's latest handshake, and whether it is
// reachable.
func (a *API) mesh(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	m, err := a.cmd.MeshState(ctx, c.org.ID)
	if err != nil {
		return 0, nil, err
	}
	clusters, err := query.Clusters(ctx, a.pool, c.org.ID)
	if err != nil {
		return 0, nil, err
	}
	names := map[string]string{}
	for _, cl := range clusters {
		names[cl.ID] = cl.Name
	}
	reports, err := query.MeshStatus(ctx, a.pool, c.org.ID)
	if err != nil {
		return 0, nil, err
	}
	now := a.cfg.Now().UTC()
	byKey := map[string]*domain.MeshNode{}
	for _, n := range m.Nodes {
		byKey[n.PublicKey] = n
	}
	out := api.Mesh{Network: m.NetworkOrDefault(), Nodes: []api.MeshNode{}, Overlaps: []api.MeshOverlap{}}
	for _, n := range m.Nodes {
		v := api.MeshNode{Cluster: names[n.ClusterID], ClusterID: n.ClusterID, Node: n.Node, Address: n.Address, PublicKey: n.PublicKey,
			Fingerprint: domain.KeyFingerprint(n.PublicKey), Endpoint: n.Endpoint, Keepalive: n.Keepalive || n.Endpoint == "",
			JoinedAt: n.JoinedAt, KeyRotatedAt: n.KeyRotatedAt, RotateRequested: n.RotateRequested, Peers: []api.MeshPeerHealth{}}
		rep, ok := reports[n.ClusterID]
		var own transport.MeshNodeReport
		var reportedAt time.Time
		if ok {
			for _, nr := range rep.Nodes {
				if nr.Node != n.Node {
					continue
				}
				own, reportedAt = nr, rep.ReportedAt
				at := rep.ReportedAt
				v.ReportedAt, v.Revision, v.Userspace = &at, nr.Revision, nr.Userspace
				for _, p := range nr.Peers {
					h := api.MeshPeerHealth{Endpoint: p.Endpoint, RxBytes: p.RxBytes, TxBytes: p.TxBytes}
					if peer := byKey[p.PublicKey]; peer != nil {
						h.Cluster, h.Node = names[peer.ClusterID], peer.Node
					}
					if t, err := time.Parse(time.RFC3339, p.LastHandshake); err == nil {
						h.LastHandshake = &t
					}
					v.Peers = append(v.Peers, h)
				}
			}
		}
		v.Reachable, v.Reason = query.MeshReachable(own, reportedAt, now, len(m.Nodes) == 1)
		out.Nodes = append(out.Nodes, v)
	}
	slices.SortFunc(out.Nodes, func(a, b api.MeshNode) int {
		if c := strings.Compare(a.Cluster, b.Cluster); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	for _, o := range m.Overlaps() {
		reason := o.Reason
		for id, name := range names {
			reason = strings.ReplaceAll(reason, "cluster "+id, "cluster "+name)
		}
		out.Overlaps = append(out.Overlaps, api.MeshOverlap{Cluster: names[o.ClusterID], Reason: reason})
	}
	return http.StatusOK, out, nil
}

// updateMesh sets the mesh range.
func (a *API) updateMesh(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.MeshSettingsRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	res, err := a.cmd.Mesh(r.Context(), commandContext(r, c), c.org.ID, domain.UpdateMeshSettings{OrgID: c.org.ID, Network: req.Network})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(r.Context(), res); err != nil {
		return 0, nil, err
	}
	return a.mesh(w, r, c)
}

// rotateMesh asks a cluster's nodes, or one, for new keys.
func (a *API) rotateMesh(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.MeshRotateRequest
	if len(c.body) > 0 {
		if err := decodeJSON(c.body, &req); err != nil {
			return 0, nil, err
		}
	}
	res, err := a.cmd.Mesh(r.Context(), commandContext(r, c), c.org.ID,
		domain.RequestMeshKeyRotation{OrgID: c.org.ID, ClusterID: c.cluster.ID, Node: req.Node, Reason: "request"})
	if err != nil {
		return 0, nil, err
	}
	out := api.MeshRotateResponse{Nodes: []string{}}
	for _, e := range res.Events {
		if e, ok := e.(domain.MeshKeyRotationRequested); ok {
			out.Nodes = append(out.Nodes, e.Node)
		}
	}
	return http.StatusAccepted, out, a.settle(r.Context(), res)
}
