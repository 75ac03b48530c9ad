package main

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
)

// nebula webhook: the organisation's outbound webhook endpoints, which the
// control plane tells what happened, signed per the Standard Webhooks
// specification (docs/webhooks.md). Not to be confused with nebula project
// webhook, the inbound one a forge sends its pushes to.

const argsEndpoint = shapeOrg + " ENDPOINT_ID"

// webhookEvents are the event types an endpoint can ask for, for the help
// texts and the messages.
var webhookEvents = strings.Join(api.WebhookEventTypes, ", ")

// wrapWords breaks s into lines of at most width bytes, between words.
func wrapWords(s string, width int) string {
	var b strings.Builder
	n := 0
	for _, w := range strings.Fields(s) {
		if n > 0 && n+1+len(w) > width {
			b.WriteString("\n")
			n = 0
		} else if n > 0 {
			b.WriteString(" ")
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}

// checkWebhookEvents checks --event against the documented event types
// before anything is sent.
func checkWebhookEvents(types []string) error {
	if len(types) == 0 {
		return usagef("give the endpoint at least one --event (or --event '*' for every type): %s", webhookEvents)
	}
	for _, t := range types {
		if t != api.WebhookAllEvents && !slices.Contains(api.WebhookEventTypes, t) {
			return usagef("--event %q is not an event type: want one of %s, or '*' for every one", t, webhookEvents)
		}
	}
	if slices.Contains(types, api.WebhookAllEvents) && len(types) > 1 {
		return usagef("--event '*' names every event type already: give it alone")
	}
	return nil
}

// checkWebhookURL checks --url before anything is sent (the control plane
// checks it again, and refuses loopback and private addresses when it
// dials).
func checkWebhookURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return usagef("give the endpoint's --url (https://...)")
	case err != nil:
		return usagef("--url %q is not a URL: %v", raw, err)
	case u.Scheme != "https" && u.Scheme != "http":
		return usagef("--url %q: want an https:// (or http://) URL", raw)
	case u.Host == "":
		return usagef("--url %q has no host", raw)
	}
	return nil
}

func webhookState(e api.WebhookEndpoint) string {
	if e.Enabled {
		return "enabled"
	}
	s := "disabled"
	if e.DisabledReason != "" {
		s += ": " + e.DisabledReason
	}
	return s
}

// printSecret prints a signing secret, once, with what to do with it.
func (x *cmdCtx) printSecret(secret string) {
	x.printf("\nThe signing secret, shown only this once (store it with the receiver now; it\nis never shown again, nebula webhook rotate makes a new one):\n\n    %s\n", secret)
}

