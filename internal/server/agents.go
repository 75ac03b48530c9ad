package server

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/transport"
)

// refreshHub pushes new revisions to this replica's agents whenever events
// or projections commit anywhere, and drops agents whose credential was
// revoked, on whichever replica it was revoked.
func refreshHub(ctx context.Context, hub *transport.Hub, link *agentlink.Link, waker *eventstore.Waker, log *slog.Logger) error {
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
		clusterChanged := false
		for _, p := range appended {
			stream, v, ok := strings.Cut(p, "@")
			// A revoked credential is an event of its cluster's stream.
			clusterChanged = clusterChanged || strings.HasPrefix(stream, "cluster-")
			env, isRev := strings.CutPrefix(stream, "revisions-")
			if n, err := strconv.Atoi(v); ok && isRev && err == nil && n > revisions[env] {
				revisions[env] = n
			}
		}
		switch {
		case full || lost:
			if err := hub.Refresh(ctx); err != nil && ctx.Err() == nil {
				log.Warn("pushing revisions to agents", "err", err)
			}
		case len(revisions) > 0:
			heads, err := link.HeadsOf(ctx, revisions)
			if err != nil {
				log.Warn("pushing revisions to agents", "err", err)
				continue
			}
			hub.Deliver(ctx, heads)
		}
		if !full && !lost && !clusterChanged {
			continue
		}
		peers := hub.Connected()
		if len(peers) == 0 {
			continue
		}
		ids := make([]string, len(peers))
		for i, p := range peers {
			ids[i] = p.ServerID
		}
		revoked, err := link.Revoked(ctx, ids)
		if err != nil {
			continue
		}
		for _, id := range revoked {
			hub.Disconnect(id, "the server's credential was revoked")
		}
	}
}

// upgradeSender sends the reactions' agent upgrades as the protocol's
// agent_upgrade frames over the agent link.
type upgradeSender struct{ link *agentlink.Link }

func (u upgradeSender) SendUpgrade(ctx context.Context, serverID string, up reactions.AgentUpgrade) error {
	return u.link.SendUpgrade(ctx, serverID, transport.AgentUpgrade{ID: up.ID, Version: up.Version, SHA256: up.SHA256, Force: up.Force})
}

// connectedServers lists the servers whose agents are connected to this
// replica's hub.
func connectedServers(hub *transport.Hub) func() []string {
	return func() []string {
		peers := hub.Connected()
		ids := make([]string, len(peers))
		for i, p := range peers {
			ids[i] = p.ServerID
		}
		return ids
	}
}
