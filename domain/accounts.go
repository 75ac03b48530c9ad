package domain

import (
	"net/mail"
	"slices"
	"strings"
	"time"
)

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

// User is a person who signs in.
type User struct {
	ID            string
	Email         string
	Exists        bool
	InstanceAdmin bool
	Tokens        map[string]*Token
}

// Token is an API token of a user.
type Token struct {
	ID        string
	Revoked   bool
	ExpiresAt *time.Time
}

// NewUser returns the empty state of a user stream.
func NewUser() *User { return &User{Tokens: map[string]*Token{}} }

// Apply folds an event into the state.
func (u *User) Apply(e Event) {
	switch e := e.(type) {
	case UserRegistered:
		u.ID, u.Email, u.Exists, u.InstanceAdmin = e.UserID, e.Email, true, e.InstanceAdmin
	case UserInstanceAdminChanged:
		u.InstanceAdmin = e.InstanceAdmin
	case TokenCreated:
		u.Tokens[e.TokenID] = &Token{ID: e.TokenID, ExpiresAt: e.ExpiresAt}
	case TokenRevoked:
		if t := u.Tokens[e.TokenID]; t != nil {
			t.Revoked = true
		}
	}
}

// RegisterUser creates a user. PasswordHash is computed by the caller (a slow
// hash such as bcrypt); the plaintext never reaches the domain.
type RegisterUser struct {
	UserID        string
	Email         string
	Name          string
	PasswordHash  string
	InstanceAdmin bool
	// FirstUser claims the instance's one-time setup, so that of two
	// concurrent setups one loses with a conflict.
	FirstUser bool
}

// ChangePassword sets a new password hash.
type ChangePassword struct{ PasswordHash string }

// SetInstanceAdmin grants or revokes the instance administrator role.
type SetInstanceAdmin struct{ InstanceAdmin bool }

// CreateToken creates an API token; TokenHash is a SHA-256 of the token's
// secret, which is random and long, so a fast hash is the right one.
type CreateToken struct {
	TokenID   string
	OrgID     string
	Name      string
	Scopes    []Scope
	TokenHash string
	ExpiresAt *time.Time
}

// RevokeToken ends a token.
type RevokeToken struct{ TokenID string }

// NormalizeEmail lower-cases and checks an e-mail address.
func NormalizeEmail(email string) (string, error) {
	e := strings.ToLower(strings.TrimSpace(email))
	a, err := mail.ParseAddress(e)
	if err != nil || a.Address != e {
		return "", invalidf("e-mail address %q is not valid", email)
	}
	return e, nil
}

// Decide decides a user command.
func (u *User) Decide(cmd any, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case RegisterUser:
		if u.Exists {
			return Decision{}, conflictf("user %s exists", u.ID)
		}
		if err := ValidateID("user", c.UserID); err != nil {
			return Decision{}, err
		}
		email, err := NormalizeEmail(c.Email)
		if err != nil {
			return Decision{}, err
		}
		if c.PasswordHash == "" {
			return Decision{}, invalidf("a user needs a password")
		}
		if len(c.Name) > 200 {
			return Decision{}, invalidf("name is longer than 200 characters")
		}
		d := Decision{
			Events: []Event{UserRegistered{UserID: c.UserID, Email: email, Name: c.Name, PasswordHash: c.PasswordHash, InstanceAdmin: c.InstanceAdmin}},
			Claims: []NameClaim{{userEmailScope(), email}},
		}
		if c.FirstUser {
			d.Claims = append(d.Claims, NameClaim{"instance", "setup"})
		}
		return d, nil
	}
	if !u.Exists {
		return Decision{}, notFoundf("user")
	}
	switch c := cmd.(type) {
	case ChangePassword:
		if c.PasswordHash == "" {
			return Decision{}, invalidf("a user needs a password")
		}
		return decided(UserPasswordChanged{UserID: u.ID, PasswordHash: c.PasswordHash}), nil
	case SetInstanceAdmin:
		if u.InstanceAdmin == c.InstanceAdmin {
			return Decision{}, nil
		}
		return decided(UserInstanceAdminChanged{UserID: u.ID, InstanceAdmin: c.InstanceAdmin}), nil
	case CreateToken:
		if err := ValidateID("token", c.TokenID); err != nil {
			return Decision{}, err
		}
		if _, ok := u.Tokens[c.TokenID]; ok {
			return Decision{}, conflictf("token %s exists", c.TokenID)
		}
		if c.Name == "" || len(c.Name) > 100 {
			return Decision{}, invalidf("a token needs a name of at most 100 characters")
		}
		if len(c.Scopes) == 0 {
			return Decision{}, invalidf("a token needs at least one scope")
		}
		scopes := make([]string, len(c.Scopes))
		for i, s := range c.Scopes {
			scopes[i] = string(s)
		}
		parsed, err := ParseScopes(scopes)
		if err != nil {
			return Decision{}, err
		}
		if slices.Contains(parsed, ScopeInstanceAdmin) && !u.InstanceAdmin {
			return Decision{}, ErrForbidden
		}
		if c.TokenHash == "" {
			return Decision{}, invalidf("token hash is empty")
		}
		if c.ExpiresAt != nil && !c.ExpiresAt.After(m.Now) {
			return Decision{}, invalidf("a token cannot expire in the past")
		}
		return decided(TokenCreated{TokenID: c.TokenID, UserID: u.ID, OrgID: c.OrgID, Name: c.Name, Scopes: parsed, TokenHash: c.TokenHash, ExpiresAt: c.ExpiresAt}), nil
	case RevokeToken:
		t, ok := u.Tokens[c.TokenID]
		if !ok {
			return Decision{}, notFoundf("token %s", c.TokenID)
		}
		if t.Revoked {
			return Decision{}, nil
		}
		return decided(TokenRevoked{TokenID: c.TokenID, UserID: u.ID}), nil
	}
	return Decision{}, invalidf("command %T is not a user command", cmd)
}

