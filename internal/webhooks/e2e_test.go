package webhooks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
	"github.com/nebulactrl/nebulactrl/transport"
)

// org is an organisation with a protected environment: setting a variable
// there opens a change set (changeset.opened), rejecting it sends
// changeset.rejected.
type org struct {
	t *testing.T
	c *client.Client
	// admin rejects what root opened (four eyes).
	admin *client.Client
	n     int
	cs    string
	url   string
}

// login signs both in again (sessions expire when the clock jumps a day).
func (o *org) login() {
	o.t.Helper()
	session := func(email string) *client.Client {
		anon, err := client.New(o.url, "")
		require.NoError(o.t, err)
		sess, err := anon.Login(context.Background(), email, "correct horse battery staple")
		require.NoError(o.t, err)
		c, err := client.New(o.url, sess.Token)
		require.NoError(o.t, err)
		return c
	}
	o.c, o.admin = session("root@example.com"), session("admin@example.com")
}

func newOrg(t *testing.T, srv *servertest.Server) *org {
	t.Helper()
	ctx := context.Background()
	c, err := client.New(srv.URL, srv.Setup(t, "root@example.com", "acme"))
	require.NoError(t, err)
	_, err = c.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	_, err = c.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = c.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "prod", Cluster: "eu-1", Protected: true})
	require.NoError(t, err)
	_, err = c.CreateUser(ctx, api.CreateUserRequest{Email: "admin@example.com", Password: "correct horse battery staple"})
	require.NoError(t, err)
	_, err = c.AddMember(ctx, "acme", "admin@example.com", "admin")
	require.NoError(t, err)
	o := &org{t: t, url: srv.URL}
	o.login()
	return o
}

// open opens a change set and returns its id.
func (o *org) open() string {
	o.t.Helper()
	o.n++
	res, err := o.c.SetVariables(context.Background(), "acme", "shop", "prod", "", []api.VariableInput{{Name: "N", Value: fmt.Sprint(o.n)}})
	require.NoError(o.t, err)
	require.NotNil(o.t, res.ChangeSet)
	o.cs = res.ChangeSet.ID
	return o.cs
}

// rejectIfOpen rejects the change set opened last unless it expired (the
// injected clock jumped past the approval TTL) or was decided.
func (o *org) rejectIfOpen() {
	o.t.Helper()
	_, err := o.admin.RejectChangeSet(context.Background(), "acme", "shop", "prod", o.cs, "not now")
	if err != nil && !strings.Contains(err.Error(), "may have been approved, rejected or expired") {
		require.NoError(o.t, err)
	}
}

func (o *org) reject() {
	o.t.Helper()
	_, err := o.admin.RejectChangeSet(context.Background(), "acme", "shop", "prod", o.cs, "not now")
	require.NoError(o.t, err)
}

func (o *org) endpoint(url string, types ...string) api.WebhookEndpointSecret {
	o.t.Helper()
	ep, err := o.c.CreateWebhookEndpoint(context.Background(), "acme", api.CreateWebhookRequest{URL: url, EventTypes: types})
	require.NoError(o.t, err)
	return ep
}

type body struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

func decode(t *testing.T, g got) (body, map[string]any) {
	t.Helper()
	var b body
	require.NoError(t, json.Unmarshal([]byte(g.Body), &b), g.Body)
	var data map[string]any
	require.NoError(t, json.Unmarshal(b.Data, &data))
	return b, data
}

