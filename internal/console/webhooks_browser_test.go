package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// hookAnswer is what the receiver answers: markup, which the console must
// show as text.
const hookAnswer = `<img src=x id=injected onerror=alert(1)>thanks`

// markupReceiver is a webhook receiver on loopback that answers 200 with
// hookAnswer and keeps the webhook-id of every request.
type markupReceiver struct {
	url  string
	mu   sync.Mutex
	seen []string
}

func startMarkupReceiver(t *testing.T) *markupReceiver {
	h := &markupReceiver{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Get("webhook-id"))
		h.mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, hookAnswer)
	}))
	t.Cleanup(s.Close)
	h.url = s.URL
	return h
}

func (h *markupReceiver) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// The Webhooks page in headless Chromium against a real control plane with
// its delivery engine and a real receiver on loopback: an Owner creates an
// endpoint whose description is markup (shown as text, never run), sees its
// secret once and never again, reads a delivery's attempts (the receiver's
// answer, markup too, is shown as text), redelivers it (the receiver gets
// the same webhook-id again), rotates the secret (the new one once, the old one signing
// 24 h more), and deletes the endpoint after confirming; a form without
// the CSRF token is refused; a Member is refused the page (the API's 403)
// and has no link to it. axe-core runs on every page.
func TestWebhooksPageInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	recv := startMarkupReceiver(t)
	srv := servertest.Start(t, servertest.Options{WebhookAllowedHosts: []string{strings.TrimPrefix(recv.url, "http://")}})
	root := srv.Setup(t, "ada@example.com", "acme")
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/users", root, map[string]any{"email": "mia@example.com", "password": password}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/members", root, map[string]any{"email": "mia@example.com", "role": "member"}, nil))
	endpoints := func() []api.WebhookEndpoint {
		var pg api.Page[api.WebhookEndpoint]
		require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/webhooks", root, nil, &pg))
		return pg.Items
	}
	html := func(b *browser) string { return eval[string](b, "document.documentElement.outerHTML") }

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", "/o/acme/webhooks", "#no-webhooks")
	require.True(t, b.has(`nav a[href="/o/acme/webhooks"]`), "the organisation's navigation links the page")
	b.visit("webhooks-empty")

	// Refused without the CSRF token: nothing is made.
	require.Equal(t, http.StatusForbidden, b.post("/o/acme/webhooks", map[string]string{"url": "https://hooks.example.com/x", "event": "*"}, false))
	require.Empty(t, endpoints())

	const markup = `<script>alert(1)</script>`
	b.fill("#wh-url", recv.url+"/hook")
	b.fill("#wh-description", markup)
	b.do(chromedp.Click(chromedp.CSS(`input[name="event"][value="changeset.opened"]`)))
	b.do(chromedp.Click(chromedp.CSS(`input[name="event"][value="build.failed"]`)))
	b.submit("#create-webhook", "#new-webhook-secret")
	secret := b.text("#new-webhook-secret-value")
	require.Regexp(t, `^whsec_[A-Za-z0-9+/=]{40,}$`, secret)
	require.Contains(t, b.text("#new-webhook-secret"), "shown once and never again")
	require.Contains(t, b.text("#new-webhook-secret"), "Copy it now")
	require.Equal(t, markup, b.text("#webhook-description"), "the description is shown as text")
	require.False(t, b.has("#webhook-description script"), "the description is no markup")
	require.Contains(t, html(b), "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Equal(t, "build.failed, changeset.opened", b.text("#webhook-events"))
	require.Contains(t, b.text("#webhook-state"), "Enabled")
	b.visit("webhook-created")
	eps := endpoints()
	require.Len(t, eps, 1)
	ep := eps[0]
	require.Equal(t, markup, ep.Description)

	// Never again: not on the list, not on the endpoint's page.
	b.open("/o/acme/webhooks", `tr[data-endpoint="`+ep.ID+`"]`)
	row := b.text(`tr[data-endpoint="` + ep.ID + `"]`)
	require.Contains(t, row, recv.url+"/hook")
	require.Contains(t, row, markup)
	require.Contains(t, row, "Enabled")
	require.False(t, b.has(`tr[data-endpoint] script`))
	require.NotContains(t, html(b), secret)
	require.NotContains(t, html(b), "whsec_")
	b.visit("webhooks")

	// A delivery by the engine to the receiver, whose answer is markup: a
	// variable set in a protected environment opens a change set
	// (changeset.opened).
	cl, err := client.New(srv.URL, root)
	require.NoError(t, err)
	_, err = cl.CreateCluster(t.Context(), "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	_, err = cl.CreateProject(t.Context(), "acme", "shop")
	require.NoError(t, err)
	_, err = cl.CreateEnvironment(t.Context(), "acme", "shop", api.CreateEnvironmentRequest{Name: "prod", Cluster: "eu-1", Protected: true})
	require.NoError(t, err)
	res, err := cl.SetVariables(t.Context(), "acme", "shop", "prod", "", []api.VariableInput{{Name: "N", Value: "1"}})
	require.NoError(t, err)
	require.NotNil(t, res.ChangeSet)
	var ds []api.WebhookDelivery
	require.Eventually(t, func() bool {
		ds, err = cl.WebhookDeliveries(t.Context(), "acme", ep.ID, 0)
		require.NoError(t, err)
		return len(ds) == 1 && ds[0].Status == api.WebhookSucceeded
	}, 30*time.Second, 100*time.Millisecond, "the receiver took the delivery")
	delivery := ds[0].ID

	b.do(chromedp.Click(chromedp.CSS(`tr[data-endpoint="` + ep.ID + `"] a`)))
	b.waitJS(`document.querySelector('tr[data-delivery="`+delivery+`"]')`, "the endpoint's page with its delivery")
	b.watchCSP()
	require.False(t, b.has("#new-webhook-secret"), "the endpoint's page shows no secret")
	require.NotContains(t, html(b), secret)
	drow := b.text(`tr[data-delivery="` + delivery + `"]`)
	require.Contains(t, drow, "changeset.opened")
	require.Contains(t, drow, "succeeded")
	require.Contains(t, drow, "200")
	b.visit("webhook-endpoint")

	b.do(chromedp.Click(chromedp.CSS(`tr[data-delivery="` + delivery + `"] a`)))
	b.waitJS(`document.querySelector('tr[data-attempt="1"]')`, "the delivery's attempts")
	b.watchCSP()
	attempt := b.text(`tr[data-attempt="1"]`)
	require.Contains(t, attempt, "200")
	require.Regexp(t, `\d+ ms`, attempt)
	require.Contains(t, attempt, hookAnswer, "the answer is shown as text")
	require.False(t, b.has("#injected"), "the answer is no markup")
	require.Contains(t, b.text("#delivery-payload"), `"type": "changeset.opened"`)
	b.visit("webhook-delivery")
	b.submit("#redeliver", ".notice")
	require.Contains(t, b.text(".notice"), "Delivery "+delivery+" is sent again, with the same webhook-id.")
	require.Eventually(t, func() bool { return len(recv.ids()) == 2 }, 30*time.Second, 100*time.Millisecond, "redelivered")
	require.Equal(t, []string{delivery, delivery}, recv.ids(), "with the same webhook-id")

	// Rotate: the new secret once, the old one signing beside it.
	b.open("/o/acme/webhooks/"+ep.ID, "#webhook-rotate")
	b.submit("#webhook-rotate", "#new-webhook-secret")
	rotated := b.text("#new-webhook-secret-value")
	require.Regexp(t, `^whsec_`, rotated)
	require.NotEqual(t, secret, rotated)
	require.Contains(t, b.text("#previous-webhook-secret"), "keeps signing beside the new one")
	require.Contains(t, b.text("#webhook-secret"), "the previous one signs too until")
	b.visit("webhook-rotated")
	b.open("/o/acme/webhooks/"+ep.ID, "#webhook-facts")
	require.False(t, b.has("#new-webhook-secret"))
	require.NotContains(t, html(b), rotated)
	eps = endpoints()
	require.NotNil(t, eps[0].PreviousSecretUntil)

	// Delete, once confirmed.
	b.submit("#webhook-delete", "#confirm")
	require.Contains(t, b.text("#confirm-question"), "Delete the webhook endpoint "+ep.ID+"?")
	b.visit("webhook-delete-confirm")
	require.Len(t, endpoints(), 1, "asking deletes nothing")
	b.submit("#confirm", "#no-webhooks")
	require.Contains(t, b.text(".notice"), "Webhook endpoint "+ep.ID+" deleted.")
	require.Empty(t, endpoints())

	// A Member: no link, the API's refusal, no form.
	b.signOut()
	b.signIn("mia@example.com", "/o/acme/webhooks", "#problem")
	require.Contains(t, b.text("#problem"), "lacks the scope audit:read")
	require.False(t, b.has(`nav a[href="/o/acme/webhooks"]`))
	require.False(t, b.has("#new-webhook-form"))
	require.Equal(t, "Forbidden", b.text("h1"))
	b.visit("webhooks-member")
}
