package query

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// SessionPrefix starts the name of every token that is a login session.
const SessionPrefix = "session:"

func scanOrganisation(row pgx.Row) (api.Organisation, error) {
	var o api.Organisation
	err := row.Scan(&o.ID, &o.Name, &o.CreatedAt, &o.Role)
	return o, err
}

// OrganisationsOfUser lists the organisations userID is a member of, by
// name, each with the user's role there.
func OrganisationsOfUser(ctx context.Context, q eventstore.Querier, userID string) ([]api.Organisation, error) {
	if !validID(userID) {
		return []api.Organisation{}, nil
	}
	return list(ctx, q, "organisations of user "+userID, scanOrganisation,
		`SELECT o.id::text, o.name, o.created_at, m.role
		   FROM organisations o JOIN memberships m ON m.org_id = o.id
		  WHERE m.user_id = $1
		  ORDER BY o.name`, userID)
}

// AllOrganisations lists every organisation by name, for the instance
// administrator; Role is empty.
func AllOrganisations(ctx context.Context, q eventstore.Querier) ([]api.Organisation, error) {
	return list(ctx, q, "organisations", scanOrganisation,
		`SELECT id::text, name, created_at, '' FROM organisations ORDER BY name`)
}

// OrganisationByName finds an organisation by its name; Role is empty.
func OrganisationByName(ctx context.Context, q eventstore.Querier, name string) (api.Organisation, error) {
	return one(ctx, q, fmt.Sprintf("organisation %q", name), scanOrganisation,
		`SELECT id::text, name, created_at, '' FROM organisations WHERE name = $1`, name)
}

// Members lists the members of an organisation by e-mail address.
func Members(ctx context.Context, q eventstore.Querier, orgID string) ([]api.Member, error) {
	if !validID(orgID) {
		return []api.Member{}, nil
	}
	return list(ctx, q, "members of organisation "+orgID, func(row pgx.Row) (api.Member, error) {
		var m api.Member
		err := row.Scan(&m.UserID, &m.Email, &m.Name, &m.Role, &m.Since)
		return m, err
	}, `SELECT m.user_id::text, u.email, u.name, m.role, m.updated_at
	      FROM memberships m JOIN users u ON u.id = m.user_id
	     WHERE m.org_id = $1
	     ORDER BY u.email`, orgID)
}

// RolesOfUser maps the id of each organisation userID belongs to onto the
// user's role there: what domain.Principal.Roles needs.
func RolesOfUser(ctx context.Context, q eventstore.Querier, userID string) (map[string]domain.Role, error) {
	roles := map[string]domain.Role{}
	if !validID(userID) {
		return roles, nil
	}
	type pair struct {
		org  string
		role domain.Role
	}
	pairs, err := list(ctx, q, "roles of user "+userID, func(row pgx.Row) (pair, error) {
		var p pair
		err := row.Scan(&p.org, &p.role)
		return p, err
	}, `SELECT org_id::text, role FROM memberships WHERE user_id = $1`, userID)
	if err != nil {
		return nil, err
	}
	for _, p := range pairs {
		roles[p.org] = p.role
	}
	return roles, nil
}

const userColumns = `id::text, email, name, instance_admin, created_at`

func scanUser(row pgx.Row) (api.User, error) {
	var u api.User
	err := row.Scan(&u.ID, &u.Email, &u.Name, &u.InstanceAdmin, &u.CreatedAt)
	return u, err
}

// normalizeEmail matches the form the domain stores addresses in, so a user
// who types capitals at login is still found.
func normalizeEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// UserByID finds a user by id.
func UserByID(ctx context.Context, q eventstore.Querier, userID string) (api.User, error) {
	if !validID(userID) {
		return api.User{}, notFound("user %q", userID)
	}
	return one(ctx, q, "user "+userID, scanUser, `SELECT `+userColumns+` FROM users WHERE id = $1`, userID)
}

// UserByEmail finds a user by e-mail address, in any case.
func UserByEmail(ctx context.Context, q eventstore.Querier, email string) (api.User, error) {
	email = normalizeEmail(email)
	return one(ctx, q, fmt.Sprintf("user %q", email), scanUser, `SELECT `+userColumns+` FROM users WHERE email = $1`, email)
}