func webhookCommand() *cli.Command {
	return group("webhook", "manage the organisation's outbound webhook endpoints and their deliveries",
		spec{
			name: "create", usage: "create an outbound webhook endpoint; its signing secret is printed once", argsUsage: shapeOrg,
			description: `Creates an endpoint the control plane sends the organisation's events to: an
HTTP POST per event, signed per the Standard Webhooks specification
(webhook-id, webhook-timestamp, webhook-signature; docs/webhooks.md shows how
to verify it). The signing secret (whsec_...) is printed once: store it with
the receiver at once, it is never shown again.

Event types (or '*' for every one, also those added later):
` + wrapWords(webhookEvents, 78) + `

Example:
   nebula webhook create acme --url https://hooks.example.com/nebula --event deployment.succeeded --event deployment.failed
   nebula webhook create acme --url https://hooks.example.com/all --event '*' --description "chat notifications"`,
			flags: []cli.Flag{
				&cli.StringFlag{Name: "url", Usage: "the receiver's https:// (or http://) URL (here not the control plane's: that is the context's, or " + envURL + ")"},
				&cli.StringFlag{Name: "description", Usage: "what the endpoint is for (at most 500 bytes)"},
				&cli.StringSliceFlag{Name: "event", Usage: "an event type it receives (repeat, or separate with commas; '*' for all)"},
			},
			json: true, nargs: 1, noURL: true,
			run: func(x *cmdCtx) error {
				a, err := x.address(0, shapeOrg)
				if err != nil {
					return err
				}
				// --url is the control plane's URL on every other command;
				// here it is the endpoint's (the control plane comes from
				// the context or NEBULACTRL_URL).
				events := x.StringSlice("event")
				if err := checkWebhookURL(x.String("url")); err != nil {
					return err
				}
				if err := checkWebhookEvents(events); err != nil {
					return err
				}
				cl, err := x.webhookClient()
				if err != nil {
					return err
				}
				var ep api.WebhookEndpointSecret
				return x.read(&ep, func(ctx context.Context) (err error) {
					ep, err = cl.CreateWebhookEndpoint(ctx, a.Org, api.CreateWebhookRequest{URL: x.String("url"), Description: x.String("description"), EventTypes: events})
					return
				}, func() error {
					x.printf("Created webhook endpoint %s of %s: %s receives %s.\n", ep.ID, a.Org, ep.URL, strings.Join(ep.EventTypes, ", "))
					x.printSecret(ep.Secret)
					return nil
				})
			},
		}.command(),
		spec{
			name: "list", usage: "list the organisation's outbound webhook endpoints (never their secrets)", argsUsage: shapeOrg,
			description: `Lists the organisation's webhook endpoints, oldest first: the URL, the event
types, enabled or disabled and why (the receiver answered 410 Gone, or 5 days
of failed deliveries: nebula webhook enable turns it on again).

Example:
   nebula webhook list acme`,
			json: true, nargs: 1,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var eps []api.WebhookEndpoint
				return x.read(&eps, func(ctx context.Context) (err error) { eps, err = cl.WebhookEndpoints(ctx, a.Org); return }, func() error {
					var rows [][]string
					for _, e := range eps {
						rows = append(rows, []string{e.ID, cell(e.URL), strings.Join(e.EventTypes, ","), cell(webhookState(e)), when(e.CreatedAt), cell(e.Description)})
					}
					x.table("ID\tURL\tEVENTS\tSTATE\tCREATED\tDESCRIPTION", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "show", usage: "show one outbound webhook endpoint", argsUsage: argsEndpoint,
			description: `Shows an endpoint: its URL, description, event types, whether it is enabled
(or since when it is disabled, and why), and its secret's last rotation (the
secret itself is never shown again).

Example:
   nebula webhook show acme 4f1c2b3a-...`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var e api.WebhookEndpoint
				return x.read(&e, func(ctx context.Context) (err error) { e, err = cl.WebhookEndpoint(ctx, a.Org, x.args[1]); return }, func() error {
					x.printEndpoint(a.Org, e)
					return nil
				})
			},
		}.command(),
		spec{
			name: "delete", usage: "delete an outbound webhook endpoint", argsUsage: argsEndpoint,
			description: `Deletes an endpoint: nothing more is sent to it, and its pending deliveries
fail. Asks first on a terminal; give --yes otherwise.

Example:
   nebula webhook delete acme 4f1c2b3a-... --yes`,
			nargs: 2, destructive: true,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				if err := x.confirm("Delete webhook endpoint " + x.args[1] + " of " + a.Org + " (its pending deliveries fail)"); err != nil {
					return err
				}
				if err := cl.DeleteWebhookEndpoint(x.Context.Context, a.Org, x.args[1]); err != nil {
					return err
				}
				x.printf("Deleted webhook endpoint %s of %s.\n", x.args[1], a.Org)
				return nil
			},
		}.command(),
		spec{
			name: "rotate", usage: "make an endpoint a new signing secret (printed once); the old one signs beside it for 24 h", argsUsage: argsEndpoint,
			description: `Makes the endpoint a new signing secret, printed once. For 24 hours the old
secret keeps signing beside it (two signatures in webhook-signature), so the
receiver can switch to the new one meanwhile without missing a delivery.

Example:
   nebula webhook rotate acme 4f1c2b3a-...`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var ep api.WebhookEndpointSecret
				return x.read(&ep, func(ctx context.Context) (err error) {
					ep, err = cl.RotateWebhookEndpoint(ctx, a.Org, x.args[1])
					return
				}, func() error {
					x.printf("Rotated the signing secret of webhook endpoint %s of %s.\n", ep.ID, a.Org)
					if ep.PreviousSecretUntil != nil {
						x.printf("The old secret keeps signing beside the new one until %s (24 h): switch the receiver to the new one before then.\n", at(*ep.PreviousSecretUntil))
					}
					x.printSecret(ep.Secret)
					return nil
				})
			},
		}.command(),
		spec{
			name: "enable", usage: "enable a disabled outbound webhook endpoint again", argsUsage: argsEndpoint,
			description: `Enables an endpoint that was disabled (its receiver answered 410 Gone, or its
deliveries failed for 5 days). Deliveries that failed meanwhile are not sent
again by themselves: nebula webhook redeliver sends one by hand.

Example:
   nebula webhook enable acme 4f1c2b3a-...`,
			json: true, nargs: 2,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var e api.WebhookEndpoint
				return x.read(&e, func(ctx context.Context) (err error) {
					e, err = cl.EnableWebhookEndpoint(ctx, a.Org, x.args[1])
					return
				}, func() error {
					x.printf("Webhook endpoint %s of %s is %s.\n", e.ID, a.Org, webhookState(e))
					return nil
				})
			},
		}.command(),
		spec{
			name: "deliveries", usage: "list an endpoint's deliveries, or show one with its payload and every attempt", argsUsage: argsEndpoint + " [DELIVERY_ID]",
			description: `Lists an endpoint's deliveries, newest first (kept 30 days): the event type,
pending, succeeded or failed, the attempts, the receiver's last status code
(0: no answer) and when the next attempt is due. With DELIVERY_ID, shows that
delivery: the payload sent and every attempt (its status code, how long it
took, the error or the first 1 KiB of the answer).

Example:
   nebula webhook deliveries acme 4f1c2b3a-...
   nebula webhook deliveries acme 4f1c2b3a-... 9d2e7f10-...`,
			flags: []cli.Flag{&cli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many deliveries"}},
			json:  true, nargs: -1,
			run: func(x *cmdCtx) error {
				if len(x.args) < 2 || len(x.args) > 3 {
					return usagef("want %s [DELIVERY_ID], got %d argument(s) (see --help)", argsEndpoint, len(x.args))
				}
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				if len(x.args) == 3 {
					return x.showDelivery(cl, a.Org, x.args[1], x.args[2])
				}
				var ds []api.WebhookDelivery
				return x.read(&ds, func(ctx context.Context) (err error) {
					ds, err = cl.WebhookDeliveries(ctx, a.Org, x.args[1], x.Int("limit"))
					return
				}, func() error {
					if len(ds) == 0 {
						x.printf("No deliveries to webhook endpoint %s yet (they are kept 30 days).\n", x.args[1])
						return nil
					}
					var rows [][]string
					for _, d := range ds {
						rows = append(rows, []string{d.ID, d.EventType, deliveryStatus(d), strconv.Itoa(d.Attempts), statusCode(d.LastStatusCode),
							whenPtr(d.LastAttemptAt), whenPtr(d.NextAttemptAt), when(d.CreatedAt)})
					}
					x.table("ID\tEVENT\tSTATUS\tATTEMPTS\tLAST STATUS\tLAST ATTEMPT\tNEXT ATTEMPT\tCREATED", rows)
					return nil
				})
			},
		}.command(),
		spec{
			name: "redeliver", usage: "send a delivery again, by hand, with the same webhook-id", argsUsage: argsEndpoint + " DELIVERY_ID",
			description: `Sends a delivery again with the same webhook-id (a receiver that deduplicates
by it sees the same message), from the start of the retry schedule. A
disabled endpoint is refused (exit 5): nebula webhook enable it first.

Example:
   nebula webhook redeliver acme 4f1c2b3a-... 9d2e7f10-...`,
			json: true, nargs: 3,
			run: func(x *cmdCtx) error {
				a, cl, err := x.addressClient(0, shapeOrg)
				if err != nil {
					return err
				}
				var d api.WebhookDelivery
				return x.read(&d, func(ctx context.Context) (err error) {
					d, err = cl.RedeliverWebhook(ctx, a.Org, x.args[1], x.args[2])
					return
				}, func() error {
					x.printf("Redelivering %s (%s) to webhook endpoint %s: it is sent again with the same webhook-id.\n", d.ID, d.EventType, d.EndpointID)
					return nil
				})
			},
		}.command(),
	)
}

