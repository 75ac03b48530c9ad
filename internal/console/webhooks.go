package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
)

// The Webhooks page of an organisation: its outbound webhook endpoints
// (docs/webhooks.md) as GET .../webhooks answers them (audit:read), each
// endpoint's deliveries and a delivery's attempts; for webhooks:write
// (Owners and Admins) the forms to create, rotate, enable and delete
// endpoints and to redeliver. A signing secret is shown once, in the answer
// to the create or rotate form: never in an address, never stored.

func (c *Console) webhookRoutes(m recorder) {
	o := "/o/{org}/webhooks"
	m.HandleFunc("GET "+o, c.authed(c.webhooksPage))
	m.HandleFunc("POST "+o, c.authed(c.createWebhook))
	m.HandleFunc("GET "+o+"/{webhook}", c.authed(c.webhookPage))
	m.HandleFunc("POST "+o+"/{webhook}/rotate", c.authed(c.rotateWebhookSecret))
	m.HandleFunc("POST "+o+"/{webhook}/enable", c.authed(c.enableWebhook))
	m.HandleFunc("POST "+o+"/{webhook}/delete", c.authed(c.deleteWebhook))
	m.HandleFunc("GET "+o+"/{webhook}/deliveries/{delivery}", c.authed(c.webhookDeliveryPage))
	m.HandleFunc("POST "+o+"/{webhook}/deliveries/{delivery}/redeliver", c.authed(c.redeliverWebhook))
}

type webhooksData struct {
	Endpoints []api.WebhookEndpoint
	// Events are the event types an endpoint can ask for, for the form.
	Events []string
}

type webhookData struct {
	Endpoint   api.WebhookEndpoint
	Deliveries []api.WebhookDelivery
	// Secret is the secret just made (create or rotate): in this answer
	// only. Created says it was made with the endpoint.
	Secret  string
	Created bool
}

type webhookDeliveryData struct {
	Endpoint api.WebhookEndpoint
	api.WebhookDeliveryDetail
	// PayloadText is the payload, indented.
	PayloadText string
}

// webhookAPI is the API path of the endpoint the request names.
func webhookAPI(r *http.Request, tail ...string) string {
	return apiPath(r, append([]string{"/webhooks/" + esc(r.PathValue("webhook"))}, tail...)...)
}

func webhookPagePath(r *http.Request) string {
	return "/o/" + esc(r.PathValue("org")) + "/webhooks/" + esc(r.PathValue("webhook"))
}

func (c *Console) webhooksPage(w http.ResponseWriter, r *http.Request, s *session) {
	eps, err := list[api.WebhookEndpoint](c, r, s.token, apiPath(r, "/webhooks"), 0)
	if err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "webhooks", c.view(r, s, "Webhooks", &webhooksData{Endpoints: eps, Events: api.WebhookEventTypes}, ""))
}

// createWebhook creates an endpoint and shows it with its secret, this once.
func (c *Console) createWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	_ = r.ParseForm()
	req := api.CreateWebhookRequest{URL: strings.TrimSpace(r.PostFormValue("url")), Description: strings.TrimSpace(r.PostFormValue("description")),
		EventTypes: r.PostForm["event"]}
	if len(req.EventTypes) == 0 {
		if !c.allowed(w, r, s, domain.ScopeWebhooksWrite) {
			return
		}
		c.invalid(w, r, s, "No event type", `Choose the event types the endpoint receives, or "every event type".`)
		return
	}
	var out api.WebhookEndpointSecret
	if _, err := c.call(r, s.token, "POST", apiPath(r, "/webhooks"), req, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	r.SetPathValue("webhook", out.ID)
	c.renderWebhook(w, r, s, &webhookData{Endpoint: out.WebhookEndpoint, Secret: out.Secret, Created: true})
}

func (c *Console) webhookPage(w http.ResponseWriter, r *http.Request, s *session) {
	var ep api.WebhookEndpoint
	if _, err := c.call(r, s.token, "GET", webhookAPI(r), nil, &ep); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.renderWebhook(w, r, s, &webhookData{Endpoint: ep})
}

// renderWebhook shows an endpoint with its newest deliveries.
func (c *Console) renderWebhook(w http.ResponseWriter, r *http.Request, s *session, d *webhookData) {
	var err error
	if d.Deliveries, err = list[api.WebhookDelivery](c, r, s.token, webhookAPI(r, "/deliveries"), 100); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.render(w, r, http.StatusOK, "webhooks_endpoint", c.view(r, s, "Webhook endpoint", d, ""))
}

// rotateWebhookSecret makes the endpoint a new secret and shows it, this
// once; the one before signs beside it for 24 hours.
func (c *Console) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, s *session) {
	var out api.WebhookEndpointSecret
	if _, err := c.call(r, s.token, "POST", webhookAPI(r, "/rotate"), nil, &out); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.renderWebhook(w, r, s, &webhookData{Endpoint: out.WebhookEndpoint, Secret: out.Secret})
}

func (c *Console) enableWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "POST", webhookAPI(r, "/enable"), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, webhookPagePath(r), "The endpoint is enabled.")
}

// deleteWebhook deletes the endpoint, once confirmed.
func (c *Console) deleteWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("webhook")
	if !c.confirm(w, r, s, domain.ScopeWebhooksWrite, "Delete the webhook endpoint "+id+"? Nothing more is sent to it, and its pending deliveries fail.",
		"Delete endpoint", webhookPagePath(r)) {
		return
	}
	if _, err := c.call(r, s.token, "DELETE", webhookAPI(r), nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, "/o/"+esc(r.PathValue("org"))+"/webhooks", "Webhook endpoint "+id+" deleted.")
}

func (c *Console) webhookDeliveryPage(w http.ResponseWriter, r *http.Request, s *session) {
	d := &webhookDeliveryData{}
	if _, err := c.call(r, s.token, "GET", webhookAPI(r), nil, &d.Endpoint); err != nil {
		c.fail(w, r, s, err)
		return
	}
	if _, err := c.call(r, s.token, "GET", webhookAPI(r, "/deliveries/"+esc(r.PathValue("delivery"))), nil, &d.WebhookDeliveryDetail); err != nil {
		c.fail(w, r, s, err)
		return
	}
	var buf bytes.Buffer
	if json.Indent(&buf, d.Payload, "", "  ") == nil {
		d.PayloadText = buf.String()
	} else {
		d.PayloadText = string(d.Payload)
	}
	c.render(w, r, http.StatusOK, "webhooks_delivery", c.view(r, s, "Webhook delivery", d, ""))
}

// redeliverWebhook sends a delivery again with the same webhook-id (the API
// refuses a disabled endpoint, 409).
func (c *Console) redeliverWebhook(w http.ResponseWriter, r *http.Request, s *session) {
	var d api.WebhookDelivery
	if _, err := c.call(r, s.token, "POST", webhookAPI(r, "/deliveries/"+esc(r.PathValue("delivery"))+"/redeliver"), nil, &d); err != nil {
		c.fail(w, r, s, err)
		return
	}
	c.done(w, r, webhookPagePath(r)+"/deliveries/"+esc(d.ID), "Delivery "+d.ID+" is sent again, with the same webhook-id.")
}
