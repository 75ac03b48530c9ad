package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

var whsecRE = regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`)

// The outbound webhook commands against a real control plane: the secret
// printed once at create and at rotate and never again (list, show, -o
// json), deliveries (none yet, then one written by the webhooks' own
// store, shown with its payload and attempt, and redelivered), delete with
// confirmation; bad command lines exit 2 and change nothing; a Member's
// token is refused (exit 4).
func TestWebhookCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	t.Setenv(envContext, "")
	srv := servertest.Start(t, servertest.Options{})
	c := cliRun{t: t}
	c.okIn(password+"\n", "setup", "--url", srv.URL, "--email", "ada@example.com", "--org", "acme", "--password-stdin")

	require.Equal(t, "[]\n", c.ok("webhook", "list", "acme", "-o", "json"), "no endpoint yet")

	// create: the secret once, with the warning.
	out := c.ok("webhook", "create", "acme", "--url", "https://hooks.example.com/nebula", "--event", "deployment.succeeded",
		"--event", "deployment.failed", "--description", "chat <b>notifications</b>")
	secrets := whsecRE.FindAllString(out, -1)
	require.Len(t, secrets, 1, "the secret is printed once:\n%s", out)
	secret := secrets[0]
	require.Contains(t, out, "shown only this once")
	require.Contains(t, out, "never shown again")
	id := regexp.MustCompile(`Created webhook endpoint (\S+) of acme: https://hooks.example.com/nebula receives deployment.failed, deployment.succeeded\.`).FindStringSubmatch(out)
	require.Len(t, id, 2, out)
	ep := id[1]

	// -o json: the endpoint with its secret, this once too.
	var made api.WebhookEndpointSecret
	c.json(&made, "webhook", "create", "acme", "--url", "https://other.example.com/h", "--event", "*")
	require.Regexp(t, `^whsec_`, made.Secret)
	require.Equal(t, []string{"*"}, made.EventTypes)
	require.True(t, made.Enabled)
	require.NotEqual(t, secret, made.Secret)

	// Never again: list, show, either as JSON.
	for _, args := range [][]string{
		{"webhook", "list", "acme"}, {"webhook", "list", "acme", "-o", "json"}, {"webhook", "list", "acme", "-o", "yaml"},
		{"webhook", "show", "acme", ep}, {"webhook", "show", "acme", ep, "-o", "json"}, {"webhook", "show", "acme", made.ID, "-o", "json"},
	} {
		o := c.ok(args...)
		require.NotContains(t, o, "whsec_", "nebula %s shows no secret", strings.Join(args, " "))
		require.NotContains(t, o, secret[6:])
		require.NotContains(t, o, made.Secret[6:])
	}
	list := c.ok("webhook", "list", "acme")
	require.Regexp(t, `(?m)^ID\s+URL\s+EVENTS\s+STATE\s+CREATED\s+DESCRIPTION$`, list)
	require.Regexp(t, `(?m)^`+ep+`\s+https://hooks.example.com/nebula\s+deployment.failed,deployment.succeeded\s+enabled\s+(just now|\d+ s ago)\s+chat <b>notifications</b>$`, list)
	require.Regexp(t, `(?m)^`+made.ID+`\s+https://other.example.com/h\s+\*\s+enabled\s`, list)
	var eps []api.WebhookEndpoint
	c.json(&eps, "webhook", "list", "acme")
	require.Len(t, eps, 2)
	require.Equal(t, ep, eps[0].ID, "oldest first")
	show := c.ok("webhook", "show", "acme", ep)
	require.Contains(t, show, "Webhook endpoint "+ep+" of acme")
	require.Contains(t, show, "description  chat <b>notifications</b>")
	require.Contains(t, show, "state        enabled")
	require.Contains(t, show, "never rotated")

	// rotate: the new secret once; the old one signs for 24 h.
	out = c.ok("webhook", "rotate", "acme", ep)
	rotated := whsecRE.FindAllString(out, -1)
	require.Len(t, rotated, 1, out)
	require.NotEqual(t, secret, rotated[0])
	require.Contains(t, out, "The old secret keeps signing beside the new one until")
	require.Contains(t, out, "(24 h)")
	require.Contains(t, out, "shown only this once")
	show = c.ok("webhook", "show", "acme", ep)
	require.NotContains(t, show, "whsec_")
	require.Regexp(t, `secret\s+rotated \S+; the old one signs too until \S+`, show)
	var shown api.WebhookEndpoint
	c.json(&shown, "webhook", "show", "acme", ep)
	require.NotNil(t, shown.PreviousSecretUntil)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *shown.PreviousSecretUntil, time.Minute)

	// enable: an enabled endpoint stays enabled.
	require.Contains(t, c.ok("webhook", "enable", "acme", ep), "Webhook endpoint "+ep+" of acme is enabled.")

	// Deliveries: none yet; an unknown one is not found (exit 3).
	require.Contains(t, c.ok("webhook", "deliveries", "acme", ep), "No deliveries to webhook endpoint "+ep+" yet")
	require.Equal(t, "[]\n", c.ok("webhook", "deliveries", "acme", ep, "-o", "json"))
	unknown := uuid.NewString()
	r := c.run("", "webhook", "redeliver", "acme", ep, unknown)
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "delivery "+unknown)
	r = c.run("", "webhook", "deliveries", "acme", ep, unknown)
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "delivery "+unknown)
	r = c.run("", "webhook", "show", "acme", unknown)
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "webhook endpoint acme/"+unknown)

	// A delivery as the webhooks' subscription writes it, with one attempt
	// as the sender records it (internal/webhooks/hookstore, the tables'
	// owner, on the control plane's database).
	pool, err := pgxpool.New(t.Context(), srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var me api.MeResponse
	c.json(&me, "whoami")
	delivery := uuid.NewString()
	created := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	require.NoError(t, hookstore.InsertDelivery(t.Context(), pool, hookstore.NewDelivery{ID: delivery, OrgID: me.Organisations[0].ID, EndpointID: ep,
		Position: 1, EventType: "deployment.succeeded", Payload: []byte(`{"type":"deployment.succeeded","timestamp":"2026-12-01T12:00:00Z","data":{"service":"api"}}`), At: created}))
	_, err = hookstore.RecordAttempt(t.Context(), pool, hookstore.Attempt{DeliveryID: delivery, EndpointID: ep, At: created.Add(time.Second),
		Duration: 42 * time.Millisecond, StatusCode: 200, Response: "ok, thanks\nsecond line", Succeeded: true})
	require.NoError(t, err)
	list = c.ok("webhook", "deliveries", "acme", ep)
	require.Regexp(t, `(?m)^ID\s+EVENT\s+STATUS\s+ATTEMPTS\s+LAST STATUS\s+LAST ATTEMPT\s+NEXT ATTEMPT\s+CREATED$`, list)
	require.Regexp(t, `(?m)^`+delivery+`\s+deployment.succeeded\s+succeeded\s+1\s+200\s+\d+ s ago\s+-\s+(1 min|\d+ s) ago$`, list)
	var ds []api.WebhookDelivery
	c.json(&ds, "webhook", "deliveries", "acme", ep)
	require.Len(t, ds, 1)
	require.Equal(t, 200, ds[0].LastStatusCode)
	detail := c.ok("webhook", "deliveries", "acme", ep, delivery)
	require.Contains(t, detail, "Delivery "+delivery+" (webhook-id) of deployment.succeeded to webhook endpoint "+ep)
	require.Contains(t, detail, "status        succeeded")
	require.Contains(t, detail, `"service": "api"`, "the payload, indented")
	require.Regexp(t, `Attempt 1 at \S+ \(42 ms\)\n  status    200\n  \| ok, thanks\n  \| second line\n`, detail)
	var dd api.WebhookDeliveryDetail
	c.json(&dd, "webhook", "deliveries", "acme", ep, delivery)
	require.Len(t, dd.AttemptList, 1)
	require.JSONEq(t, `{"type":"deployment.succeeded","timestamp":"2026-12-01T12:00:00Z","data":{"service":"api"}}`, string(dd.Payload))
	out = c.ok("webhook", "redeliver", "acme", ep, delivery)
	require.Contains(t, out, "Redelivering "+delivery+" (deployment.succeeded) to webhook endpoint "+ep+": it is sent again with the same webhook-id.")
	var redelivered api.WebhookDelivery
	c.json(&redelivered, "webhook", "redeliver", "acme", ep, delivery)
	require.Equal(t, delivery, redelivered.ID)
	// The audit log (a projection: a moment later) has both redeliveries.
	actions := map[string]int{}
	require.Eventually(t, func() bool {
		var audit []api.AuditEntry
		c.json(&audit, "audit", "--org", "acme")
		clear(actions)
		for _, e := range audit {
			actions[e.Action]++
		}
		return actions["webhook.endpoint.redeliver"] == 2
	}, 20*time.Second, 100*time.Millisecond, "both redeliveries are audited")
	require.Equal(t, 2, actions["webhook.endpoint.create"], "%v", actions)
	require.Equal(t, 1, actions["webhook.endpoint.rotate"], "%v", actions)

	// Bad command lines: exit 2, a clear message, nothing created.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"webhook", "create", "acme", "--event", "*"}, "give the endpoint's --url"},
		{[]string{"webhook", "create", "acme", "--url", "ftp://hooks.example.com/x", "--event", "*"}, `--url "ftp://hooks.example.com/x": want an https:// (or http://) URL`},
		{[]string{"webhook", "create", "acme", "--url", "hooks.example.com/x", "--event", "*"}, "want an https:// (or http://) URL"},
		{[]string{"webhook", "create", "acme", "--url", "https:///x", "--event", "*"}, "has no host"},
		{[]string{"webhook", "create", "acme", "--url", "https://hooks.example.com/x"}, "give the endpoint at least one --event"},
		{[]string{"webhook", "create", "acme", "--url", "https://hooks.example.com/x", "--event", "deployment.done"}, `--event "deployment.done" is not an event type: want one of deployment.succeeded, deployment.failed`},
		{[]string{"webhook", "create", "acme", "--url", "https://hooks.example.com/x", "--event", "*,build.failed"}, "give it alone"},
		// The control plane's own check: no user name in the URL (400).
		{[]string{"webhook", "create", "acme", "--url", "https://u:p@hooks.example.com/x", "--event", "*"}, "a user name or password in the URL is not accepted"},
		{[]string{"webhook", "create", "acme/shop", "--url", "https://hooks.example.com/x", "--event", "*"}, "want ORG, got 2 parts"},
		{[]string{"webhook", "show", "acme"}, "want ORG ENDPOINT_ID, got 1 argument(s)"},
		{[]string{"webhook", "show", "acme/x", ep}, "want ORG, got 2 parts"},
		{[]string{"webhook", "deliveries", "acme"}, "want ORG ENDPOINT_ID [DELIVERY_ID], got 1 argument(s)"},
		{[]string{"webhook", "deliveries", "acme", ep, delivery, "x"}, "got 4 argument(s)"},
		{[]string{"webhook", "redeliver", "acme", ep}, "want ORG ENDPOINT_ID DELIVERY_ID"},
		{[]string{"webhook", "delete", "acme", ep}, "give --yes"},
		{[]string{"webhook", "create", "acme", "--url", "https://hooks.example.com/x", "--evnt", "x"}, "did you mean --event?"},
		{[]string{"webhook", "rotat", "acme", ep}, `did you mean "rotate"?`},
	} {
		r := c.run("", tc.args...)
		require.Equal(t, exitUsage, exitCode(r.failed), "nebula %s: %s", strings.Join(tc.args, " "), r.err)
		require.Contains(t, r.err, tc.want, "nebula %s", strings.Join(tc.args, " "))
		require.Empty(t, r.out, "nebula %s prints nothing on stdout", strings.Join(tc.args, " "))
	}
	c.json(&eps, "webhook", "list", "acme")
	require.Len(t, eps, 2, "no bad command line made an endpoint")

	// A Member's token is refused: reading (audit:read) and writing
	// (webhooks:write) alike.
	var contexts []contextView
	require.NoError(t, json.Unmarshal([]byte(c.ok("context", "list", "-o", "json")), &contexts))
	require.Len(t, contexts, 1)
	ada := contexts[0].Name
	c.okIn(password+"\n", "user", "create", "mia@example.com", "--password-stdin")
	c.ok("member", "add", "acme", "mia@example.com", "--role", "member")
	c.okIn(password+"\n", "login", "--url", srv.URL, "--email", "mia@example.com", "--password-stdin", "--context", "mia")
	for _, args := range [][]string{
		{"webhook", "list", "acme"}, {"webhook", "show", "acme", ep}, {"webhook", "deliveries", "acme", ep},
		{"webhook", "create", "acme", "--url", "https://hooks.example.com/mia", "--event", "*"},
		{"webhook", "rotate", "acme", ep}, {"webhook", "delete", "acme", ep, "--yes"}, {"webhook", "redeliver", "acme", ep, delivery},
	} {
		r := c.run("", args...)
		require.Equal(t, exitForbidden, exitCode(r.failed), "nebula %s as a Member: %s", strings.Join(args, " "), r.err)
		require.Regexp(t, `lacks the scope (audit:read|webhooks:write)`, r.err, "nebula %s as a Member", strings.Join(args, " "))
		require.Empty(t, r.out)
	}

	// delete: asked (--yes here), then gone; the other endpoint stays.
	c.ok("context", "use", ada)
	require.Contains(t, c.ok("webhook", "delete", "acme", ep, "--yes"), "Deleted webhook endpoint "+ep+" of acme.")
	r = c.run("", "webhook", "show", "acme", ep)
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	r = c.run("", "webhook", "delete", "acme", ep, "--yes")
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)
	c.json(&eps, "webhook", "list", "acme")
	require.Len(t, eps, 1)
	require.Equal(t, made.ID, eps[0].ID)
}
