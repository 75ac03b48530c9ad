package query_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func TestOrganisationsAndMembers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	zeta := d.org("zeta", 1)
	acme := d.org("acme", 2)
	other := d.org("other", 3)
	alice := d.user("alice@example.com", "Alice", "$argon2id$alice-secret-hash", true, 1)
	bob := d.user("bob@example.com", "Bob", "$argon2id$bob-secret-hash", false, 2)
	d.member(zeta, alice, "viewer", 5)
	d.member(acme, alice, "owner", 6)
	d.member(acme, bob, "member", 7)
	d.member(other, bob, "admin", 8)

	orgs, err := query.OrganisationsOfUser(ctx, d.pool, alice)
	require.NoError(t, err)
	require.Equal(t, []api.Organisation{
		{ID: acme, Name: "acme", CreatedAt: at(2), Role: string(domain.RoleOwner)},
		{ID: zeta, Name: "zeta", CreatedAt: at(1), Role: string(domain.RoleViewer)},
	}, normOrgs(orgs))

	orgs, err = query.OrganisationsOfUser(ctx, d.pool, id())
	require.NoError(t, err)
	require.Empty(t, orgs)
	require.Equal(t, "[]", jsonOf(t, orgs), "an empty list encodes as [], not null")
	orgs, err = query.OrganisationsOfUser(ctx, d.pool, "not-a-uuid")
	require.NoError(t, err)
	require.Empty(t, orgs)

	all, err := query.AllOrganisations(ctx, d.pool)
	require.NoError(t, err)
	require.Equal(t, []string{"acme", "other", "zeta"}, orgNames(all))
	require.Empty(t, all[0].Role)
	require.NotContains(t, jsonOf(t, all[0]), `"role"`, "role is omitted when there is none")

	o, err := query.OrganisationByName(ctx, d.pool, "acme")
	require.NoError(t, err)
	require.Equal(t, acme, o.ID)
	require.True(t, o.CreatedAt.Equal(at(2)))
	_, err = query.OrganisationByName(ctx, d.pool, "nope")
	require.ErrorIs(t, err, query.ErrNotFound)
	require.ErrorIs(t, err, domain.ErrNotFound, "the API's mapping of the domain's not-found applies")

	members, err := query.Members(ctx, d.pool, acme)
	require.NoError(t, err)
	require.Len(t, members, 2)
	require.Equal(t, api.Member{UserID: alice, Email: "alice@example.com", Name: "Alice", Role: string(domain.RoleOwner), Since: members[0].Since}, members[0])
	require.True(t, members[0].Since.Equal(at(6)))
	require.Equal(t, bob, members[1].UserID)
	require.Equal(t, string(domain.RoleMember), members[1].Role)
	require.NotContains(t, jsonOf(t, members), "secret-hash")

	roles, err := query.RolesOfUser(ctx, d.pool, bob)
	require.NoError(t, err)
	require.Equal(t, map[string]domain.Role{acme: domain.RoleMember, other: domain.RoleAdmin}, roles)
	roles, err = query.RolesOfUser(ctx, d.pool, "bad")
	require.NoError(t, err)
	require.Empty(t, roles)
}

func normOrgs(in []api.Organisation) []api.Organisation {
	out := make([]api.Organisation, len(in))
	for i, o := range in {
		o.CreatedAt = o.CreatedAt.UTC()
		out[i] = o
	}
	return out
}

func orgNames(in []api.Organisation) []string {
	var out []string
	for _, o := range in {
		out = append(out, o.Name)
	}
	return out
}

func TestUsersAndCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)

	n, err := query.CountUsers(ctx, d.pool)
	require.NoError(t, err)
	require.Zero(t, n)

	bob := d.user("bob@example.com", "Bob", "$argon2id$bob-secret-hash", false, 2)
	alice := d.user("alice@example.com", "Alice", "$argon2id$alice-secret-hash", true, 1)

	n, err = query.CountUsers(ctx, d.pool)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	users, err := query.Users(ctx, d.pool)
	require.NoError(t, err)
	require.Len(t, users, 2)
	require.Equal(t, alice, users[0].ID)
	require.Equal(t, bob, users[1].ID)
	require.NotContains(t, jsonOf(t, users), "secret-hash")

	u, err := query.UserByID(ctx, d.pool, alice)
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", u.Email)
	require.Equal(t, "Alice", u.Name)
	require.True(t, u.InstanceAdmin)
	require.True(t, u.CreatedAt.Equal(at(1)))

	_, err = query.UserByID(ctx, d.pool, id())
	require.ErrorIs(t, err, query.ErrNotFound)
	_, err = query.UserByID(ctx, d.pool, "not-a-uuid")
	require.ErrorIs(t, err, query.ErrNotFound)

	u, err = query.UserByEmail(ctx, d.pool, "  Bob@Example.COM ")
	require.NoError(t, err)
	require.Equal(t, bob, u.ID)
	require.False(t, u.InstanceAdmin)
	_, err = query.UserByEmail(ctx, d.pool, "carol@example.com")
	require.ErrorIs(t, err, query.ErrNotFound)

	uid, hash, err := query.Credentials(ctx, d.pool, "ALICE@example.com")
	require.NoError(t, err)
	require.Equal(t, alice, uid)
	require.Equal(t, "$argon2id$alice-secret-hash", hash)
	_, _, err = query.Credentials(ctx, d.pool, "carol@example.com")
	require.ErrorIs(t, err, query.ErrNotFound)
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	acme := d.org("acme", 1)
	alice := d.user("alice@example.com", "Alice", "pw-hash", false, 1)
	bob := d.user("bob@example.com", "Bob", "pw-hash", false, 1)

	token := func(user string, org any, name, scopes, hash string, created int, expires, revoked *time.Time) string {
		tid := id()
		d.exec(`INSERT INTO api_tokens (id, user_id, org_id, name, scopes, token_hash, created_at, expires_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, tid, user, org, name, scopes, hash, at(created), expires, revoked)
		return tid
	}
	exp := at(100)
	rev := at(50)
	ci := token(alice, acme, "ci", `["projects:read", "deployments:write"]`, "token-hash-ci", 10, &exp, nil)
	old := token(alice, nil, "old", `["projects:read"]`, "token-hash-old", 30, nil, &rev)
	sess := token(alice, nil, "session:firefox", `[]`, "token-hash-session", 20, &exp, nil)
	token(bob, nil, "bobs", `["projects:read"]`, "token-hash-bob", 40, nil, nil)

	toks, err := query.TokensOfUser(ctx, d.pool, alice)
	require.NoError(t, err)
	require.Len(t, toks, 3)
	// In force first, newest first; the revoked one last although newest.
	require.Equal(t, []string{sess, ci, old}, []string{toks[0].ID, toks[1].ID, toks[2].ID})

	require.True(t, toks[0].Session)
	require.Equal(t, []string{}, toks[0].Scopes)
	require.Empty(t, toks[0].OrgID)

	require.Equal(t, "ci", toks[1].Name)
	require.False(t, toks[1].Session)
	require.Equal(t, acme, toks[1].OrgID)
	require.Equal(t, alice, toks[1].UserID)
	require.Equal(t, []string{string(domain.ScopeProjectsRead), string(domain.ScopeDeploymentsWrite)}, toks[1].Scopes)
	require.NotNil(t, toks[1].ExpiresAt)
	require.True(t, toks[1].ExpiresAt.Equal(exp))
	require.Nil(t, toks[1].RevokedAt)
	require.True(t, toks[1].CreatedAt.Equal(at(10)))

	require.NotNil(t, toks[2].RevokedAt)
	require.True(t, toks[2].RevokedAt.Equal(rev))
	require.Nil(t, toks[2].ExpiresAt)
	require.NotContains(t, jsonOf(t, toks), "token-hash")
	require.NotContains(t, jsonOf(t, toks[2]), `"orgId"`)

	toks, err = query.TokensOfUser(ctx, d.pool, "nope")
	require.NoError(t, err)
	require.Empty(t, toks)

	tok, err := query.TokenByHash(ctx, d.pool, "token-hash-ci")
	require.NoError(t, err)
	require.Equal(t, ci, tok.ID)
	// Revoked tokens are still found, so the caller can say why they fail.
	tok, err = query.TokenByHash(ctx, d.pool, "token-hash-old")
	require.NoError(t, err)
	require.Equal(t, old, tok.ID)
	require.NotNil(t, tok.RevokedAt)
	tok, hash, err := query.TokenByID(ctx, d.pool, old)
	require.NoError(t, err)
	require.Equal(t, "token-hash-old", hash)
	require.Equal(t, "old", tok.Name)
	require.NotNil(t, tok.RevokedAt, "revoked tokens are returned so the caller can say why")
	require.Equal(t, []string{string(domain.ScopeProjectsRead)}, tok.Scopes)
	tok, _, err = query.TokenByID(ctx, d.pool, sess)
	require.NoError(t, err)
	require.True(t, tok.Session)
	require.NotContains(t, jsonOf(t, tok), "token-hash")
	_, _, err = query.TokenByID(ctx, d.pool, id())
	require.ErrorIs(t, err, query.ErrNotFound)
	_, _, err = query.TokenByID(ctx, d.pool, "not-a-uuid")
	require.ErrorIs(t, err, query.ErrNotFound)

	_, err = query.TokenByHash(ctx, d.pool, "unknown-hash")
	require.ErrorIs(t, err, query.ErrNotFound)
	require.NotContains(t, err.Error(), "unknown-hash")
}

// The functions take a Querier so a caller can read its own uncommitted
// writes inside a transaction.
func TestReadsInsideATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newDB(t)
	tx, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO organisations (id, name, created_at) VALUES ($1, 'acme', $2)`, id(), at(1))
	require.NoError(t, err)

	_, err = query.OrganisationByName(ctx, tx, "acme")
	require.NoError(t, err)
	_, err = query.OrganisationByName(ctx, d.pool, "acme")
	require.ErrorIs(t, err, query.ErrNotFound, "not committed yet")
}