// webhookClient is x.client for nebula webhook create, whose --url is the
// endpoint's: the control plane is the context's (or NEBULACTRL_URL's).
func (x *cmdCtx) webhookClient() (*client.Client, error) {
	u, token, _, err := effective("", lineageString(x.Context, "context"))
	if err != nil {
		return nil, err
	}
	x.url = u
	if token == "" {
		return nil, exitError{exitForbidden, fmt.Errorf("not signed in to %s: run nebula login --url %s (or set %s)", u, u, envToken)}
	}
	return client.New(u, token, client.WithVersion(version))
}

func deliveryStatus(d api.WebhookDelivery) string {
	if d.Reason != "" {
		return cell(d.Status + ": " + d.Reason)
	}
	return d.Status
}

func statusCode(c int) string {
	if c == 0 {
		return "-"
	}
	return strconv.Itoa(c)
}

func (x *cmdCtx) printEndpoint(org string, e api.WebhookEndpoint) {
	x.printf("Webhook endpoint %s of %s\n", e.ID, org)
	x.printf("  url          %s\n  description  %s\n  events       %s\n", e.URL, or(e.Description, "-"), strings.Join(e.EventTypes, ", "))
	switch {
	case e.Enabled:
		x.printf("  state        enabled\n")
	case e.DisabledAt != nil:
		x.printf("  state        disabled since %s: %s\n", at(*e.DisabledAt), or(e.DisabledReason, "-"))
	default:
		x.printf("  state        %s\n", webhookState(e))
	}
	x.printf("  created      %s\n", at(e.CreatedAt))
	if e.SecretRotatedAt != nil {
		x.printf("  secret       rotated %s", at(*e.SecretRotatedAt))
		if e.PreviousSecretUntil != nil && e.PreviousSecretUntil.After(timeNow()) {
			x.printf("; the old one signs too until %s", at(*e.PreviousSecretUntil))
		}
		x.printf("\n")
	} else {
		x.printf("  secret       never rotated (shown once, at creation)\n")
	}
}