// Deliveries as the reference library sees them: signed (verified by
// standardwebhooks, not by our code), retried with the same webhook-id and
// body until the receiver answers 2xx, every attempt recorded; a rotated
// secret verifies with either secret for 24 hours and then only the new
// one; a 410 disables the endpoint and the audit log says so.
func TestDeliveriesVerifyRetryRotateAndDisable(t *testing.T) {
	ctx := context.Background()
	r := startReceiver(t)
	clock := &offsetClock{r: r}
	srv := servertest.Start(t, servertest.Options{Now: clock.Now, WebhookAllowedHosts: []string{r.host}})
	o := newOrg(t, srv)
	ep := o.endpoint("http://"+r.host+"/hook", "changeset.opened", "changeset.rejected")
	first := ep.Secret
	r.secrets(first)

	// Fails twice, then succeeds: the event exactly, the same id each time.
	r.plan(200, 503, 500)
	cs := o.open()
	g := r.waitFor(1, 20*time.Second)
	require.Equal(t, 503, g[0].Answered)
	clock.Advance(6 * time.Second) // the first retry: 5 s with at most 10 % jitter
	g = r.waitFor(2, 20*time.Second)
	require.Equal(t, 500, g[1].Answered)
	clock.Advance(6 * time.Minute) // the second: 5 min
	g = r.waitFor(3, 20*time.Second)
	require.Equal(t, 200, g[2].Answered)
	for i, x := range g[:3] {
		require.Equal(t, []string{"ok"}, x.Verified, "attempt %d verifies with the reference library", i+1)
		require.Equal(t, g[0].ID, x.ID, "every attempt carries the same webhook-id")
		require.Equal(t, g[0].Body, x.Body, "and the same body")
		require.Equal(t, "/hook", x.Path)
	}
	b, data := decode(t, g[0])
	require.Equal(t, "changeset.opened", b.Type)
	require.Equal(t, cs, data["changeSetId"])
	require.NotEmpty(t, data["environmentId"])
	require.NotEmpty(t, data["projectId"])
	// The names of what the ids name, for receivers that tell people.
	require.Equal(t, "acme", data["organisation"])
	require.Equal(t, "shop", data["project"])
	require.Equal(t, "prod", data["environment"])
	time.Sleep(300 * time.Millisecond)
	require.Len(t, r.received(), 3, "nothing more after the success")

	// The API shows the delivery and each attempt.
	ds, err := o.c.WebhookDeliveries(ctx, "acme", ep.ID, 0)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, g[0].ID, ds[0].ID)
	require.Equal(t, api.WebhookSucceeded, ds[0].Status)
	require.Equal(t, 3, ds[0].Attempts)
	detail, err := o.c.WebhookDelivery(ctx, "acme", ep.ID, ds[0].ID)
	require.NoError(t, err)
	require.JSONEq(t, g[0].Body, string(detail.Payload))
	require.Len(t, detail.AttemptList, 3)
	for i, want := range []int{503, 500, 200} {
		a := detail.AttemptList[i]
		require.Equal(t, want, a.StatusCode)
		require.True(t, strings.HasPrefix(a.Response, fmt.Sprintf("answer %d ", want)), a.Response)
		require.Len(t, a.Response, 1024, "the first 1 KiB of the answer")
		require.NotContains(t, a.Response, first[len("whsec_"):])
	}

	// Redelivered by hand: the same id again.
	_, err = o.c.RedeliverWebhook(ctx, "acme", ep.ID, ds[0].ID)
	require.NoError(t, err)
	g = r.waitFor(4, 20*time.Second)
	require.Equal(t, g[0].ID, g[3].ID)
	require.Equal(t, []string{"ok"}, g[3].Verified)

	// Rotation: both secrets sign for 24 hours.
	rot, err := o.c.RotateWebhookEndpoint(ctx, "acme", ep.ID)
	require.NoError(t, err)
	second := rot.Secret
	r.secrets(first, second)
	o.reject()
	g = r.waitFor(5, 20*time.Second)
	b, data = decode(t, g[4])
	require.Equal(t, "changeset.rejected", b.Type)
	require.Equal(t, "not now", data["reason"])
	require.Equal(t, []string{"ok", "ok"}, g[4].Verified, "either secret verifies during the overlap")
	require.Len(t, strings.Fields(g[4].Signature), 2, "two signatures")
	require.NotEqual(t, g[0].ID, g[4].ID, "another event, another id")

	clock.Advance(24*time.Hour + time.Minute)
	o.login()
	o.open()
	g = r.waitFor(6, 20*time.Second)
	require.Len(t, strings.Fields(g[5].Signature), 1, "after 24 hours only the new secret signs")
	require.NotEqual(t, "ok", g[5].Verified[0], "the old secret no longer verifies")
	require.Equal(t, "ok", g[5].Verified[1])

	// 410 Gone disables the endpoint: no more deliveries, the audit log says so.
	r.plan(410)
	o.reject()
	g = r.waitFor(7, 20*time.Second)
	require.Equal(t, 410, g[6].Answered)
	wait.Eventually(t, "the endpoint is disabled", func() bool {
		e, err := o.c.WebhookEndpoint(ctx, "acme", ep.ID)
		return err == nil && !e.Enabled && strings.Contains(e.DisabledReason, "410")
	})
	r.plan(200)
	o.open()
	time.Sleep(time.Second)
	require.Len(t, r.received(), 7, "a disabled endpoint gets nothing")
	var entry *api.AuditEntry
	wait.Eventually(t, "the audit log says the endpoint was disabled", func() bool {
		page, err := o.c.Audit(ctx, client.AuditQuery{Org: "acme", Action: "webhook.endpoint.disable"})
		if err != nil || len(page.Items) == 0 {
			return false
		}
		entry = &page.Items[0]
		return true
	})
	require.Contains(t, entry.Detail, "410 Gone")
	require.Equal(t, "system", string(entry.Actor.Kind))
}

