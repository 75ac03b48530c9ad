package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

var whsecRE = regexp.MustCompile(`whsec_[A-Za-z0-9+/=]+`)

// The outbound webhook commands against a real control plane with its
// delivery engine and a real receiver on loopback: the secret printed once
// at create and at rotate and never again (list, show, -o json);
// deliveries (none, then the engine's: the payload and every attempt),
// redelivery with the same webhook-id, an endpoint disabled by 410 Gone
// (shown with why, redelivery refused with exit 5, enabled again), delete
// with confirmation; bad command lines exit 2 and change nothing; a
// Member's token is refused (exit 4).
func TestWebhookCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	t.Setenv(envContext, "")
	recv := startHookReceiver(t)
	srv := servertest.Start(t, servertest.Options{WebhookAllowedHosts: []string{strings.TrimPrefix(recv.url, "http://")}})
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

	// Deliveries by the engine to a real receiver on loopback (allowed by
	// NEBULACTRL_WEBHOOK_ALLOWED_HOSTS): /ok answers 200, /gone 410 Gone,
	// which disables its endpoint. A variable set in a protected
	// environment opens a change set: changeset.opened.
	okURL, goneURL := recv.url+"/ok", recv.url+"/gone"
	var okEP, goneEP api.WebhookEndpointSecret
	c.json(&okEP, "webhook", "create", "acme", "--url", okURL, "--event", "changeset.opened")
	c.json(&goneEP, "webhook", "create", "acme", "--url", goneURL, "--event", "changeset.opened,changeset.rejected")
	c.ok("cluster", "create", "acme/eu-1")
	c.ok("project", "create", "acme/shop")
	c.ok("env", "create", "acme/shop/prod", "--cluster", "eu-1", "--protected")
	c.waits("", "var", "set", "acme/shop/prod", "N=1")
	var ds []api.WebhookDelivery
	require.Eventually(t, func() bool {
		c.json(&ds, "webhook", "deliveries", "acme", okEP.ID)
		return len(ds) == 1 && ds[0].Status == api.WebhookSucceeded
	}, 30*time.Second, 100*time.Millisecond, "the receiver took the delivery")
	delivery := ds[0].ID
	require.Equal(t, 200, ds[0].LastStatusCode)
	require.Equal(t, []string{delivery}, recv.ids("/ok"), "the webhook-id is the delivery's id")
	list = c.ok("webhook", "deliveries", "acme", okEP.ID)
	require.Regexp(t, `(?m)^ID\s+EVENT\s+STATUS\s+ATTEMPTS\s+LAST STATUS\s+LAST ATTEMPT\s+NEXT ATTEMPT\s+CREATED$`, list)
	require.Regexp(t, `(?m)^`+delivery+`\s+changeset.opened\s+succeeded\s+1\s+200\s+(just now|\d+ s ago)\s+-\s+(just now|\d+ s ago)$`, list)
	detail := c.ok("webhook", "deliveries", "acme", okEP.ID, delivery)
	require.Contains(t, detail, "Delivery "+delivery+" (webhook-id) of changeset.opened to webhook endpoint "+okEP.ID)
	require.Contains(t, detail, "status        succeeded")
	require.Contains(t, detail, `"type": "changeset.opened"`, "the payload, indented")
	require.Regexp(t, `Attempt 1 at \S+ \(\d+ ms\)\n  status    200\n  \| ok, thanks\n  \| second line\n`, detail)
	var dd api.WebhookDeliveryDetail
	c.json(&dd, "webhook", "deliveries", "acme", okEP.ID, delivery)
	require.Len(t, dd.AttemptList, 1)
	var payload api.WebhookPayload
	require.NoError(t, json.Unmarshal(dd.Payload, &payload))
	require.Equal(t, "changeset.opened", payload.Type)
	out = c.ok("webhook", "redeliver", "acme", okEP.ID, delivery)
	require.Contains(t, out, "Redelivering "+delivery+" (changeset.opened) to webhook endpoint "+okEP.ID+": it is sent again with the same webhook-id.")
	require.Eventually(t, func() bool { return len(recv.ids("/ok")) == 2 }, 30*time.Second, 100*time.Millisecond, "redelivered")
	require.Equal(t, []string{delivery, delivery}, recv.ids("/ok"), "the same webhook-id again")
	require.Eventually(t, func() bool {
		c.json(&dd, "webhook", "deliveries", "acme", okEP.ID, delivery)
		return len(dd.AttemptList) == 2
	}, 30*time.Second, 100*time.Millisecond, "the second attempt is recorded")
	require.True(t, dd.AttemptList[1].Manual)
	require.Contains(t, c.ok("webhook", "deliveries", "acme", okEP.ID, delivery), ", redelivered by hand)")

	// 410 Gone disabled the other endpoint: shown with why; redelivering
	// to it is refused (exit 5) until it is enabled again.
	require.Eventually(t, func() bool {
		var e api.WebhookEndpoint
		c.json(&e, "webhook", "show", "acme", goneEP.ID)
		return !e.Enabled
	}, 30*time.Second, 100*time.Millisecond, "410 disables the endpoint")
	c.json(&ds, "webhook", "deliveries", "acme", goneEP.ID)
	require.Len(t, ds, 1)
	gone := ds[0].ID
	require.Regexp(t, `(?m)^`+goneEP.ID+`\s+\S+/gone\s+changeset.opened,changeset.rejected\s+disabled: \S.*$`, c.ok("webhook", "list", "acme"))
	require.Regexp(t, `state        disabled since \S+: \S`, c.ok("webhook", "show", "acme", goneEP.ID))
	r = c.run("", "webhook", "redeliver", "acme", goneEP.ID, gone)
	require.Equal(t, exitConflict, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "enable it first")
	require.Len(t, recv.ids("/gone"), 1, "nothing was sent again")
	require.Contains(t, c.ok("webhook", "enable", "acme", goneEP.ID), "Webhook endpoint "+goneEP.ID+" of acme is enabled.")
	c.ok("webhook", "redeliver", "acme", goneEP.ID, gone)
	require.Eventually(t, func() bool { return len(recv.ids("/gone")) == 2 }, 30*time.Second, 100*time.Millisecond, "redelivered after enabling")
	require.Equal(t, []string{gone, gone}, recv.ids("/gone"))

	// The audit log (a projection: a moment later) has every change.
	actions := map[string]int{}
	require.Eventually(t, func() bool {
		var audit []api.AuditEntry
		c.json(&audit, "audit", "--org", "acme")
		clear(actions)
		for _, e := range audit {
			actions[e.Action]++
		}
		return actions["webhook.endpoint.redeliver"] == 2 && actions["webhook.endpoint.enable"] == 1
	}, 20*time.Second, 100*time.Millisecond, "the redeliveries and the enabling are audited")
	require.Equal(t, 4, actions["webhook.endpoint.create"], "%v", actions)
	require.Equal(t, 1, actions["webhook.endpoint.rotate"], "%v", actions)
	require.GreaterOrEqual(t, actions["webhook.endpoint.disable"], 1, "%v", actions)

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
	require.Len(t, eps, 4, "no bad command line made an endpoint")

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
	require.Len(t, eps, 3)
	require.NotContains(t, []string{eps[0].ID, eps[1].ID, eps[2].ID}, ep)
}

// hookReceiver is an HTTP receiver of webhooks on loopback: /gone answers
// 410 Gone, anything else 200 with two lines; it keeps the webhook-id of
// every request by path.
type hookReceiver struct {
	url  string
	mu   sync.Mutex
	seen map[string][]string
}

func startHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{seen: map[string][]string{}}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.seen[r.URL.Path] = append(h.seen[r.URL.Path], r.Header.Get("webhook-id"))
		h.mu.Unlock()
		if r.URL.Path == "/gone" {
			http.Error(w, "gone", http.StatusGone)
			return
		}
		_, _ = io.WriteString(w, "ok, thanks\nsecond line\n")
	}))
	t.Cleanup(s.Close)
	h.url = s.URL
	return h
}

func (h *hookReceiver) ids(path string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen[path])
}
