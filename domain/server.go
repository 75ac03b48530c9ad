package domain

// ServerLink is the connection history of one server (an agent
// installation): telemetry that the audit log shows, in a stream of its own
// (server-<id>), so that agents connecting and disconnecting never contend
// with people's commands on the cluster's stream. Whether the server may
// connect at all (registered, not revoked) is checked when it authenticates.
// The stream also carries the agent's upgrades (upgrade.go).
type ServerLink struct {
	Connected bool `json:"connected"`
	// Session is the connection's (see transport.Peer): a disconnect of an
	// earlier connection, recorded after the server connected again,
	// changes nothing.
	Session   string `json:"session,omitempty"`
	ClusterID string `json:"clusterId,omitempty"`
	ServerID  string `json:"serverId,omitempty"`
	// Version, Arch, Upgradable and CannotUpgrade are what the agent said at
	// its last connect; Upgradable is nil for an agent that predates
	// self-upgrades (it says nothing about them).
	Version       string `json:"version,omitempty"`
	Arch          string `json:"arch,omitempty"`
	Upgradable    *bool  `json:"upgradable,omitempty"`
	CannotUpgrade string `json:"cannotUpgrade,omitempty"`
	// Upgrade is the upgrade in progress.
	Upgrade *PendingUpgrade `json:"upgrade,omitempty"`
	// RolledBack is the last version the agent rolled back.
	RolledBack *RolledBack `json:"rolledBack,omitempty"`
	// LastReport is the last failure the agent's facts reported, so that
	// it is learned once.
	LastReport *UpgradeFacts `json:"lastReport,omitempty"`
}

// NewServerLink returns the empty state of a server's link stream.
func NewServerLink() *ServerLink { return &ServerLink{} }

// Apply folds an event into the state.
func (s *ServerLink) Apply(e Event) {
	switch e := e.(type) {
	case ServerConnected:
		s.Connected, s.Session = true, e.Session
		s.ClusterID, s.ServerID, s.Version, s.Arch = e.ClusterID, e.ServerID, e.Version, e.Arch
		s.Upgradable, s.CannotUpgrade = e.Upgradable, e.CannotUpgrade
	case ServerDisconnected:
		s.Connected = false
	default:
		s.applyUpgrade(e)
	}
}

// ServerCommand is a command of a server's link.
type ServerCommand interface{ serverCommand() }

// RecordConnection records an agent connecting (Connected) or its
// connection ending.
type RecordConnection struct {
	ClusterID string
	ServerID  string
	Connected bool
	Version   string
	Arch      string
	Reason    string
	// Session names the connection (empty for a caller that does not say).
	Session string
	// Upgradable is the hello's "upgradable" (nil when the agent does not
	// say: it predates self-upgrades), CannotUpgrade its reason when false.
	Upgradable    *bool
	CannotUpgrade string
	// AgentUpgrade is the hello's facts.agentUpgrade.
	AgentUpgrade *UpgradeFacts
}

func (RecordConnection) serverCommand() {}

// Decide decides a server link command.
func (s *ServerLink) Decide(cmd ServerCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case RecordConnection:
		if err := ValidateID("cluster", c.ClusterID); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("server", c.ServerID); err != nil {
			return Decision{}, err
		}
		for _, f := range []struct{ name, value string }{{"version", c.Version}, {"arch", c.Arch}, {"reason", c.Reason}, {"cannotUpgrade", c.CannotUpgrade}, {"session", c.Session}} {
			if err := ValidateText(f.name, f.value, 200); err != nil {
				return Decision{}, err
			}
		}
		if c.Connected {
			if f := c.AgentUpgrade; f != nil {
				for _, x := range []struct{ name, value string }{{"from", f.From}, {"to", f.To}, {"state", f.State}, {"reason", f.Reason}} {
					if err := ValidateText("agentUpgrade."+x.name, x.value, 1000); err != nil {
						return Decision{}, err
					}
				}
			}
			events := []Event{ServerConnected{ClusterID: c.ClusterID, ServerID: c.ServerID, Version: c.Version, Arch: c.Arch,
				Upgradable: c.Upgradable, CannotUpgrade: c.CannotUpgrade, Session: c.Session}}
			events = append(events, s.upgradeOnConnect(c, m)...)
			return decided(events...), nil
		}
		if !s.Connected || c.Session != "" && s.Session != "" && c.Session != s.Session {
			return Decision{}, nil
		}
		return decided(ServerDisconnected{ClusterID: c.ClusterID, ServerID: c.ServerID, Reason: c.Reason}), nil
	case RequestUpgrade:
		return s.decideUpgrade(c, m)
	case ReportUpgradeResult:
		return s.decideResult(c, m)
	case ExpireUpgrade:
		return s.decideExpiry(c, m)
	}
	return Decision{}, invalidf("command %T is not a server command", cmd)
}
