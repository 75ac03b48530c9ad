package api

import (
	"time"
)

// SetupRequest creates the first user, who is the instance administrator,
// and the first organisation.
type SetupRequest struct {
	Email        string `json:"email" input:"max=254"`
	Name         string `json:"name,omitempty"`
	Password     string `json:"password" input:"opaque"`
	Organisation string `json:"organisation"`
}

// SetupResponse returns the first user's API token, shown once.
type SetupResponse struct {
	User         User         `json:"user"`
	Organisation Organisation `json:"organisation"`
	Token        string       `json:"token"`
}

// LoginRequest signs in with e-mail and password.
type LoginRequest struct {
	Email    string `json:"email" input:"max=254"`
	Password string `json:"password" input:"opaque"`
}

// SessionResponse is a console session: a token that expires.
type SessionResponse struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	User      User      `json:"user"`
}

// MeResponse is who the caller is.
type MeResponse struct {
	User          User           `json:"user"`
	Organisations []Organisation `json:"organisations"`
	// Scopes of the token in use; absent for a console session.
	Scopes []string `json:"scopes,omitempty"`
}

// CreateTokenRequest creates an API token of the caller.
type CreateTokenRequest struct {
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// ExpiresInDays, when set, makes the token expire.
	ExpiresInDays int `json:"expiresInDays,omitempty"`
}

// CreatedToken is a new token; the secret is shown only here.
type CreatedToken struct {
	Token
	Secret string `json:"token"`
}

// CreateUserRequest lets the instance administrator add a user.
type CreateUserRequest struct {
	Email         string `json:"email" input:"max=254"`
	Name          string `json:"name,omitempty"`
	Password      string `json:"password" input:"opaque"`
	InstanceAdmin bool   `json:"instanceAdmin,omitempty"`
}

// CreateOrganisationRequest creates an organisation owned by the caller.
type CreateOrganisationRequest struct {
	Name string `json:"name"`
}

// AddMemberRequest adds a user by e-mail with a role.
type AddMemberRequest struct {
	Email string `json:"email" input:"max=254"`
	Role  string `json:"role"`
}

// ChangeRoleRequest changes a member's role.
type ChangeRoleRequest struct {
	Role string `json:"role"`
}

// SettingsRequest changes instance settings.
type SettingsRequest struct {
	AgentAutoUpgrade *bool `json:"agentAutoUpgrade"`
}

// AuditPage is one page of the audit log, in the envelope of every list:
// its entries in seq order and, when the page is full, the cursor of the
// next page (pass it as ?cursor=, with the same filters). Next is absent
// when there is nothing more to read yet.
type AuditPage struct {
	Items []AuditEntry `json:"items"`
	// Next is absent on the last page.
	Next string `json:"next,omitempty"`
}

// Organisation is an organisation, with the asking user's role in it when
// it was listed for a user.
type Organisation struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	Role      string    `json:"role,omitempty"`
}

// Member is a user's membership of an organisation.
type Member struct {
	UserID string `json:"userId"`
	Email  string `json:"email"`
	Name   string `json:"name"`
	Role   string `json:"role"`
	// Since is when the membership last changed: the projection keeps one
	// time per membership, moved by a role change.
	Since time.Time `json:"since"`
}

// User is a user account, without its password hash.
type User struct {
	ID            string    `json:"id"`
	Email         string    `json:"email"`
	Name          string    `json:"name"`
	InstanceAdmin bool      `json:"instanceAdmin"`
	CreatedAt     time.Time `json:"createdAt"`
}

// Token is an API token or a session, without its hash.
type Token struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	UserID string `json:"userId"`
	// OrgID is the organisation the token is limited to, "" for all of the user's.
	OrgID     string     `json:"orgId,omitempty"`
	Scopes    []string   `json:"scopes"`
	CreatedAt time.Time  `json:"createdAt"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	RevokedAt *time.Time `json:"revokedAt,omitempty"`
	// Session is set for the tokens the login creates, named "session:...".
	Session bool `json:"session"`
}
