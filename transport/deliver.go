package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// deliverConnected sends a connection that just said hello every revision
// newer than what it has, and its mesh state; later revisions reach it
// through Deliver and Refresh. It runs once and ends: an idle connection
// keeps no goroutine of its own for deliveries.
func (h *Hub) deliverConnected(ctx context.Context, ac *agentConn) {
	select {
	case <-ac.c.closed():
		return
	case <-ctx.Done():
		return
	default:
	}
	heads, err := h.cfg.Heads(ctx, []string{ac.peer.ClusterID})
	if err != nil {
		h.cfg.Logger.Warn("looking up revisions for an agent", "server", ac.peer.Name, "err", err)
		return
	}
	h.deliver(ctx, ac, heads[ac.peer.ClusterID], nil)
	h.deliverMesh(ctx, ac, nil)
}

// deliverMesh sends the connection its cluster's latest mesh revision when
// it does not have it (head: known already, or 0 to look it up).
func (h *Hub) deliverMesh(ctx context.Context, ac *agentConn, heads map[string]int) {
	if h.cfg.MeshHeads == nil || h.cfg.MeshFetch == nil {
		return
	}
	ac.mu.Lock()
	mesh, have := ac.mesh, ac.meshSent
	ac.mu.Unlock()
	if !mesh {
		return
	}
	cluster := ac.peer.ClusterID
	if heads == nil {
		var err error
		if heads, err = h.cfg.MeshHeads(ctx, []string{cluster}); err != nil {
			h.cfg.Logger.Warn("looking up the mesh revision for an agent", "server", ac.peer.Name, "err", err)
			return
		}
	}
	head := heads[cluster]
	if head <= have {
		return
	}
	ac.delivering.Lock()
	defer ac.delivering.Unlock()
	// Another delivery may have sent it (or a newer one) meanwhile: a full
	// look and a notified change run at once.
	ac.mu.Lock()
	have = ac.meshSent
	ac.mu.Unlock()
	if head <= have {
		return
	}
	st, err := h.cfg.MeshFetch(ctx, cluster, head)
	if err != nil {
		h.cfg.Logger.Warn("loading a mesh revision for an agent", "cluster", cluster, "revision", head, "err", err)
		return
	}
	frame, err := Encode(TypeMeshState, fmt.Sprintf("mesh/%d", head), st)
	if err != nil {
		return
	}
	if err := h.recheck(ctx, ac); err != nil {
		return
	}
	if err := ac.c.send(frame); err != nil {
		return
	}
	ac.mu.Lock()
	ac.meshSent = max(ac.meshSent, head)
	ac.mu.Unlock()
}

// RefreshMesh sends every connected agent that relays mesh states its
// cluster's latest mesh revision, when it does not have it: called when mesh
// revisions were recorded (here, or on another replica).
func (h *Hub) RefreshMesh(ctx context.Context) error {
	if h.cfg.MeshHeads == nil {
		return nil
	}
	conns, ids := h.connected(func(ac *agentConn) bool {
		ac.mu.Lock()
		defer ac.mu.Unlock()
		return ac.mesh
	})
	if len(conns) == 0 {
		return nil
	}
	heads, err := h.cfg.MeshHeads(ctx, ids)
	if err != nil {
		return fmt.Errorf("looking up the latest mesh revisions: %w", err)
	}
	eachBounded(conns, func(ac *agentConn) { h.deliverMesh(ctx, ac, heads) })
	return nil
}

// connected returns the connections keep keeps (every one when nil) and
// the ids of their clusters, each once.
func (h *Hub) connected(keep func(*agentConn) bool) ([]*agentConn, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	conns := make([]*agentConn, 0, len(h.conns))
	clusters := map[string]bool{}
	var ids []string
	for _, ac := range h.conns {
		if keep != nil && !keep(ac) {
			continue
		}
		conns = append(conns, ac)
		if !clusters[ac.peer.ClusterID] {
			clusters[ac.peer.ClusterID] = true
			ids = append(ids, ac.peer.ClusterID)
		}
	}
	return conns, ids
}

// eachBounded runs f for every connection, 16 at a time.
func eachBounded(conns []*agentConn, f func(*agentConn)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for _, ac := range conns {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(ac)
		}()
	}
	wg.Wait()
}

