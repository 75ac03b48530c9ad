package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// An event the projections cannot store (a trigger stands for the bug) is
// parked with its stream's later events while another organisation goes on;
// the writer gets 503 projections_parked; /readyz lists it (and stays
// ready); audit parked and audit verify fail; after the fix, audit retry
// projects them in order, and verify and replay pass. Only an instance
// administrator reaches the parked events.
func TestParkedEventsThroughTheCLI(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	srv := servertest.Start(t, servertest.Options{Park: eventstore.ParkPolicy{Attempts: 3, Window: 100 * time.Millisecond}})
	token := srv.Setup(t, "ada@example.com", "acme")
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, token)
	t.Setenv("NEBULACTRL_DATABASE_URL", srv.DatabaseURL)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c := cliRun{t: t}
	envs := func(org, project string) string {
		var names string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(string_agg(e.name, ' ' ORDER BY e.created_at), '') FROM environments e
			JOIN projects p ON p.id = e.project_id JOIN organisations o ON o.id = p.org_id WHERE o.name = $1 AND p.name = $2`, org, project).Scan(&names))
		return names
	}
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("org", "create", "beta")
	c.ok("cluster", "create", "beta/eu-1")
	c.ok("project", "create", "beta/web")

	_, err = pool.Exec(ctx, `CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.name = 'poison' THEN RAISE EXCEPTION 'the read model rejects %', NEW.name; END IF; RETURN NEW; END $$;
		CREATE TRIGGER reject_poison BEFORE INSERT OR UPDATE ON environments FOR EACH ROW EXECUTE FUNCTION reject_poison()`)
	require.NoError(t, err)

	r := c.run("", "env", "create", "acme/shop/poison", "--cluster", "eu-1")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "parked event")
	c.ok("env", "create", "beta/web/production", "--cluster", "eu-1")
	require.Equal(t, "production", envs("beta", "web"), "the other organisation's write is projected")
	r = c.run("", "env", "create", "acme/shop/later", "--cluster", "eu-1")
	require.Error(t, r.failed)
	require.Contains(t, r.err, "is parked")
	require.Empty(t, envs("acme", "shop"))

	r = c.run("", "audit", "parked")
	require.Equal(t, 1, exitCode(r.failed), r.out+r.err)
	require.Contains(t, r.out, "the read model rejects poison")
	require.Contains(t, r.out, "behind")
	require.Equal(t, 2, strings.Count(r.out, "projections "), r.out)
	resp, err := http.Get(srv.URL + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "parked events do not make the replica unready: %s", body)
	require.Contains(t, string(body), "PARKED 2 events")
	require.Contains(t, string(body), "the read model rejects poison")
	r = c.run("", "audit", "verify")
	require.Equal(t, 1, exitCode(r.failed), r.out+r.err)
	require.Contains(t, r.out+r.err, "parked")

	// Not for an organisation's owner who is no instance administrator.
	cl, err := client.New(srv.URL, token)
	require.NoError(t, err)
	_, err = cl.CreateUser(ctx, api.CreateUserRequest{Email: "bob@example.com", Password: "correct horse battery staple"})
	require.NoError(t, err)
	anon, err := client.New(srv.URL, "")
	require.NoError(t, err)
	session, err := anon.Login(ctx, "bob@example.com", "correct horse battery staple")
	require.NoError(t, err)
	bob, err := client.New(srv.URL, session.Token)
	require.NoError(t, err)
	_, err = bob.ParkedEvents(ctx, "")
	require.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
	_, err = bob.RetryParked(ctx, api.RetryParkedRequest{All: true})
	require.True(t, client.IsStatus(err, http.StatusForbidden), "%v", err)
	// Bad requests change nothing.
	_, err = cl.RetryParked(ctx, api.RetryParkedRequest{})
	require.True(t, client.IsStatus(err, http.StatusUnprocessableEntity), "%v", err)
	_, err = cl.RetryParked(ctx, api.RetryParkedRequest{Position: 1, All: true})
	require.True(t, client.IsStatus(err, http.StatusUnprocessableEntity), "%v", err)
	_, err = cl.RetryParked(ctx, api.RetryParkedRequest{Position: 1})
	require.True(t, client.IsStatus(err, http.StatusNotFound), "%v", err)
	r = c.run("", "audit", "retry")
	require.Equal(t, 2, exitCode(r.failed), r.out+r.err)

	// Still broken: the retry fails and says why.
	r = c.run("", "audit", "retry", "--all")
	require.Equal(t, 1, exitCode(r.failed), r.out+r.err)
	require.Contains(t, r.out, "FAILED, still parked")
	// Fixed: retried in order; everything checks out again.
	_, err = pool.Exec(ctx, `DROP TRIGGER reject_poison ON environments`)
	require.NoError(t, err)
	parked, err := cl.ParkedEvents(ctx, "projections")
	require.NoError(t, err)
	require.Len(t, parked.Events, 2)
	out := c.ok("audit", "retry", strconv.FormatInt(parked.Events[1].Position, 10))
	require.Contains(t, out, "handled 2 events")
	require.Contains(t, c.ok("audit", "parked"), "nothing is parked")
	require.Equal(t, "poison later", envs("acme", "shop"))
	c.ok("env", "create", "acme/shop/after", "--cluster", "eu-1")
	require.Equal(t, "poison later after", envs("acme", "shop"))
	c.ok("audit", "verify")
	c.ok("audit", "replay")
}