// showDelivery prints a delivery, its payload and every attempt.
func (x *cmdCtx) showDelivery(cl *client.Client, org, endpoint, id string) error {
	var d api.WebhookDeliveryDetail
	return x.read(&d, func(ctx context.Context) (err error) { d, err = cl.WebhookDelivery(ctx, org, endpoint, id); return }, func() error {
		v := d.Delivery
		x.printf("Delivery %s (webhook-id) of %s to webhook endpoint %s\n", v.ID, v.EventType, v.EndpointID)
		x.printf("  status        %s\n  attempts      %d\n  created       %s\n", deliveryStatus(v), v.Attempts, at(v.CreatedAt))
		if v.NextAttemptAt != nil {
			x.printf("  next attempt  %s\n", at(*v.NextAttemptAt))
		}
		x.printf("\nPayload:\n")
		if err := writeJSON(x.out, d.Payload); err != nil {
			// Not JSON (it always is): print it as it is.
			x.printf("%s\n", d.Payload)
		}
		if len(d.AttemptList) == 0 {
			x.printf("\nNo attempt yet.\n")
			return nil
		}
		for _, a := range d.AttemptList {
			manual := ""
			if a.Manual {
				manual = ", redelivered by hand"
			}
			x.printf("\nAttempt %d at %s (%d ms%s)\n", a.N, at(a.At), a.DurationMs, manual)
			x.printf("  status    %s\n", or(statusCode(a.StatusCode), "-"))
			if a.Error != "" {
				x.printf("  error     %s\n", cell(a.Error))
			}
			if a.Response != "" {
				for _, l := range strings.Split(strings.TrimRight(a.Response, "\n"), "\n") {
					x.printf("  | %s\n", strings.ReplaceAll(l, "\r", ""))
				}
			}
		}
		return nil
	})
}
