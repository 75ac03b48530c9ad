package domain

// Instance is the instance-wide settings aggregate.
type Instance struct {
	Initialized      bool
	AgentAutoUpgrade bool
}

// NewInstance returns the settings of a fresh instance: agent auto-upgrade is on by default.
func NewInstance() *Instance { return &Instance{AgentAutoUpgrade: true} }

// Apply folds an event into the state.
func (s *Instance) Apply(e Event) {
	if e, ok := e.(InstanceSettingsUpdated); ok {
		s.Initialized, s.AgentAutoUpgrade = true, e.AgentAutoUpgrade
	}
}

// SetAgentAutoUpgrade turns automatic agent upgrades on or off.
type SetAgentAutoUpgrade struct{ Enabled bool }

// Decide decides a settings command.
func (s *Instance) Decide(c SetAgentAutoUpgrade, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if s.Initialized && s.AgentAutoUpgrade == c.Enabled {
		return Decision{}, nil
	}
	return decided(InstanceSettingsUpdated{AgentAutoUpgrade: c.Enabled}), nil
}
