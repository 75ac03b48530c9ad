package domain

import (
	"time"
)

// Cluster is a K3s cluster of an organisation and the servers (agent
// installations) that joined it.
type Cluster struct {
	ID         string
	OrgID      string
	Name       string
	Exists     bool
	Deleted    bool
	JoinTokens map[string]*JoinToken
	Servers    map[string]*Server
}

// JoinToken is a cluster's reusable join token.
type JoinToken struct {
	ID        string
	ExpiresAt time.Time
	Revoked   bool
}

// Server is one agent installation.
type Server struct {
	ID      string
	Name    string
	Revoked bool
}

// NewCluster returns the empty state of a cluster stream.
func NewCluster() *Cluster {
	return &Cluster{JoinTokens: map[string]*JoinToken{}, Servers: map[string]*Server{}}
}

// Apply folds an event into the state.
func (c *Cluster) Apply(e Event) {
	switch e := e.(type) {
	case ClusterCreated:
		c.ID, c.OrgID, c.Name, c.Exists = e.ClusterID, e.OrgID, e.Name, true
	case ClusterDeleted:
		c.Deleted = true
	case JoinTokenIssued:
		c.JoinTokens[e.TokenID] = &JoinToken{ID: e.TokenID, ExpiresAt: e.ExpiresAt}
	case JoinTokenRevoked:
		if t := c.JoinTokens[e.TokenID]; t != nil {
			t.Revoked = true
		}
	case ServerRegistered:
		c.Servers[e.ServerID] = &Server{ID: e.ServerID, Name: e.Name}
	case ServerCredentialRevoked:
		if s := c.Servers[e.ServerID]; s != nil {
			s.Revoked = true
		}
	}
}

// CreateCluster creates a cluster with its first join token.
type CreateCluster struct {
	ClusterID string
	OrgID     string
	Name      string
	JoinToken IssueJoinToken
}

// DeleteCluster deletes a cluster; its name becomes free.
type DeleteCluster struct{}

// IssueJoinToken issues a join token (its hash; the secret goes to the caller once).
type IssueJoinToken struct {
	TokenID   string
	TokenHash string
	ExpiresAt time.Time
}

// RevokeJoinToken ends a join token.
type RevokeJoinToken struct{ TokenID string }

// RegisterServer exchanges a valid join token for a server credential.
type RegisterServer struct {
	ServerID       string
	Name           string
	CredentialHash string
	JoinTokenID    string
}

// RevokeServer ends a server's credential.
type RevokeServer struct{ ServerID string }

func (c *Cluster) issue(t IssueJoinToken, m Meta) (Event, error) {
	if err := ValidateID("join token", t.TokenID); err != nil {
		return nil, err
	}
	if _, ok := c.JoinTokens[t.TokenID]; ok {
		return nil, conflictf("join token %s exists", t.TokenID)
	}
	if t.TokenHash == "" {
		return nil, invalidf("join token hash is empty")
	}
	if !t.ExpiresAt.After(m.Now) {
		return nil, invalidf("a join token must expire in the future")
	}
	return JoinTokenIssued{ClusterID: c.ID, TokenID: t.TokenID, TokenHash: t.TokenHash, ExpiresAt: t.ExpiresAt}, nil
}

// Decide decides a cluster command.
func (c *Cluster) Decide(cmd ClusterCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if cc, ok := cmd.(CreateCluster); ok {
		if c.Exists {
			return Decision{}, conflictf("cluster exists")
		}
		if err := ValidateID("cluster", cc.ClusterID); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("organisation", cc.OrgID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("cluster", cc.Name); err != nil {
			return Decision{}, err
		}
		c.ID = cc.ClusterID
		tok, err := c.issue(cc.JoinToken, m)
		c.ID = ""
		if err != nil {
			return Decision{}, err
		}
		return Decision{
			Events: []Event{ClusterCreated{ClusterID: cc.ClusterID, OrgID: cc.OrgID, Name: cc.Name}, tok},
			Claims: []NameClaim{{clusterNameScope(cc.OrgID), cc.Name}},
		}, nil
	}
	if !c.Exists || c.Deleted {
		return Decision{}, notFoundf("cluster")
	}
	switch cc := cmd.(type) {
	case DeleteCluster:
		return Decision{Events: []Event{ClusterDeleted{ClusterID: c.ID}}, Releases: []NameClaim{{clusterNameScope(c.OrgID), c.Name}}}, nil
	case IssueJoinToken:
		e, err := c.issue(cc, m)
		if err != nil {
			return Decision{}, err
		}
		return decided(e), nil
	case RevokeJoinToken:
		t, ok := c.JoinTokens[cc.TokenID]
		if !ok {
			return Decision{}, notFoundf("join token")
		}
		if t.Revoked {
			return Decision{}, nil
		}
		return decided(JoinTokenRevoked{ClusterID: c.ID, TokenID: cc.TokenID}), nil
	case RegisterServer:
		t, ok := c.JoinTokens[cc.JoinTokenID]
		if !ok || t.Revoked || !t.ExpiresAt.After(m.Now) {
			return Decision{}, ErrForbidden
		}
		if err := ValidateID("server", cc.ServerID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("server", cc.Name); err != nil {
			return Decision{}, err
		}
		if cc.CredentialHash == "" {
			return Decision{}, invalidf("credential hash is empty")
		}
		for _, s := range c.Servers {
			if s.Name == cc.Name && !s.Revoked {
				return Decision{}, conflictf("a server named %s is registered in this cluster; revoke it first", cc.Name)
			}
		}
		return decided(ServerRegistered{ClusterID: c.ID, ServerID: cc.ServerID, Name: cc.Name, CredentialHash: cc.CredentialHash, JoinTokenID: cc.JoinTokenID}), nil
	case RevokeServer:
		s, ok := c.Servers[cc.ServerID]
		if !ok {
			return Decision{}, notFoundf("server")
		}
		if s.Revoked {
			return Decision{}, nil
		}
		return decided(ServerCredentialRevoked{ClusterID: c.ID, ServerID: cc.ServerID}), nil
	}
	return Decision{}, invalidf("command %T is not a cluster command", cmd)
}

// ClusterCommand is a command of the cluster aggregate.
type ClusterCommand interface{ clusterCommand() }

func (CreateCluster) clusterCommand()   {}
func (DeleteCluster) clusterCommand()   {}
func (IssueJoinToken) clusterCommand()  {}
func (RevokeJoinToken) clusterCommand() {}
func (RegisterServer) clusterCommand()  {}
func (RevokeServer) clusterCommand()    {}