// Credentials returns the id and password hash of the user with the given
// e-mail address, for login to compare. It is the only function that reads
// a password hash; an unknown address is ErrNotFound.
func Credentials(ctx context.Context, q eventstore.Querier, email string) (userID, passwordHash string, err error) {
	email = normalizeEmail(email)
	err = q.QueryRow(ctx, `SELECT id::text, password_hash FROM users WHERE email = $1`, email).Scan(&userID, &passwordHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", notFound("user %q", email)
	}
	if err != nil {
		return "", "", fmt.Errorf("reading the credentials of %q: %w", email, err)
	}
	return userID, passwordHash, nil
}

// CountUsers counts the users: the first one to register becomes the
// instance administrator.
func CountUsers(ctx context.Context, q eventstore.Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT count(*) FROM users`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting users: %w", err)
	}
	return n, nil
}

// Users lists every user by e-mail address.
func Users(ctx context.Context, q eventstore.Querier) ([]api.User, error) {
	return list(ctx, q, "users", scanUser, `SELECT `+userColumns+` FROM users ORDER BY email`)
}

const tokenColumns = `id::text, name, user_id::text, coalesce(org_id::text, ''), scopes, created_at, expires_at, revoked_at`

func scanToken(row pgx.Row) (api.Token, error) {
	var t api.Token
	err := row.Scan(&t.ID, &t.Name, &t.UserID, &t.OrgID, &t.Scopes, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt)
	finishToken(&t)
	return t, err
}

// finishToken fills what is derived rather than stored.
func finishToken(t *api.Token) {
	if t.Scopes == nil {
		t.Scopes = []string{}
	}
	t.Session = strings.HasPrefix(t.Name, SessionPrefix)
}

// TokensOfUser lists a user's tokens and sessions: the ones still in force
// first, newest first within each group; revoked ones are included and
// carry RevokedAt.
func TokensOfUser(ctx context.Context, q eventstore.Querier, userID string) ([]api.Token, error) {
	if !validID(userID) {
		return []api.Token{}, nil
	}
	return list(ctx, q, "tokens of user "+userID, scanToken,
		`SELECT `+tokenColumns+` FROM api_tokens WHERE user_id = $1
		  ORDER BY revoked_at IS NOT NULL, created_at DESC, id`, userID)
}

// TokenByHash finds the token whose hash is hash. Revoked and expired tokens
// are returned too, so the caller can tell the client why it is refused; an
// unknown hash is ErrNotFound. The hash is not echoed in the error.
func TokenByHash(ctx context.Context, q eventstore.Querier, hash string) (api.Token, error) {
	return one(ctx, q, "token", scanToken, `SELECT `+tokenColumns+` FROM api_tokens WHERE token_hash = $1`, hash)
}

// TokenByID finds a token by id and returns its hash beside it, for the
// caller to compare in constant time with the hash of the presented secret.
// The hash is returned on its own, never inside Token, so a Token can be
// sent as it is. Revoked and expired tokens are returned too, so the caller
// can say why they are refused; an unknown or malformed id is ErrNotFound.
func TokenByID(ctx context.Context, q eventstore.Querier, tokenID string) (api.Token, string, error) {
	if !validID(tokenID) {
		return api.Token{}, "", notFound("token %q", tokenID)
	}
	type withHash struct {
		tok  api.Token
		hash string
	}
	v, err := one(ctx, q, "token "+tokenID, func(row pgx.Row) (withHash, error) {
		var w withHash
		t := &w.tok
		err := row.Scan(&t.ID, &t.Name, &t.UserID, &t.OrgID, &t.Scopes, &t.CreatedAt, &t.ExpiresAt, &t.RevokedAt, &w.hash)
		finishToken(t)
		return w, err
	}, `SELECT `+tokenColumns+`, token_hash FROM api_tokens WHERE id = $1`, tokenID)
	if err != nil {
		return api.Token{}, "", err
	}
	return v.tok, v.hash, nil
}
