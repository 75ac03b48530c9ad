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
//
// A notified change goes straight to its clusters' agents. Every few
// seconds, and whenever notifications were lost, everything is looked at
// (every connection's heads, mesh and credential) on a goroutine of its
// own: with 10,000 agents a look takes long enough that a change notified
// during it waited for it, and those waits were the slowest deliveries.
// Both deliver to a connection one at a time (transport's per-connection
// lock), and a connection is never sent an older revision than it was.
func (l *Link) PushRevisions(ctx context.Context, waker *eventstore.Waker) error {
	wake := waker.Subscribe()
	look := make(chan struct{}, 1)
	lookNow := func() {
		select {
		case look <- struct{}{}:
		default: // a look is already due
		}
	}
	looked := make(chan struct{})
	go func() {
		defer close(looked)
		l.lookEverywhere(ctx, look)
	}()
	defer func() { <-looked }()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-tick.C:
			lookNow()
			continue
		}
		// A notification names the revision stream and version appended to:
		// those go straight to their clusters' agents.
		appended, lost := waker.TakeAppended()
		if lost {
			lookNow()
		}
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
		if len(revisions) > 0 {
			heads, err := l.HeadsOf(ctx, revisions)
			if err != nil {
				l.cfg.Logger.Warn("pushing revisions to agents", "err", err)
			} else {
				l.hub.Load().Deliver(ctx, heads)
			}
		}
		if meshChanged {
			if err := l.hub.Load().RefreshMesh(ctx); err != nil && ctx.Err() == nil {
				l.cfg.Logger.Warn("pushing mesh revisions to agents", "err", err)
			}
		}
		if len(changedClusters) == 0 {
			continue
		}
		// The connections of the clusters whose streams changed (creating
		// clusters while 10,000 agents were connected read every agent's
		// credential at each one).
		var ids []string
		for _, p := range l.hub.Load().ConnectedIn(changedClusters) {
			ids = append(ids, p.ServerID)
		}
		l.disconnectRevoked(ctx, ids)
	}
}

// lookEverywhere looks at every connection whenever look says so, until
// ctx ends: the revisions and mesh states it lacks are sent, and it is
// dropped when its credential was revoked.
func (l *Link) lookEverywhere(ctx context.Context, look <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-look:
		}
		if err := l.hub.Load().Refresh(ctx); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn("pushing revisions to agents", "err", err)
		}
		if err := l.hub.Load().RefreshMesh(ctx); err != nil && ctx.Err() == nil {
			l.cfg.Logger.Warn("pushing mesh revisions to agents", "err", err)
		}
		var ids []string
		for _, p := range l.hub.Load().Connected() {
			ids = append(ids, p.ServerID)
		}
		l.disconnectRevoked(ctx, ids)
	}
}

// disconnectRevoked drops the connections of the servers among ids whose
// credential was revoked.
func (l *Link) disconnectRevoked(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	revoked, err := l.Revoked(ctx, ids)
	if err != nil {
		return
	}
	for _, id := range revoked {
		l.hub.Load().Disconnect(id, "the server's credential was revoked")
	}
}
