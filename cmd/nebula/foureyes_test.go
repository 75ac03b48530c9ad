package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

// Deleting a service that runs in a protected environment, the environment
// or its project waits for someone else's approval; the CLI says so, how to
// approve it, and exits with the waiting-for-approval code.
func TestDeletesOfProtectedThingsWaitForApproval(t *testing.T) {
	b := setup(t)
	regHost, srv := b.regHost, b.srv
	token := srv.Setup(t, "ada@example.com", "acme")
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, token)
	c := b.c
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/production", "--cluster", "eu-1", "--protected")
	c.ok("service", "create", "acme/shop/api", "--image", regHost+"/api:v1", "--port", "8080")
	c.ok("service", "create", "acme/shop/idle", "--image", regHost+"/api:v1")

	// api runs in production once someone else approved its deploy.
	cl, err := client.New(srv.URL, token)
	require.NoError(t, err)
	_, err = cl.CreateUser(t.Context(), api.CreateUserRequest{Email: "bob@example.com", Password: "correct horse battery staple"})
	require.NoError(t, err)
	_, err = cl.AddMember(t.Context(), "acme", "bob@example.com", "admin")
	require.NoError(t, err)
	anon, err := client.New(srv.URL, "")
	require.NoError(t, err)
	session, err := anon.Login(t.Context(), "bob@example.com", "correct horse battery staple")
	require.NoError(t, err)
	bob, err := client.New(srv.URL, session.Token)
	require.NoError(t, err)
	r := c.run("", "deploy", "acme/shop/production/api")
	require.Equal(t, exitApproval, exitCode(r.failed), "a deployment that waits for approval exits 6: %s", r.out+r.err)
	sets, err := cl.ChangeSets(t.Context(), "acme", "shop", "production", "open")
	require.NoError(t, err)
	require.Len(t, sets, 1)
	_, err = bob.ApproveChangeSet(t.Context(), "acme", "shop", "production", sets[0].ID, sets[0].Version)
	require.NoError(t, err)

	r = c.run("", "service", "delete", "acme/shop/api", "--yes")
	require.Equal(t, exitApproval, exitCode(r.failed), r.out+r.err)
	sets, err = cl.ChangeSets(t.Context(), "acme", "shop", "production", "open")
	require.NoError(t, err)
	require.Len(t, sets, 1)
	require.Contains(t, r.out, "waits for someone else's approval in change set "+sets[0].ID)
	require.Contains(t, r.out, "nebula changeset approve acme/shop/production "+sets[0].ID+" --version 1")

	// The same person's next changes join that change set.
	r = c.run("", "project", "delete", "acme/shop", "--yes")
	require.Equal(t, exitApproval, exitCode(r.failed), r.out+r.err)
	require.Contains(t, r.out, "--version 2")
	r = c.run("", "env", "delete", "acme/shop/production", "--yes")
	require.Equal(t, exitApproval, exitCode(r.failed), r.out+r.err)
	r = c.run("", "service", "delete", "acme/shop/idle", "--yes")
	require.NoError(t, r.failed, "a service that does not run in a protected environment goes at once: %s", r.out+r.err)
	_, err = cl.Service(t.Context(), "acme", "shop", "api")
	require.NoError(t, err, "nothing was deleted")
}