// Organisation is a tenant: its members own projects and clusters.
type Organisation struct {
	ID      string
	Name    string
	Exists  bool
	Members map[string]Role
}

// NewOrganisation returns the empty state of an organisation stream.
func NewOrganisation() *Organisation { return &Organisation{Members: map[string]Role{}} }

// Apply folds an event into the state.
func (o *Organisation) Apply(e Event) {
	switch e := e.(type) {
	case OrganisationCreated:
		o.ID, o.Name, o.Exists = e.OrgID, e.Name, true
	case MemberAdded:
		o.Members[e.UserID] = e.Role
	case MemberRoleChanged:
		o.Members[e.UserID] = e.Role
	case MemberRemoved:
		delete(o.Members, e.UserID)
	}
}

// CreateOrganisation creates an organisation with its first owner.
type CreateOrganisation struct {
	OrgID string
	Name  string
	Owner string // user id
}

// AddMember adds a user with a role.
type AddMember struct {
	UserID string
	Role   Role
}

// ChangeMemberRole changes a member's role.
type ChangeMemberRole struct {
	UserID string
	Role   Role
}

// RemoveMember removes a member.
type RemoveMember struct{ UserID string }

func (o *Organisation) owners() int {
	n := 0
	for _, r := range o.Members {
		if r == RoleOwner {
			n++
		}
	}
	return n
}

// Decide decides an organisation command.
func (o *Organisation) Decide(cmd any, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if c, ok := cmd.(CreateOrganisation); ok {
		if o.Exists {
			return Decision{}, conflictf("organisation %s exists", o.Name)
		}
		if err := ValidateID("organisation", c.OrgID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("organisation", c.Name); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("user", c.Owner); err != nil {
			return Decision{}, err
		}
		return Decision{
			Events: []Event{OrganisationCreated{OrgID: c.OrgID, Name: c.Name}, MemberAdded{OrgID: c.OrgID, UserID: c.Owner, Role: RoleOwner}},
			Claims: []NameClaim{{orgNameScope(), c.Name}},
		}, nil
	}
	if !o.Exists {
		return Decision{}, notFoundf("organisation")
	}
	switch c := cmd.(type) {
	case AddMember:
		if err := ValidateID("user", c.UserID); err != nil {
			return Decision{}, err
		}
		if _, err := ParseRole(string(c.Role)); err != nil {
			return Decision{}, err
		}
		if _, ok := o.Members[c.UserID]; ok {
			return Decision{}, conflictf("user is already a member")
		}
		return decided(MemberAdded{OrgID: o.ID, UserID: c.UserID, Role: c.Role}), nil
	case ChangeMemberRole:
		cur, ok := o.Members[c.UserID]
		if !ok {
			return Decision{}, notFoundf("member")
		}
		if _, err := ParseRole(string(c.Role)); err != nil {
			return Decision{}, err
		}
		if cur == c.Role {
			return Decision{}, nil
		}
		if cur == RoleOwner && o.owners() == 1 {
			return Decision{}, conflictf("the last owner of an organisation cannot be demoted")
		}
		return decided(MemberRoleChanged{OrgID: o.ID, UserID: c.UserID, Role: c.Role}), nil
	case RemoveMember:
		cur, ok := o.Members[c.UserID]
		if !ok {
			return Decision{}, notFoundf("member")
		}
		if cur == RoleOwner && o.owners() == 1 {
			return Decision{}, conflictf("the last owner of an organisation cannot be removed")
		}
		return decided(MemberRemoved{OrgID: o.ID, UserID: c.UserID}), nil
	}
	return Decision{}, invalidf("command %T is not an organisation command", cmd)
}

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

// RecordConnection records an agent connecting (Connected) or its
// connection ending.
type RecordConnection struct {
	ServerID  string
	Connected bool
	Version   string
	Arch      string
	Reason    string
}

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
func (c *Cluster) Decide(cmd any, m Meta) (Decision, error) {
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
	case RecordConnection:
		s, ok := c.Servers[cc.ServerID]
		if !ok {
			return Decision{}, notFoundf("server")
		}
		if cc.Connected {
			if s.Revoked {
				return Decision{}, ErrForbidden
			}
			return decided(ServerConnected{ClusterID: c.ID, ServerID: s.ID, Version: cc.Version, Arch: cc.Arch}), nil
		}
		return decided(ServerDisconnected{ClusterID: c.ID, ServerID: s.ID, Reason: cc.Reason}), nil
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
