package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
)

// What the control plane's other front doors (the MCP server) need of the
// API to call it in process: the way a request came, and the API's own
// check of a bearer token.

// viaKey is a type of its own: no other context key can collide with it.
type viaKey struct{}

// WithVia marks the requests made with ctx as coming through another front
// door of the control plane (the MCP server: "mcp"): the commands they issue
// record it on their events and audit log entries. It is a context value,
// so only code in this process can set it; no header of an outside client
// reaches it.
func WithVia(ctx context.Context, via string) context.Context {
	return context.WithValue(ctx, viaKey{}, via)
}

func via(ctx context.Context) string {
	v, _ := ctx.Value(viaKey{}).(string)
	return v
}

// ErrUnauthorized is what Authenticate's refusals match: the token is
// malformed, unknown, wrong, revoked or expired, or its user is gone.
var ErrUnauthorized = errors.New("unauthorized")

// Identity is who a bearer token is, as the API authenticates it.
type Identity struct {
	TokenID string
	UserID  string
	// Actor is what the audit log names.
	Actor domain.Actor
	// Session is set for a console session's token (no scopes of its own).
	Session bool
	// Scopes are the token's scopes (nil for a session).
	Scopes []domain.Scope
	// InstanceAdmin is set when the token's user administers the instance.
	InstanceAdmin bool
	// ExpiresAt is nil for a token that does not expire.
	ExpiresAt *time.Time
}

// Authenticate checks a bearer token exactly as every route of the API does
// (the secret compared in constant time; a revoked or expired token, or one
// whose user is gone, refused at once). A refusal matches ErrUnauthorized and
// says why; any other error is the database's.
func (a *API) Authenticate(ctx context.Context, token string) (Identity, error) {
	p, actor, tok, err := a.authenticateToken(ctx, token)
	if err != nil {
		if ae := toAPIError(err); ae.status == http.StatusUnauthorized {
			return Identity{}, fmt.Errorf("%w: %s", ErrUnauthorized, ae.message)
		}
		return Identity{}, err
	}
	return Identity{TokenID: tok.ID, UserID: p.UserID, Actor: actor, Session: tok.Session, Scopes: p.TokenScopes,
		InstanceAdmin: p.InstanceAdmin, ExpiresAt: tok.ExpiresAt}, nil
}
