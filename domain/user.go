package domain

import (
	"net/mail"
	"slices"
	"strings"
	"time"
)

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
func (u *User) Decide(cmd UserCommand, m Meta) (Decision, error) {
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

// UserCommand is a command of the user aggregate.
type UserCommand interface{ userCommand() }

func (RegisterUser) userCommand()     {}
func (ChangePassword) userCommand()   {}
func (SetInstanceAdmin) userCommand() {}
func (CreateToken) userCommand()      {}
func (RevokeToken) userCommand()      {}