// Receivers on loopback, link-local and metadata addresses are refused at
// dial time (without the allow list), and each attempt says why.
func TestRefusedTargets(t *testing.T) {
	ctx := context.Background()
	r := startReceiver(t)
	srv := servertest.Start(t, servertest.Options{})
	o := newOrg(t, srv)
	targets := map[string]string{
		"http://" + r.host + "/hook":       "a loopback address",
		"http://localhost:1/hook":          "a loopback address",
		"http://169.254.169.254/latest":    "a cloud metadata address",
		"http://metadata.google.internal/": "a cloud metadata service",
		"http://169.254.10.1:8080/":        "a link-local address",
		"http://[fe80::1]:8080/":           "a link-local address",
	}
	ids := map[string]string{}
	for url := range targets {
		ids[url] = o.endpoint(url, "*").ID
	}
	o.open()
	for url, why := range targets {
		var d api.WebhookDeliveryDetail
		wait.Eventually(t, "an attempt to "+url, func() bool {
			ds, err := o.c.WebhookDeliveries(ctx, "acme", ids[url], 0)
			if err != nil || len(ds) == 0 || ds[0].Attempts == 0 {
				return false
			}
			d, err = o.c.WebhookDelivery(ctx, "acme", ids[url], ds[0].ID)
			return err == nil && len(d.AttemptList) > 0
		})
		a := d.AttemptList[0]
		require.Zero(t, a.StatusCode, url)
		require.Contains(t, a.Error, why, url)
		require.Contains(t, a.Error, "NEBULACTRL_WEBHOOK_ALLOWED_HOSTS", url)
		require.Equal(t, api.WebhookPending, d.Delivery.Status, "retried later: %s", url)
	}
	require.Empty(t, r.received(), "the loopback receiver got nothing")
}

