package client

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
)

// Setup creates the first user (the instance administrator) and
// organisation; it needs no token and returns the user's first API token.
func (c *Client) Setup(ctx context.Context, req api.SetupRequest) (api.SetupResponse, error) {
	var out api.SetupResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/setup", in: req, creating: true, public: true}, &out)
	return out, err
}

// Login signs in with e-mail and password; it needs no token and returns a
// session token.
func (c *Client) Login(ctx context.Context, email, password string) (api.SessionResponse, error) {
	var out api.SessionResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/sessions", in: api.LoginRequest{Email: email, Password: password}, public: true}, &out)
	return out, err
}

// Logout revokes the token in use.
func (c *Client) Logout(ctx context.Context) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: "/api/v1/sessions/current"}, nil)
	return err
}

// Me says who the token belongs to.
func (c *Client) Me(ctx context.Context) (api.MeResponse, error) {
	var out api.MeResponse
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/api/v1/me"}, &out)
	return out, err
}

// Tokens lists the caller's API tokens and sessions (never their secrets).
func (c *Client) Tokens(ctx context.Context) ([]api.Token, error) {
	return list[api.Token](ctx, c, request{method: http.MethodGet, path: "/api/v1/tokens"}, 0)
}

// CreateToken creates an API token; its secret is in the answer only.
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (api.CreatedToken, error) {
	var out api.CreatedToken
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/tokens", in: req, creating: true}, &out)
	return out, err
}

// RevokeToken revokes one of the caller's tokens.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: path("/api/v1/tokens/%s", id)}, nil)
	return err
}

// Users lists every user (instance administrator).
func (c *Client) Users(ctx context.Context) ([]api.User, error) {
	return list[api.User](ctx, c, request{method: http.MethodGet, path: "/api/v1/users"}, 0)
}

// CreateUser adds a user (instance administrator).
func (c *Client) CreateUser(ctx context.Context, req api.CreateUserRequest) (api.User, error) {
	var out api.User
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/users", in: req, creating: true}, &out)
	return out, err
}

// Settings reads the instance settings (instance administrator).
func (c *Client) Settings(ctx context.Context) (api.InstanceSettings, error) {
	var out api.InstanceSettings
	_, err := c.call(ctx, request{method: http.MethodGet, path: "/api/v1/instance/settings"}, &out)
	return out, err
}

// UpdateSettings changes the instance settings (instance administrator).
func (c *Client) UpdateSettings(ctx context.Context, req api.SettingsRequest) (api.InstanceSettings, error) {
	var out api.InstanceSettings
	_, err := c.call(ctx, request{method: http.MethodPatch, path: "/api/v1/instance/settings", in: req}, &out)
	return out, err
}

// AuditQuery selects audit log entries; zero fields do not filter.
type AuditQuery struct {
	// Org is the organisation whose log is read; "" reads the whole log,
	// which only the instance administrator may.
	Org string
	// Action matches exactly, or as a prefix when it ends with ".*".
	Action string
	// Actor is an actor id.
	Actor string
	// Target is a prefix of the target's name ("acme/shop").
	Target string
	// Since is inclusive, Until exclusive.
	Since, Until time.Time
	// Cursor returns only entries after it: the Next of the previous page,
	// or the Seq of the last entry seen (as a decimal string: the audit
	// log's cursor is the seq of the last entry it covers). "" starts at
	// the beginning.
	Cursor string
	// Limit is the page size (1-1000; the API's default when 0).
	Limit int
}

// Audit reads one page of the audit log.
func (c *Client) Audit(ctx context.Context, q AuditQuery) (api.AuditPage, error) {
	p := "/api/v1/audit"
	if q.Org != "" {
		p = path("/api/v1/orgs/%s/audit", q.Org)
	}
	v := map[string][]string{}
	set := func(k, s string) {
		if s != "" {
			v[k] = []string{s}
		}
	}
	set("action", q.Action)
	set("actor", q.Actor)
	set("target", q.Target)
	if !q.Since.IsZero() {
		set("since", q.Since.UTC().Format(time.RFC3339))
	}
	if !q.Until.IsZero() {
		set("until", q.Until.UTC().Format(time.RFC3339))
	}
	set("cursor", q.Cursor)
	if q.Limit > 0 {
		set("limit", strconv.Itoa(q.Limit))
	}
	var out api.AuditPage
	_, err := c.call(ctx, request{method: http.MethodGet, path: p, query: v}, &out)
	return out, err
}

// Organisations lists the caller's organisations with the caller's role.
func (c *Client) Organisations(ctx context.Context) ([]api.Organisation, error) {
	return list[api.Organisation](ctx, c, request{method: http.MethodGet, path: "/api/v1/orgs"}, 0)
}

// CreateOrganisation creates an organisation owned by the caller.
func (c *Client) CreateOrganisation(ctx context.Context, name string) (api.Organisation, error) {
	var out api.Organisation
	_, err := c.call(ctx, request{method: http.MethodPost, path: "/api/v1/orgs", in: api.CreateOrganisationRequest{Name: name}, creating: true}, &out)
	return out, err
}

// Organisation reads an organisation.
func (c *Client) Organisation(ctx context.Context, org string) (api.Organisation, error) {
	var out api.Organisation
	_, err := c.call(ctx, request{method: http.MethodGet, path: path("/api/v1/orgs/%s", org)}, &out)
	return out, err
}

// Members lists an organisation's members and their roles.
func (c *Client) Members(ctx context.Context, org string) ([]api.Member, error) {
	return list[api.Member](ctx, c, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/members", org)}, 0)
}

// AddMember adds an existing user, by e-mail address, with a role.
func (c *Client) AddMember(ctx context.Context, org, email, role string) (api.Member, error) {
	var out api.Member
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/orgs/%s/members", org),
		in: api.AddMemberRequest{Email: email, Role: role}, creating: true}, &out)
	return out, err
}

// ChangeMemberRole changes a member's role.
func (c *Client) ChangeMemberRole(ctx context.Context, org, userID, role string) (api.Member, error) {
	var out api.Member
	_, err := c.call(ctx, request{method: http.MethodPatch, path: path("/api/v1/orgs/%s/members/%s", org, userID),
		in: api.ChangeRoleRequest{Role: role}}, &out)
	return out, err
}

// RemoveMember removes a member by user id.
func (c *Client) RemoveMember(ctx context.Context, org, userID string) error {
	_, err := c.call(ctx, request{method: http.MethodDelete, path: path("/api/v1/orgs/%s/members/%s", org, userID)}, nil)
	return err
}
