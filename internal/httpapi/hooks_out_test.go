package httpapi_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
)

// An organisation's outbound webhook endpoints through the API: the secret
// is shown at creation and rotation only, the previous secret's overlap is
// 24 hours on the injected clock, bad input changes nothing, and only
// Owners and Admins manage them.
func TestWebhookEndpointsAPI(t *testing.T) {
	start := time.Date(2031, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := testclock.New(start)
	srv := servertest.Start(t, servertest.Options{Now: clock.Now})
	c := newClient(t, srv)
	root := srv.Setup(t, "root@example.com", "acme")
	const hooks = "/api/v1/orgs/acme/webhooks"

	r := c.do("POST", hooks, root, api.CreateWebhookRequest{URL: "https://hooks.example.com/in?team=ops", Description: "ops channel",
		EventTypes: []string{"deployment.failed", "build.failed"}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var created api.WebhookEndpointSecret
	r.json(t, &created)
	require.True(t, strings.HasPrefix(created.Secret, "whsec_"), created.Secret)
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(created.Secret, "whsec_"))
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.Equal(t, []string{"build.failed", "deployment.failed"}, created.EventTypes)
	require.True(t, created.Enabled)
	require.Equal(t, start, created.CreatedAt)
	require.Equal(t, hooks+"/"+created.ID, r.header.Get("Location"))

	r = c.do("GET", hooks, root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NotContains(t, string(r.body), created.Secret, "a list never shows the secret")
	var listed []api.WebhookEndpoint
	r.items(t, &listed)
	require.Len(t, listed, 1)
	require.Equal(t, "ops channel", listed[0].Description)

	r = c.do("GET", hooks+"/"+created.ID, root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NotContains(t, string(r.body), created.Secret)
	require.NotEmpty(t, r.header.Get("ETag"))

	// Rotation: a new secret, shown once; the one before signs for 24 h.
	clock.Advance(time.Hour)
	r = c.do("POST", hooks+"/"+created.ID+"/rotate", root, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var rotated api.WebhookEndpointSecret
	r.json(t, &rotated)
	require.NotEqual(t, created.Secret, rotated.Secret)
	require.True(t, strings.HasPrefix(rotated.Secret, "whsec_"))
	require.NotNil(t, rotated.PreviousSecretUntil)
	require.Equal(t, start.Add(25*time.Hour), rotated.PreviousSecretUntil.UTC())

	// Bad input: refused with a clear error, and nothing changes.
	version := c.do("GET", hooks+"/"+created.ID, root, nil).header.Get("ETag")
	require.Contains(t, version, ".2")
	for _, bad := range []struct {
		req  any
		want string
	}{
		{api.CreateWebhookRequest{URL: "ftp://hooks.example.com/", EventTypes: []string{"*"}}, "https or http"},
		{api.CreateWebhookRequest{URL: "https://user:pw@hooks.example.com/", EventTypes: []string{"*"}}, "user name or password"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/\x00", EventTypes: []string{"*"}}, "NUL"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/\x01", EventTypes: []string{"*"}}, "control character"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/" + strings.Repeat("a", 2100), EventTypes: []string{"*"}}, "at most 2048"},
		{api.CreateWebhookRequest{URL: "https:///nohost", EventTypes: []string{"*"}}, "no host"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/#frag", EventTypes: []string{"*"}}, "fragment"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com:99999/", EventTypes: []string{"*"}}, "port"},
		{api.CreateWebhookRequest{URL: "", EventTypes: []string{"*"}}, "has a url"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/", EventTypes: []string{"deployment.exploded"}}, "unknown"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/", EventTypes: []string{}}, "event types"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/", EventTypes: []string{"*", "build.failed"}}, "alone"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/", EventTypes: []string{"build.failed", "build.failed"}}, "twice"},
		{api.CreateWebhookRequest{URL: "https://hooks.example.com/", Description: strings.Repeat("d", 501), EventTypes: []string{"*"}}, "at most 500"},
		{map[string]any{"url": "https://hooks.example.com/", "eventTypes": []string{"*"}, "secret": "mine"}, "secret"},
	} {
		r := c.do("POST", hooks, root, bad.req)
		require.GreaterOrEqual(t, r.status, 400, "%+v: %s", bad.req, r.body)
		require.Less(t, r.status, 500, "%+v: %s", bad.req, r.body)
		_, msg := r.errorCode(t)
		require.Contains(t, msg, bad.want, "%+v", bad.req)
	}
	r = c.do("GET", hooks, root, nil)
	r.items(t, &listed)
	require.Len(t, listed, 1, "no bad request created an endpoint")
	r = c.do("GET", hooks+"/"+created.ID, root, nil)
	require.Equal(t, version, r.header.Get("ETag"), "no bad request changed the endpoints' stream")
	require.Equal(t, http.StatusNotFound, c.do("GET", hooks+"/"+"00000000-0000-4000-8000-000000000000", root, nil).status)
	require.Equal(t, http.StatusNotFound, c.do("GET", hooks+"/"+created.ID+"/deliveries/not-a-uuid", root, nil).status)
	require.Equal(t, http.StatusNotFound, c.do("POST", hooks+"/"+created.ID+"/deliveries/00000000-0000-4000-8000-000000000000/redeliver", root, nil).status)

	// Scopes: an Admin manages webhooks, a Member neither manages nor reads them.
	for _, role := range []domain.Role{domain.RoleAdmin, domain.RoleMember} {
		email := string(role) + "@example.com"
		require.Equal(t, http.StatusCreated, c.do("POST", "/api/v1/users", root, map[string]any{"email": email, "password": "correct horse battery staple"}).status)
		require.Equal(t, http.StatusCreated, c.do("POST", "/api/v1/orgs/acme/members", root, map[string]any{"email": email, "role": string(role)}).status)
	}
	admin, member := login(t, c, "admin@example.com"), login(t, c, "member@example.com")
	r = c.do("POST", hooks, member, api.CreateWebhookRequest{URL: "https://m.example.com/", EventTypes: []string{"*"}})
	require.Equal(t, http.StatusForbidden, r.status, string(r.body))
	_, msg := r.errorCode(t)
	require.Contains(t, msg, "webhooks:write")
	require.Equal(t, http.StatusForbidden, c.do("GET", hooks, member, nil).status)
	require.Equal(t, http.StatusForbidden, c.do("DELETE", hooks+"/"+created.ID, member, nil).status)
	require.Equal(t, http.StatusForbidden, c.do("POST", hooks+"/"+created.ID+"/rotate", member, nil).status)
	r = c.do("POST", hooks, admin, api.CreateWebhookRequest{URL: "http://a.example.com:8080/hook", EventTypes: []string{"*"}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var second api.WebhookEndpointSecret
	r.json(t, &second)

	// Delete: gone, and deleting again is 404.
	require.Equal(t, http.StatusNoContent, c.do("DELETE", hooks+"/"+second.ID, admin, nil).status)
	require.Equal(t, http.StatusNotFound, c.do("GET", hooks+"/"+second.ID, admin, nil).status)
	require.Equal(t, http.StatusNotFound, c.do("DELETE", hooks+"/"+second.ID, admin, nil).status)

	// The audit log says who did what, never the secret or the URL's query.
	var entries []api.AuditEntry
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = c.do("GET", "/api/v1/orgs/acme/audit?action=webhook.endpoint.*", root, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		r.items(t, &entries)
		if len(entries) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action)
		require.NotContains(t, e.Detail, "team=ops")
		require.NotContains(t, e.Detail, "whsec_")
	}
	require.Equal(t, []string{"webhook.endpoint.create", "webhook.endpoint.rotate", "webhook.endpoint.create", "webhook.endpoint.delete"}, actions)
}
