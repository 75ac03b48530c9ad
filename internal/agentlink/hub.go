package agentlink

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The link owns the hub its agents are connected to: the hub's callbacks
// are the link's, and every delivery to the agents (desired state, builds,
// agent upgrades) goes through the link.

func (l *Link) makeHub() error {
	ctx, stop := context.WithCancel(context.Background())
	hub, err := transport.NewHub(ctx, transport.HubConfig{
		Authenticate: func(r *http.Request) (transport.Peer, error) {
			p, err := l.Authenticate(r)
			if err == nil && l.cfg.Authenticated != nil {
				l.cfg.Authenticated(r, p.ServerID)
			}
			return p, err
		},
		Heads: l.Heads, Fetch: l.Fetch,
		MeshHeads: l.MeshHeads, MeshFetch: l.MeshFetch, OnMeshReport: l.OnMeshReport,
		RevisionHash: func(ctx context.Context, envID string, n int) (string, error) {
			return projections.RevisionHash(ctx, l.cfg.Pool, envID, n)
		},
		OnHello: l.OnHello, OnHeartbeat: l.OnHeartbeat, OnAck: l.OnAck, OnDisconnect: l.OnDisconnect,
		OnStatus: l.OnStatus, OnLogs: l.OnLogs, OnStage: l.OnStage, OnUpgradeResult: l.UpgradeResult,
		OnBuildReport: l.OnBuildReport, OnBuildLogs: l.OnBuildLogs,
		Logger: l.cfg.Logger,
	})
	if err != nil {
		stop()
		return err
	}
	l.hub.Store(hub)
	l.stopHub = stop
	return nil
}

// Connect serves GET transport.ConnectPath: an agent's websocket.
func (l *Link) Connect(w http.ResponseWriter, r *http.Request) { l.hub.Load().ServeHTTP(w, r) }

// Connected lists the servers whose agents are connected to this replica.
func (l *Link) Connected() []string {
	peers := l.hub.Load().Connected()
	ids := make([]string, len(peers))
	for i, p := range peers {
		ids[i] = p.ServerID
	}
	return ids
}

// Close closes the agents' connections with a reason (the agents connect
// again, to another replica); Wait waits for them to end.
func (l *Link) Close() { l.stopHub() }

// Wait waits for the connections to end after Close, and writes the
// heartbeats and acknowledgements still queued.
func (l *Link) Wait() {
	l.hub.Load().Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.batch.Flush(ctx)
}

// PushRevisions pushes new revisions to this replica's agents whenever
// events or projections commit anywhere (waker), and drops agents whose
// credential was revoked, on whichever replica it was revoked, until ctx
// ends.
func (l *Link) PushRevisions(ctx context.Context, waker *eventstore.Waker) error {
	wake := waker.Subscribe()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		full := false
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
			full = true
		}
		// A notification names the revision stream and version appended to:
		// those go straight to their clusters' agents. Everything is looked
		// at when notifications were lost, and every few seconds anyway.
		appended, lost := waker.TakeAppended()
		revisions := map[string]int{}
		changedClusters := map[string]bool{}
		meshChanged := false
		for _, p := range appended {
			stream, v, ok := strings.Cut(p, "@")
			kind, id := domain.StreamID(stream)
			meshChanged = meshChanged || kind == "meshrev"
			// A revoked credential is an event of its cluster's stream.
			if kind == "cluster" {
				changedClusters[id] = true
			}
			if n, err := strconv.Atoi(v); ok && stream == domain.RevisionStream(id) && err == nil && n > revisions[id] {
				revisions[id] = n
			}
		}
		switch {
		case full || lost:
			if err := l.hub.Load().Refresh(ctx); err != nil && ctx.Err() == nil {
				l.cfg.Logger.Warn("pushing revisions to agents", "err", err)
			}
		case len(revisions) > 0:
			heads, err := l.HeadsOf(ctx, revisions)
			if err != nil {
				l.cfg.Logger.Warn("pushing revisions to agents", "err", err)
				continue
			}
			l.hub.Load().Deliver(ctx, heads)
		}
		if full || lost || meshChanged {
			if err := l.hub.Load().RefreshMesh(ctx); err != nil && ctx.Err() == nil {
				l.cfg.Logger.Warn("pushing mesh revisions to agents", "err", err)
			}
		}
		if !full && !lost && len(changedClusters) == 0 {
			continue
		}
		// Every connection at a full look; else those of the clusters whose
		// streams changed (creating clusters while 10,000 agents were
		// connected read every agent's credential at each one).
		var ids []string
		for _, p := range l.hub.Load().Connected() {
			if full || lost || changedClusters[p.ClusterID] {
				ids = append(ids, p.ServerID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		revoked, err := l.Revoked(ctx, ids)
		if err != nil {
			continue
		}
		for _, id := range revoked {
			l.hub.Load().Disconnect(id, "the server's credential was revoked")
		}
	}
}
