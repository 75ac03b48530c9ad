package projections

import (
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// Why an agent cannot upgrade itself, when it does not say.
const (
	agentPredatesUpgrades = "the agent predates self-upgrades: install a newer agent by hand once"
	agentCannotUpgrade    = "the agent cannot upgrade itself"
)

// applyUpgrade projects what a server's stream says about its agent's
// upgrades into its row of servers.
func (r *readModels) applyUpgrade(e domain.Event) {
	switch d := e.(type) {
	case domain.ServerConnected:
		var cannot any
		switch {
		case d.Upgradable == nil:
			cannot = agentPredatesUpgrades
		case !*d.Upgradable:
			cannot = or(d.CannotUpgrade, agentCannotUpgrade)
		}
		r.servers.update([]any{d.ServerID}, map[string]any{"cannot_upgrade": cannot})
	case domain.AgentUpgradeRequested:
		r.setLastUpgrade(d.ServerID, api.LastUpgrade{UpgradeID: d.UpgradeID, From: d.From, Version: d.To, State: domain.UpgradeInProgress,
			Message: "Upgrading the agent from " + or(d.From, "an unknown version") + " to " + d.To, Auto: d.Auto, Force: d.Force, RolloutID: d.RolloutID, At: d.At})
	case domain.AgentUpgraded:
		r.setLastUpgrade(d.ServerID, api.LastUpgrade{UpgradeID: d.UpgradeID, From: d.From, Version: d.To, State: domain.UpgradeSucceeded,
			Message: "The agent upgraded from " + or(d.From, "an unknown version") + " to " + d.To, RolloutID: d.RolloutID, At: d.At})
	case domain.AgentUpgradeFailed:
		r.setLastUpgrade(d.ServerID, api.LastUpgrade{UpgradeID: d.UpgradeID, Version: d.To, State: d.State, Step: d.Step, Reason: d.Reason,
			Message: d.Message(), RolloutID: d.RolloutID, At: d.At})
	}
}

// setLastUpgrade keeps the upgrade in servers.last_upgrade as the API
// returns it.
func (r *readModels) setLastUpgrade(serverID string, u api.LastUpgrade) {
	r.servers.update([]any{serverID}, map[string]any{"last_upgrade": mustJSON(u)})
}
