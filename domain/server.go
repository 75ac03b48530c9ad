package domain

// ServerLink is the connection history of one server (an agent
// installation): telemetry that the audit log shows, in a stream of its own
// (server-<id>), so that agents connecting and disconnecting never contend
// with people's commands on the cluster's stream. Whether the server may
// connect at all (registered, not revoked) is checked when it authenticates.
type ServerLink struct {
	Connected bool
}

// NewServerLink returns the empty state of a server's link stream.
func NewServerLink() *ServerLink { return &ServerLink{} }

// Apply folds an event into the state.
func (s *ServerLink) Apply(e Event) {
	switch e.(type) {
	case ServerConnected:
		s.Connected = true
	case ServerDisconnected:
		s.Connected = false
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
		for _, f := range []struct{ name, value string }{{"version", c.Version}, {"arch", c.Arch}, {"reason", c.Reason}} {
			if err := ValidateText(f.name, f.value, 200); err != nil {
				return Decision{}, err
			}
		}
		if c.Connected {
			return decided(ServerConnected{ClusterID: c.ClusterID, ServerID: c.ServerID, Version: c.Version, Arch: c.Arch}), nil
		}
		if !s.Connected {
			return Decision{}, nil
		}
		return decided(ServerDisconnected{ClusterID: c.ClusterID, ServerID: c.ServerID, Reason: c.Reason}), nil
	}
	return Decision{}, invalidf("command %T is not a server command", cmd)
}
