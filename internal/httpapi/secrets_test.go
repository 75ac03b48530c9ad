package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// pgDump dumps a database whole, as an operator's backup would.
func pgDump(t *testing.T, databaseURL string) []byte {
	t.Helper()
	bin, err := pgcluster.FindBinDir()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "--no-owner", "--dbname="+databaseURL)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), errOut.String())
	require.Contains(t, out.String(), "idempotency_keys", "the dump holds the tables")
	return out.Bytes()
}

// requireNoSecret checks that no form of a secret (as text; the bytes of
// its secret part in hex, as bytea columns dump; base64) is in the dump.
func requireNoSecret(t *testing.T, dump []byte, what, secret string) {
	t.Helper()
	_, part, ok := credential.Parse(secret)
	require.True(t, ok, "%s: %q is a credential", what, secret)
	// The secret part is at least 32 characters: a form found in the dump
	// is this secret, not a chance match (base64url secrets hold '_' too).
	for _, form := range []string{secret, part, hex.EncodeToString([]byte(part)), hex.EncodeToString([]byte(secret)),
		base64.StdEncoding.EncodeToString([]byte(secret)), base64.StdEncoding.EncodeToString([]byte(part))} {
		require.False(t, bytes.Contains(dump, []byte(form)), "the secret of the %s is in pg_dump (as %.20s...)", what, form)
	}
}

// Every route that answers with a secret (setup's token, a session, an API
// token, a cluster's first join token, a join token) leaves none of it in
// the database, idempotent requests included: their responses are kept
// sealed for replays, which still give the secret back.
func TestNoSecretInTheDatabase(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	secrets := map[string]string{"setup token": s.Setup(t, "root@example.com", "acme")}
	root := secrets["setup token"]
	secrets["session"] = login(t, c, "root@example.com")

	created := func(path, key string, body any) response {
		t.Helper()
		r := c.do("POST", path, root, body, "Idempotency-Key", key)
		require.Equal(t, 201, r.status, string(r.body))
		again := c.do("POST", path, root, body, "Idempotency-Key", key)
		require.Equal(t, 201, again.status, string(again.body))
		require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
		require.JSONEq(t, string(r.body), string(again.body), "a replay gives the first answer, secret included")
		return r
	}
	var tok api.CreatedToken
	created("/api/v1/tokens", "tok-1", map[string]any{"name": "ci", "scopes": []string{"projects:read"}}).json(t, &tok)
	secrets["API token"] = tok.Secret
	r := c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "ci-2", "scopes": []string{"projects:read"}})
	require.Equal(t, 201, r.status)
	r.json(t, &tok)
	secrets["API token without an Idempotency-Key"] = tok.Secret
	var cl api.ClusterResponse
	created("/api/v1/orgs/acme/clusters", "cl-1", map[string]any{"name": "eu-1"}).json(t, &cl)
	require.NotNil(t, cl.JoinToken)
	secrets["cluster's first join token"] = cl.JoinToken.Token
	var jt api.CreatedJoinToken
	created("/api/v1/orgs/acme/clusters/eu-1/join-tokens", "jt-1", map[string]any{"expiresInHours": 2}).json(t, &jt)
	secrets["join token"] = jt.Token

	dump := pgDump(t, s.DatabaseURL)
	for what, secret := range secrets {
		requireNoSecret(t, dump, what, secret)
	}
}

// A replay never shows the secret of a credential revoked since: it answers
// 410, and so does a replay whose kept response can no longer be opened.
func TestReplayNeverShowsARevokedSecret(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	gone := func(r response, secret, code string) {
		t.Helper()
		require.Equal(t, 410, r.status, string(r.body))
		got, msg := r.errorCode(t)
		require.Equal(t, code, got, msg)
		require.NotContains(t, string(r.body), secret)
	}

	body := map[string]any{"name": "ci", "scopes": []string{"projects:read"}}
	r := c.do("POST", "/api/v1/tokens", root, body, "Idempotency-Key", "k1")
	require.Equal(t, 201, r.status)
	var tok api.CreatedToken
	r.json(t, &tok)
	require.Equal(t, 201, c.do("POST", "/api/v1/tokens", root, body, "Idempotency-Key", "k1").status)
	require.Equal(t, 204, c.do("DELETE", "/api/v1/tokens/"+tok.ID, root, nil).status)
	gone(c.do("POST", "/api/v1/tokens", root, body, "Idempotency-Key", "k1"), tok.Secret, "secret_revoked")

	r = c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}, "Idempotency-Key", "k2")
	require.Equal(t, 201, r.status)
	var cl api.ClusterResponse
	r.json(t, &cl)
	require.Equal(t, 204, c.do("DELETE", "/api/v1/orgs/acme/clusters/eu-1/join-tokens/"+cl.JoinToken.ID, root, nil).status)
	gone(c.do("POST", "/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}, "Idempotency-Key", "k2"), cl.JoinToken.Token, "secret_revoked")

	r = c.do("POST", "/api/v1/orgs/acme/clusters/eu-1/join-tokens", root, map[string]any{}, "Idempotency-Key", "k3")
	require.Equal(t, 201, r.status)
	var jt api.CreatedJoinToken
	r.json(t, &jt)
	require.Equal(t, 204, c.do("DELETE", "/api/v1/orgs/acme/clusters/eu-1/join-tokens/"+jt.ID, root, nil).status)
	gone(c.do("POST", "/api/v1/orgs/acme/clusters/eu-1/join-tokens", root, map[string]any{}, "Idempotency-Key", "k3"), jt.Token, "secret_revoked")

	// A kept response that cannot be opened (its data key is gone, or was
	// wrapped by another master key) cannot be shown again.
	r = c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "ci-2", "scopes": []string{"projects:read"}}, "Idempotency-Key", "k4")
	require.Equal(t, 201, r.status)
	r.json(t, &tok)
	db, err := pgxConnect(s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	tag, err := db.Exec(context.Background(), `UPDATE idempotency_keys SET response_key = gen_random_uuid() WHERE key = 'k4'`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	gone(c.do("POST", "/api/v1/tokens", root, map[string]any{"name": "ci-2", "scopes": []string{"projects:read"}}, "Idempotency-Key", "k4"), tok.Secret, "response_gone")
}

// Pruning an idempotency key after 24 hours deletes the data key of its
// kept response with it.
func TestPrunedIdempotencyKeysTakeTheirDataKeys(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{JobInterval: 50 * time.Millisecond})
	c := newClient(t, s)
	root := s.Setup(t, "root@example.com", "acme")
	require.Equal(t, 201, c.do("POST", "/api/v1/orgs/acme/projects", root, map[string]any{"name": "shop"}, "Idempotency-Key", "old").status)
	db, err := pgxConnect(s.DatabaseURL)
	require.NoError(t, err)
	defer db.Close(context.Background())
	ctx := context.Background()
	var dataKey string
	require.NoError(t, db.QueryRow(ctx, `UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = 'old' RETURNING response_key::text`).Scan(&dataKey))
	require.Eventually(t, func() bool {
		var n int
		_ = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM idempotency_keys) + (SELECT count(*) FROM data_keys WHERE id = $1::uuid)`, dataKey).Scan(&n)
		return n == 0
	}, 20*time.Second, 50*time.Millisecond)
}
