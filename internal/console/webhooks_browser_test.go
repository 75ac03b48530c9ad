package console_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// The Webhooks page in headless Chromium against a real control plane: an
// Owner creates an endpoint whose description is markup (shown as text,
// never run), sees its secret once and never again, reads a delivery's
// attempts (a receiver's answer that is markup is shown as text too),
// redelivers it, rotates the secret (the new one once, the old one signing
// 24 h more), and deletes the endpoint after confirming; a form without
// the CSRF token is refused; a Member is refused the page (the API's 403)
// and has no link to it. axe-core runs on every page.
func TestWebhooksPageInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{})
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
	b.fill("#wh-url", "https://hooks.example.com/nebula")
	b.fill("#wh-description", markup)
	b.do(chromedp.Click(chromedp.CSS(`input[name="event"][value="deployment.succeeded"]`)))
	b.do(chromedp.Click(chromedp.CSS(`input[name="event"][value="build.failed"]`)))
	b.submit("#create-webhook", "#new-webhook-secret")
	secret := b.text("#new-webhook-secret-value")
	require.Regexp(t, `^whsec_[A-Za-z0-9+/=]{40,}$`, secret)
	require.Contains(t, b.text("#new-webhook-secret"), "shown once and never again")
	require.Contains(t, b.text("#new-webhook-secret"), "Copy it now")
	require.Equal(t, markup, b.text("#webhook-description"), "the description is shown as text")
	require.False(t, b.has("#webhook-description script"), "the description is no markup")
	require.Contains(t, html(b), "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Equal(t, "build.failed, deployment.succeeded", b.text("#webhook-events"))
	require.Contains(t, b.text("#webhook-state"), "Enabled")
	b.visit("webhook-created")
	eps := endpoints()
	require.Len(t, eps, 1)
	ep := eps[0]
	require.Equal(t, markup, ep.Description)

	// Never again: not on the list, not on the endpoint's page.
	b.open("/o/acme/webhooks", `tr[data-endpoint="`+ep.ID+`"]`)
	row := b.text(`tr[data-endpoint="` + ep.ID + `"]`)
	require.Contains(t, row, "https://hooks.example.com/nebula")
	require.Contains(t, row, markup)
	require.Contains(t, row, "Enabled")
	require.False(t, b.has(`tr[data-endpoint] script`))
	require.NotContains(t, html(b), secret)
	require.NotContains(t, html(b), "whsec_")
	b.visit("webhooks")

	// A delivery as the webhooks' subscription writes it, with an attempt
	// as the sender records it (hookstore, the tables' owner), whose
	// answer is markup.
	var me api.MeResponse
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/me", root, nil, &me))
	pool, err := pgxpool.New(t.Context(), srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	delivery := uuid.NewString()
	at := time.Now().Add(-time.Minute).UTC()
	require.NoError(t, hookstore.InsertDelivery(t.Context(), pool, hookstore.NewDelivery{ID: delivery, OrgID: me.Organisations[0].ID, EndpointID: ep.ID,
		Position: 1, EventType: "deployment.succeeded", Payload: []byte(`{"type":"deployment.succeeded","timestamp":"2026-12-01T12:00:00Z","data":{"service":"api"}}`), At: at}))
	const answer = `<img src=x id=injected onerror=alert(1)>thanks`
	_, err = hookstore.RecordAttempt(t.Context(), pool, hookstore.Attempt{DeliveryID: delivery, EndpointID: ep.ID, At: at.Add(time.Second),
		Duration: 42 * time.Millisecond, StatusCode: 200, Response: answer, Succeeded: true})
	require.NoError(t, err)

	b.do(chromedp.Click(chromedp.CSS(`tr[data-endpoint="` + ep.ID + `"] a`)))
	b.waitJS(`document.querySelector('tr[data-delivery="`+delivery+`"]')`, "the endpoint's page with its delivery")
	b.watchCSP()
	require.False(t, b.has("#new-webhook-secret"), "the endpoint's page shows no secret")
	require.NotContains(t, html(b), secret)
	drow := b.text(`tr[data-delivery="` + delivery + `"]`)
	require.Contains(t, drow, "deployment.succeeded")
	require.Contains(t, drow, "succeeded")
	require.Contains(t, drow, "200")
	b.visit("webhook-endpoint")

	b.do(chromedp.Click(chromedp.CSS(`tr[data-delivery="` + delivery + `"] a`)))
	b.waitJS(`document.querySelector('tr[data-attempt="1"]')`, "the delivery's attempts")
	b.watchCSP()
	attempt := b.text(`tr[data-attempt="1"]`)
	require.Contains(t, attempt, "200")
	require.Contains(t, attempt, "42 ms")
	require.Contains(t, attempt, answer, "the answer is shown as text")
	require.False(t, b.has("#injected"), "the answer is no markup")
	require.Contains(t, b.text("#delivery-payload"), `"service": "api"`)
	b.visit("webhook-delivery")
	b.submit("#redeliver", ".notice")
	require.Contains(t, b.text(".notice"), "Delivery "+delivery+" is sent again, with the same webhook-id.")

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
