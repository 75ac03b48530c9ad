package domain

import (
	"fmt"
	"slices"
	"strings"
)

// Role is a member's role in an organisation.
type Role string

// Roles, from most to least powerful.
const (
	RoleOwner  Role = "owner"
	RoleAdmin  Role = "admin"
	RoleMember Role = "member"
	RoleViewer Role = "viewer"
)

// Roles lists every role, most powerful first.
var Roles = []Role{RoleOwner, RoleAdmin, RoleMember, RoleViewer}

// ParseRole accepts a role name in any case.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Roles, r) {
		return "", invalidf("role %q is unknown (owner, admin, member, viewer)", s)
	}
	return r, nil
}

// Scope is a permission carried by an API token and granted by roles.
type Scope string

// Scopes of the API.
const (
	ScopeProjectsRead     Scope = "projects:read"
	ScopeProjectsWrite    Scope = "projects:write"
	ScopeDeploymentsWrite Scope = "deployments:write"
	ScopeApprovalsWrite   Scope = "approvals:write"
	ScopeServersRead      Scope = "servers:read"
	ScopeServersWrite     Scope = "servers:write"
	ScopeAuditRead        Scope = "audit:read"
	ScopeMembersWrite     Scope = "members:write"
	ScopeTokensWrite      Scope = "tokens:write"
	ScopeInstanceAdmin    Scope = "instance:admin"
	ScopeBuildsRead       Scope = "builds:read"
	ScopeBuildsWrite      Scope = "builds:write"
	// ScopeWebhooksWrite manages the organisation's outbound webhook
	// endpoints (Owners and Admins).
	ScopeWebhooksWrite Scope = "webhooks:write"
)

// Scopes lists every scope.
var Scopes = []Scope{
	ScopeProjectsRead, ScopeProjectsWrite, ScopeDeploymentsWrite, ScopeApprovalsWrite,
	ScopeServersRead, ScopeServersWrite, ScopeAuditRead, ScopeMembersWrite, ScopeTokensWrite,
	ScopeInstanceAdmin, ScopeBuildsRead, ScopeBuildsWrite, ScopeWebhooksWrite,
}

// ParseScopes validates a list of scope names.
func ParseScopes(names []string) ([]Scope, error) {
	out := make([]Scope, 0, len(names))
	for _, n := range names {
		s := Scope(strings.TrimSpace(n))
		if !slices.Contains(Scopes, s) {
			return nil, invalidf("scope %q is unknown", n)
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

var roleScopes = map[Role][]Scope{
	RoleViewer: {ScopeProjectsRead, ScopeServersRead, ScopeBuildsRead},
	RoleMember: {ScopeProjectsRead, ScopeProjectsWrite, ScopeDeploymentsWrite, ScopeServersRead, ScopeTokensWrite,
		ScopeBuildsRead, ScopeBuildsWrite},
	RoleAdmin: {ScopeProjectsRead, ScopeProjectsWrite, ScopeDeploymentsWrite, ScopeApprovalsWrite,
		ScopeServersRead, ScopeServersWrite, ScopeAuditRead, ScopeMembersWrite, ScopeTokensWrite, ScopeBuildsRead, ScopeBuildsWrite,
		ScopeWebhooksWrite},
	RoleOwner: {ScopeProjectsRead, ScopeProjectsWrite, ScopeDeploymentsWrite, ScopeApprovalsWrite,
		ScopeServersRead, ScopeServersWrite, ScopeAuditRead, ScopeMembersWrite, ScopeTokensWrite, ScopeBuildsRead, ScopeBuildsWrite,
		ScopeWebhooksWrite},
}

// RoleGrants reports whether a member with role may act with scope in their
// organisation. instance:admin is never granted by a role: only the instance
// administrator holds it.
func RoleGrants(role Role, scope Scope) bool {
	return slices.Contains(roleScopes[role], scope)
}

// Principal is who is asking, as the API resolved it: a user (directly, by
// session) or a user's API token (with its own scopes, which narrow the user's).
type Principal struct {
	UserID        string
	InstanceAdmin bool
	// TokenScopes is nil for a session, the token's scopes otherwise.
	TokenScopes []Scope
	// Roles maps organisation id to the user's role there.
	Roles map[string]Role
}

// Allow decides whether the principal may act with scope in organisation
// orgID ("" for instance-wide actions). A denial names the missing scope.
func (p Principal) Allow(orgID string, scope Scope) error {
	if p.TokenScopes != nil && !slices.Contains(p.TokenScopes, scope) {
		return fmt.Errorf("%w: the token lacks the scope %s", ErrForbidden, scope)
	}
	if scope == ScopeInstanceAdmin {
		if p.InstanceAdmin {
			return nil
		}
		return fmt.Errorf("%w: only the instance administrator may do this (scope %s)", ErrForbidden, scope)
	}
	if orgID == "" {
		// Instance-wide reads of one's own things (tokens, profile).
		return nil
	}
	role, ok := p.Roles[orgID]
	if !ok {
		// Not a member: the organisation's objects do not exist for them.
		return fmt.Errorf("%w: organisation", ErrNotFound)
	}
	if !RoleGrants(role, scope) {
		return fmt.Errorf("%w: the role %s lacks the scope %s", ErrForbidden, role, scope)
	}
	return nil
}
