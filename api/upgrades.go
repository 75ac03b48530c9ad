package api

import (
	"time"
)

// UpgradeRequest upgrades one server's agent to the control plane's version.
type UpgradeRequest struct {
	// Force installs a version the agent rolled back in the last 24 hours.
	Force bool `json:"force,omitempty"`
}

// UpgradeAccepted is an upgrade on its way.
type UpgradeAccepted struct {
	UpgradeID string `json:"upgradeId"`
	// Server is org/cluster/name.
	Server string `json:"server"`
	From   string `json:"from"`
	To     string `json:"to"`
}

// RolloutRequest upgrades the agents of an organisation's servers that can
// be upgraded now, one at a time in name order.
type RolloutRequest struct {
	// Org names the organisation (the caller needs servers:write there).
	Org string `json:"org"`
}

// RolloutAccepted is a staged rollout on its way.
type RolloutAccepted struct {
	RolloutID string `json:"rolloutId"`
	Version   string `json:"version"`
	// Servers are the servers it upgrades, in order (org/cluster/name).
	Servers []string `json:"servers"`
}

// InstanceUpgrade is where the instance stands: the control plane's version,
// the agent binaries it serves, each server's version skew and last
// upgrade, and the last pre-upgrade backup of the control plane.
type InstanceUpgrade struct {
	Version string `json:"version"`
	// AgentBinaries are the architectures the control plane serves an agent
	// binary for (empty for a build without embedded agents).
	AgentBinaries    []string        `json:"agentBinaries"`
	AgentAutoUpgrade bool            `json:"agentAutoUpgrade"`
	Servers          []ServerUpgrade `json:"servers"`
	// PreUpgradeBackup is the outcome of the last backup taken before a
	// schema migration (null when none was taken).
	PreUpgradeBackup *PreUpgradeBackup `json:"preUpgradeBackup" nullable:"true"`
}

// LastUpgrade is a server's last agent upgrade: in progress, succeeded,
// failed, rolled back (by the agent, learned from its facts) or timed out.
// Message is the sentence its page shows ("The agent rolled the upgrade
// back: ...").
type LastUpgrade struct {
	UpgradeID string    `json:"upgradeId,omitempty"`
	From      string    `json:"from,omitempty"`
	Version   string    `json:"version"`
	State     string    `json:"state"`
	Step      string    `json:"step,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Message   string    `json:"message"`
	Auto      bool      `json:"auto,omitempty"`
	Force     bool      `json:"force,omitempty"`
	RolloutID string    `json:"rolloutId,omitempty"`
	At        time.Time `json:"at"`
}

// ServerUpgrade is where a server's agent stands against the control
// plane: its version and the skew, whether it can upgrade itself, and its
// last upgrade.
type ServerUpgrade struct {
	ID        string `json:"id"`
	OrgID     string `json:"orgId"`
	ClusterID string `json:"clusterId"`
	// Server is org/cluster/name.
	Server    string `json:"server"`
	Name      string `json:"name"`
	Connected bool   `json:"connected"`
	Version   string `json:"version"`
	Arch      string `json:"arch,omitempty"`
	// Skew is "Behind 1.5.0", "Newer than the control plane", "Version not
	// comparable", or "" when the agent runs the control plane's version
	// (also "" before the agent first connected).
	Skew string `json:"skew"`
	// CannotUpgrade says why the agent cannot upgrade itself; "" when it can
	// (or has not said yet).
	CannotUpgrade string       `json:"cannotUpgrade,omitempty"`
	LastUpgrade   *LastUpgrade `json:"lastUpgrade,omitempty"`
}

// PreUpgradeBackup is the record of the last backup taken before an upgrade
// of the control plane.
type PreUpgradeBackup struct {
	Time time.Time `json:"time"`
	// Source is "startup" (the server's check) or "installer"
	// (nebulactrl-server pre-upgrade-backup).
	Source        string `json:"source"`
	FromVersion   string `json:"fromVersion"`
	TargetVersion string `json:"targetVersion"`
	Succeeded     bool   `json:"succeeded"`
	// Forced: the backup failed and --force went on anyway.
	Forced bool `json:"forced,omitempty"`
	// Reused: the start-up check used the installer's backup.
	Reused       bool   `json:"reused,omitempty"`
	Destination  string `json:"destination"`
	Dump         string `json:"dump,omitempty"`
	DatabaseSize int64  `json:"databaseSizeBytes,omitempty"`
	SHA256       string `json:"sha256,omitempty"`
	Error        string `json:"error,omitempty"`
}