// A delivery that never gets a 2xx is tried on the whole schedule and then
// fails; an endpoint whose deliveries failed for 5 days is disabled, and
// the audit log says why.
func TestFiveDaysOfFailuresDisableTheEndpoint(t *testing.T) {
	ctx := context.Background()
	r := startReceiver(t)
	clock := &offsetClock{r: r}
	srv := servertest.Start(t, servertest.Options{Now: clock.Now, WebhookAllowedHosts: []string{r.host}})
	o := newOrg(t, srv)
	ep := o.endpoint("http://"+r.host+"/hook", "changeset.opened")
	r.secrets(ep.Secret)
	r.plan(500)
	o.open()
	r.waitFor(1, 20*time.Second)
	for i, wait := range []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour} {
		clock.Advance(wait + wait/10 + time.Second)
		r.waitFor(i+2, 20*time.Second)
	}
	var d []api.WebhookDelivery
	o.login()
	require.Eventually(t, func() bool {
		var err error
		d, err = o.c.WebhookDeliveries(ctx, "acme", ep.ID, 0)
		return err == nil && len(d) == 1 && d[0].Status == api.WebhookFailed
	}, 20*time.Second, 50*time.Millisecond, "the delivery failed after its last retry: %+v", d)
	require.Equal(t, 8, d[0].Attempts)
	require.Contains(t, d[0].Reason, "no attempt of 8")
	clock.Advance(time.Hour)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, r.received(), 8, "no attempt after the last")
	e, err := o.c.WebhookEndpoint(ctx, "acme", ep.ID)
	require.NoError(t, err)
	require.True(t, e.Enabled, "28 hours of failures do not disable it")

	// The failures go on: a new event every 20 hours, each failing (a day
	// without a failure would end the run). Past 5 days of them, the
	// endpoint is disabled.
	disabled := func() bool {
		e, err := o.c.WebhookEndpoint(ctx, "acme", ep.ID)
		return err == nil && !e.Enabled && strings.Contains(e.DisabledReason, "5 days")
	}
	for day := 0; day < 6 && !disabled(); day++ {
		clock.Advance(20 * time.Hour)
		o.login()
		o.rejectIfOpen()
		n := len(r.received())
		o.open()
		// Its delivery fails, unless a retry's failure disabled the
		// endpoint first.
		wait.Within(t, 20*time.Second, "the new event's delivery fails", func() bool { return len(r.received()) > n || disabled() })
	}
	wait.Eventually(t, "the endpoint is disabled after 5 days of failures", disabled)
	wait.Eventually(t, "the audit log says so", func() bool {
		page, err := o.c.Audit(ctx, client.AuditQuery{Org: "acme", Action: "webhook.endpoint.disable"})
		return err == nil && len(page.Items) == 1 && strings.Contains(page.Items[0].Detail, "failed for 5 days")
	})
}

// A cluster's first live agent sends cluster.connected; when its lease
// ends (here: the agent's connection stops and 60 s of the injected clock
// pass) the leader job sends cluster.disconnected.
func TestClusterConnectedAndDisconnected(t *testing.T) {
	ctx := context.Background()
	r := startReceiver(t)
	clock := &offsetClock{r: r}
	srv := servertest.Start(t, servertest.Options{Now: clock.Now, WebhookAllowedHosts: []string{r.host}, JobInterval: 200 * time.Millisecond})
	c, err := client.New(srv.URL, srv.Setup(t, "root@example.com", "acme"))
	require.NoError(t, err)
	ep, err := c.CreateWebhookEndpoint(ctx, "acme", api.CreateWebhookRequest{URL: "http://" + r.host + "/hook", EventTypes: []string{"cluster.connected", "cluster.disconnected"}})
	require.NoError(t, err)
	r.secrets(ep.Secret)
	created, err := c.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	reg, err := transport.Register(ctx, srv.URL, nil, transport.RegisterRequest{JoinToken: created.JoinToken.Token, Name: "node-1"})
	require.NoError(t, err)
	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	ag, err := transport.NewClient(transport.ClientConfig{URL: srv.URL, Credential: reg.Credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}}
		},
		Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
		}})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { _ = ag.Run(agentCtx); close(done) }()

	g := r.waitFor(1, 30*time.Second)
	b, data := decode(t, g[0])
	require.Equal(t, "cluster.connected", b.Type)
	require.Equal(t, created.ID, data["clusterId"])
	require.Equal(t, created.Name, data["cluster"])
	require.Equal(t, "acme", data["organisation"])
	require.EqualValues(t, 1, data["liveAgents"])
	require.Equal(t, []string{"ok"}, g[0].Verified)

	stop()
	<-done
	clock.Advance(61 * time.Second)
	g = r.waitFor(2, 30*time.Second)
	b, data = decode(t, g[1])
	require.Equal(t, "cluster.disconnected", b.Type)
	require.Equal(t, created.ID, data["clusterId"])
	require.EqualValues(t, 0, data["liveAgents"])
	time.Sleep(time.Second)
	require.Len(t, r.received(), 2, "one transition, one event")
}
