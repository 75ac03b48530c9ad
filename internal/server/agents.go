package server

import (
	"context"

	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/transport"
)

// upgradeSender sends the reactions' agent upgrades as the protocol's
// agent_upgrade frames over the agent link (reactions never speak the
// protocol; the link owns delivery to the agents).
type upgradeSender struct{ link *agentlink.Link }

func (u upgradeSender) SendUpgrade(ctx context.Context, serverID string, up reactions.AgentUpgrade) error {
	return u.link.SendUpgrade(ctx, serverID, transport.AgentUpgrade{ID: up.ID, Version: up.Version, SHA256: up.SHA256, Force: up.Force})
}
