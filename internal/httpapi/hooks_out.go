package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// Outbound webhook endpoints of an organisation (docs/webhooks.md). The
// endpoints are read from their stream (outhooks-<org>), so a read right
// after a change sees it; deliveries and attempts from the webhooks'
// tables.

// outHookSecretPrefix starts every endpoint secret (Standard Webhooks).
const outHookSecretPrefix = "whsec_"

// newOutHookSecret makes a secret: whsec_ and 32 random bytes in base64.
func newOutHookSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return outHookSecretPrefix + base64.StdEncoding.EncodeToString(raw), nil
}

func outHookView(ep *domain.OutHookEndpoint) api.WebhookEndpoint {
	v := api.WebhookEndpoint{ID: ep.ID, URL: ep.URL, Description: ep.Description, EventTypes: slices.Clone(ep.EventTypes),
		Enabled: !ep.Disabled, DisabledReason: ep.DisabledReason, DisabledAt: ep.DisabledAt, CreatedAt: ep.CreatedAt.UTC(),
		SecretRotatedAt: ep.RotatedAt, PreviousSecretUntil: ep.PreviousUntil}
	if v.EventTypes == nil {
		v.EventTypes = []string{}
	}
	return v
}

// outHook reads the endpoint the path names ({webhook}).
func (a *API) outHook(ctx context.Context, r *http.Request, c *call) (*domain.OutHookEndpoint, error) {
	id := r.PathValue("webhook")
	hooks, _, err := a.cmd.OutHooksState(ctx, c.org.ID)
	if err != nil {
		return nil, err
	}
	ep, ok := hooks.Endpoints[id]
	if !ok {
		return nil, notFound("webhook endpoint " + c.org.Name + "/" + id)
	}
	return ep, nil
}

func (a *API) listOutHooks(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	hooks, _, err := a.cmd.OutHooksState(r.Context(), c.org.ID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]api.WebhookEndpoint, 0, len(hooks.Endpoints))
	for _, ep := range hooks.Endpoints {
		out = append(out, outHookView(ep))
	}
	slices.SortFunc(out, func(x, y api.WebhookEndpoint) int {
		if c := x.CreatedAt.Compare(y.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(x.ID, y.ID)
	})
	return http.StatusOK, out, nil
}

func (a *API) getOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ep, err := a.outHook(r.Context(), r, c)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, outHookView(ep), nil
}

// createOutHook creates an endpoint with a new secret, shown this once.
func (a *API) createOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	var req api.CreateWebhookRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	// Checked before a data key is made for the secret.
	if _, err := domain.ValidateOutHookURL(req.URL); err != nil {
		return 0, nil, err
	}
	if err := domain.ValidateText("description", req.Description, domain.OutHookMaxDescription); err != nil {
		return 0, nil, err
	}
	if _, err := domain.ValidateOutHookEventTypes(req.EventTypes); err != nil {
		return 0, nil, err
	}
	secret, err := newOutHookSecret()
	if err != nil {
		return 0, nil, err
	}
	sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(secret))
	if err != nil {
		return 0, nil, err
	}
	id := uuid.NewString()
	if _, err := a.cmd.OutHooks(ctx, commandContext(r, c), c.org.ID, domain.CreateOutHook{OrgID: c.org.ID, EndpointID: id,
		URL: req.URL, Description: req.Description, EventTypes: req.EventTypes, Secret: sealed}); err != nil {
		return 0, nil, err
	}
	r.SetPathValue("webhook", id)
	ep, err := a.outHook(ctx, r, c)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.WebhookEndpointSecret{WebhookEndpoint: outHookView(ep), Secret: secret}, nil
}

func (a *API) deleteOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ep, err := a.outHook(r.Context(), r, c)
	if err != nil {
		return 0, nil, err
	}
	res, err := a.cmd.OutHooks(r.Context(), commandContext(r, c), c.org.ID, domain.DeleteOutHook{EndpointID: ep.ID})
	if err != nil {
		return 0, nil, err
	}
	c.version = res.Version
	return http.StatusNoContent, nil, nil
}

// rotateOutHook gives an endpoint a new secret (shown once); the one before
// keeps signing beside it for 24 hours.
func (a *API) rotateOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	ep, err := a.outHook(ctx, r, c)
	if err != nil {
		return 0, nil, err
	}
	secret, err := newOutHookSecret()
	if err != nil {
		return 0, nil, err
	}
	sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(secret))
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.cmd.OutHooks(ctx, commandContext(r, c), c.org.ID, domain.RotateOutHookSecret{EndpointID: ep.ID, Secret: sealed}); err != nil {
		return 0, nil, err
	}
	if ep, err = a.outHook(ctx, r, c); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.WebhookEndpointSecret{WebhookEndpoint: outHookView(ep), Secret: secret}, nil
}

// enableOutHook enables a disabled endpoint again.
func (a *API) enableOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	ep, err := a.outHook(ctx, r, c)
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.cmd.OutHooks(ctx, commandContext(r, c), c.org.ID, domain.EnableOutHook{EndpointID: ep.ID}); err != nil {
		return 0, nil, err
	}
	if ep, err = a.outHook(ctx, r, c); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, outHookView(ep), nil
}

func (a *API) listOutHookDeliveries(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ep, err := a.outHook(r.Context(), r, c)
	if err != nil {
		return 0, nil, err
	}
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	d, err := hookstore.Deliveries(r.Context(), a.pool, ep.ID, after, c.page.limit+1)
	return http.StatusOK, d, err
}

func (a *API) getOutHookDelivery(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ep, err := a.outHook(r.Context(), r, c)
	if err != nil {
		return 0, nil, err
	}
	d, err := hookstore.Delivery(r.Context(), a.pool, ep.ID, r.PathValue("delivery"))
	if err != nil {
		return 0, nil, named(err, "delivery "+r.PathValue("delivery"))
	}
	return http.StatusOK, d, nil
}

// redeliverOutHook sends a delivery again, by hand, with the same
// webhook-id: recorded (and audited) on the endpoints' stream, then made
// pending by the webhooks' subscription.
func (a *API) redeliverOutHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	ep, err := a.outHook(ctx, r, c)
	if err != nil {
		return 0, nil, err
	}
	if ep.Disabled {
		return 0, nil, errorf(http.StatusConflict, "conflict", "webhook endpoint %s is disabled (%s): enable it first", ep.ID, ep.DisabledReason)
	}
	d, err := hookstore.Delivery(ctx, a.pool, ep.ID, r.PathValue("delivery"))
	if err != nil {
		return 0, nil, named(err, "delivery "+r.PathValue("delivery"))
	}
	if _, err := a.cmd.OutHooks(ctx, commandContext(r, c), c.org.ID, domain.RedeliverOutHook{EndpointID: ep.ID, DeliveryID: d.Delivery.ID}); err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, d.Delivery, nil
}