// deliver sends the heads the connection does not have yet. fetched caches
// documents across connections in one refresh (both replicas of a cluster
// need the same ones).
//
// The first head of an environment on a connection is also checked against
// what the agent's namespace records as applied: an agent that applied a
// newer revision, or the same number with another document, than this
// control plane's latest (it was restored from a backup taken before) is
// sent the latest marked Rewind, so that the cluster returns to what the
// control plane knows instead of keeping what it lost.
func (h *Hub) deliver(ctx context.Context, ac *agentConn, heads []Head, fetched *sync.Map) {
	ac.delivering.Lock()
	defer ac.delivering.Unlock()
	for _, hd := range heads {
		rewind, decided := h.rewind(ctx, ac, hd)
		ac.mu.Lock()
		have := ac.sent[hd.EnvironmentID]
		ac.mu.Unlock()
		if !rewind && hd.Revision <= have {
			continue
		}
		var frame []byte
		key := fmt.Sprintf("%s/%d", hd.EnvironmentID, hd.Revision)
		cacheKey := key
		if rewind {
			cacheKey += "/rewind"
		}
		if fetched != nil {
			if f, ok := fetched.Load(cacheKey); ok {
				frame = f.([]byte)
			}
		}
		if frame == nil {
			ds, err := h.cfg.Fetch(ctx, hd.EnvironmentID, hd.Revision)
			if err != nil {
				h.cfg.Logger.Warn("loading a revision for an agent", "environment", hd.EnvironmentID, "revision", hd.Revision, "err", err)
				continue
			}
			ds.Rewind = rewind
			if frame, err = Encode(TypeDesiredState, key, ds); err != nil {
				continue
			}
			if fetched != nil {
				fetched.Store(cacheKey, frame)
			}
		}
		// A desired state carries opened secrets: only to a credential that
		// is valid now, not merely at the upgrade.
		if err := h.recheck(ctx, ac); err != nil {
			if errors.Is(err, ErrUnavailable) {
				h.cfg.Logger.Warn("cannot check an agent's credential; its desired state waits", "server", ac.peer.Name, "err", err)
			}
			return
		}
		if rewind {
			h.cfg.Logger.Warn("an agent applied revisions this control plane does not have (restored from a backup?): sending its latest to rewind to",
				"server", ac.peer.Name, "environment", hd.EnvironmentID, "revision", hd.Revision, "recorded", decided.Revision)
		}
		if err := ac.c.send(frame); err != nil {
			return
		}
		ac.mu.Lock()
		if rewind {
			delete(ac.recorded, hd.EnvironmentID)
			ac.sent[hd.EnvironmentID] = hd.Revision
		} else if hd.Revision > ac.sent[hd.EnvironmentID] {
			ac.sent[hd.EnvironmentID] = hd.Revision
		}
		ac.mu.Unlock()
	}
}

// rewind decides, for the first head of an environment on a connection,
// whether the agent is ahead of this control plane (see deliver); it
// returns what the agent records when so. An agent behind the head needs no
// rewind, and one level with it neither, when the documents are the same.
func (h *Hub) rewind(ctx context.Context, ac *agentConn, hd Head) (bool, AppliedRevision) {
	ac.mu.Lock()
	rec, pending := ac.recorded[hd.EnvironmentID]
	ac.mu.Unlock()
	if !pending {
		return false, rec
	}
	settle := func() {
		ac.mu.Lock()
		delete(ac.recorded, hd.EnvironmentID)
		ac.mu.Unlock()
	}
	switch {
	case hd.Revision > rec.Revision:
		settle()
		return false, rec
	case hd.Revision < rec.Revision:
		return true, rec
	case h.cfg.RevisionHash == nil || rec.Hash == "":
		settle()
		return false, rec
	}
	hash, err := h.cfg.RevisionHash(ctx, hd.EnvironmentID, hd.Revision)
	if err != nil {
		// Decided by the next delivery.
		h.cfg.Logger.Warn("reading a revision's hash for an agent", "environment", hd.EnvironmentID, "revision", hd.Revision, "err", err)
		return false, rec
	}
	if hash == rec.Hash {
		settle()
		return false, rec
	}
	return true, rec
}

// Deliver sends the given heads to the connected agents of their clusters:
// for revisions whose recording this replica was told of.
func (h *Hub) Deliver(ctx context.Context, heads map[string][]Head) {
	h.mu.Lock()
	var conns []*agentConn
	for cluster := range heads {
		for ac := range h.byCluster[cluster] {
			conns = append(conns, ac)
		}
	}
	h.mu.Unlock()
	var fetched sync.Map
	var wg sync.WaitGroup
	for _, ac := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.deliver(ctx, ac, heads[ac.peer.ClusterID], &fetched)
		}()
	}
	wg.Wait()
}

// Refresh sends every connected agent the revisions it does not have: called
// when revisions were recorded, on this replica or another.
func (h *Hub) Refresh(ctx context.Context) error {
	conns, ids := h.connected(nil)
	if len(conns) == 0 {
		return nil
	}
	heads, err := h.cfg.Heads(ctx, ids)
	if err != nil {
		return fmt.Errorf("looking up the latest revisions: %w", err)
	}
	var fetched sync.Map
	eachBounded(conns, func(ac *agentConn) { h.deliver(ctx, ac, heads[ac.peer.ClusterID], &fetched) })
	return nil
}
