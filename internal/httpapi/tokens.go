package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// newToken makes an API or join token: its id, the string given to the user
// once, and the hash to store.
func newToken() (id, token, hash string, err error) { return credential.New() }

func unauthorized(msg string) error {
	return errorf(http.StatusUnauthorized, "unauthorized", "%s", msg)
}

// authenticate resolves the bearer token to a principal and an actor.
func (a *API) authenticate(r *http.Request) (domain.Principal, domain.Actor, string, error) {
	h := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || raw == "" {
		return domain.Principal{}, domain.Actor{}, "", unauthorized("this request needs an API token: Authorization: Bearer <token>")
	}
	p, actor, tok, err := a.authenticateToken(r.Context(), raw)
	return p, actor, tok.ID, err
}

// authenticateToken resolves a bearer token's text to a principal, an actor
// and the token (for Authenticate, which the MCP server's verifier calls).
func (a *API) authenticateToken(ctx context.Context, raw string) (domain.Principal, domain.Actor, api.Token, error) {
	id, secret, ok := credential.Parse(raw)
	if !ok {
		return domain.Principal{}, domain.Actor{}, api.Token{}, unauthorized("the token is malformed")
	}
	tok, hash, err := query.TokenByID(ctx, a.pool, id)
	if errors.Is(err, query.ErrNotFound) {
		return domain.Principal{}, domain.Actor{}, api.Token{}, unauthorized("the token is not valid")
	}
	if err != nil {
		return domain.Principal{}, domain.Actor{}, api.Token{}, err
	}
	if !credential.Matches(hash, secret) {
		return domain.Principal{}, domain.Actor{}, api.Token{}, unauthorized("the token is not valid")
	}
	if tok.RevokedAt != nil {
		return domain.Principal{}, domain.Actor{}, api.Token{}, unauthorized("the token was revoked")
	}
	if tok.ExpiresAt != nil && !tok.ExpiresAt.After(a.cfg.Now()) {
		return domain.Principal{}, domain.Actor{}, api.Token{}, unauthorized("the token expired")
	}
	p, user, err := a.principal(ctx, tok.UserID)
	if err != nil {
		return domain.Principal{}, domain.Actor{}, api.Token{}, err
	}
	actor := domain.Actor{Kind: domain.ActorUser, ID: user.ID, Name: user.Email}
	if !tok.Session {
		// A token narrows its user's rights to its scopes.
		p.TokenScopes = make([]domain.Scope, len(tok.Scopes))
		for i, s := range tok.Scopes {
			p.TokenScopes[i] = domain.Scope(s)
		}
		actor = domain.Actor{Kind: domain.ActorToken, ID: tok.ID, Name: user.Email + " (token " + tok.Name + ")"}
	}
	return p, actor, tok, nil
}

func (a *API) principal(ctx context.Context, userID string) (domain.Principal, api.User, error) {
	user, err := query.UserByID(ctx, a.pool, userID)
	if err != nil {
		if isNotFound(err) {
			return domain.Principal{}, user, unauthorized("the token's user no longer exists")
		}
		return domain.Principal{}, user, err
	}
	roles, err := query.RolesOfUser(ctx, a.pool, userID)
	if err != nil {
		return domain.Principal{}, user, err
	}
	return domain.Principal{UserID: user.ID, InstanceAdmin: user.InstanceAdmin, Roles: roles}, user, nil
}
