package domain

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Outbound webhooks: an organisation's endpoints, each told of the events
// it asks for, signed with a secret of its own (Standard Webhooks). The
// name "webhook" is the inbound push webhook's (webhook.go); these are
// "out hooks" in the code and webhook endpoints to people.
//
// One stream per organisation (outhooks-<org>) holds its endpoints: their
// URL, event types, sealed secrets (the one before a rotation signs too for
// OutHookSecretGrace), and whether they are disabled and why. Redeliveries
// by hand are events of the stream too, so the audit log names who asked.

// OutHookStream names an organisation's outbound webhook stream.
func OutHookStream(orgID string) string { return "outhooks-" + orgID }

// OutHookEventTypes are the event types an endpoint can ask for
// (api.WebhookEventTypes is the same list, for callers).
var OutHookEventTypes = []string{
	"deployment.succeeded", "deployment.failed", "deployment.superseded",
	"build.succeeded", "build.failed",
	"changeset.opened", "changeset.approved", "changeset.rejected", "changeset.expired",
	"cluster.connected", "cluster.disconnected",
	"agent.upgraded", "agent.rolled_back",
}

// OutHookAllEvents asks for every event type.
const OutHookAllEvents = "*"

// Limits of an endpoint.
const (
	OutHookMaxURL         = 2048
	OutHookMaxDescription = 500
	// OutHookMaxEndpoints bounds an organisation's endpoints.
	OutHookMaxEndpoints = 50
	// OutHookSecretGrace is how long the secret before a rotation keeps
	// signing beside the new one.
	OutHookSecretGrace = 24 * time.Hour
)

// OutHooks is an organisation's endpoints.
type OutHooks struct {
	OrgID     string                      `json:"orgId"`
	Endpoints map[string]*OutHookEndpoint `json:"endpoints"`
}

// OutHookEndpoint is one endpoint.
type OutHookEndpoint struct {
	ID          string      `json:"id"`
	URL         string      `json:"url"`
	Description string      `json:"description"`
	EventTypes  []string    `json:"eventTypes"`
	Secret      SealedValue `json:"secret"`
	// Previous signs beside Secret until PreviousUntil.
	Previous       *SealedValue `json:"previous,omitempty"`
	PreviousUntil  *time.Time   `json:"previousUntil,omitempty"`
	RotatedAt      *time.Time   `json:"rotatedAt,omitempty"`
	Disabled       bool         `json:"disabled"`
	DisabledReason string       `json:"disabledReason,omitempty"`
	DisabledAt     *time.Time   `json:"disabledAt,omitempty"`
	CreatedAt      time.Time    `json:"createdAt"`
}

// NewOutHooks returns the empty state of an organisation's endpoints.
func NewOutHooks() *OutHooks { return &OutHooks{Endpoints: map[string]*OutHookEndpoint{}} }

// Events of the endpoints.
type (
	// OutHookCreated creates an endpoint with its sealed secret.
	OutHookCreated struct {
		OrgID       string      `json:"orgId"`
		EndpointID  string      `json:"endpointId"`
		URL         string      `json:"url"`
		Description string      `json:"description,omitempty"`
		EventTypes  []string    `json:"eventTypes"`
		Secret      SealedValue `json:"secret"`
		At          time.Time   `json:"at"`
	}
	// OutHookDeleted deletes an endpoint; its pending deliveries fail.
	OutHookDeleted struct {
		OrgID      string `json:"orgId"`
		EndpointID string `json:"endpointId"`
	}
	// OutHookRotated gives an endpoint a new secret; Previous (the one
	// before) signs too until PreviousUntil.
	OutHookRotated struct {
		OrgID         string       `json:"orgId"`
		EndpointID    string       `json:"endpointId"`
		Secret        SealedValue  `json:"secret"`
		Previous      *SealedValue `json:"previous,omitempty"`
		PreviousUntil *time.Time   `json:"previousUntil,omitempty"`
		At            time.Time    `json:"at"`
	}
	// OutHookDisabled disables an endpoint, with the reason (its receiver
	// answered 410 Gone; 5 days of failed deliveries).
	OutHookDisabled struct {
		OrgID      string    `json:"orgId"`
		EndpointID string    `json:"endpointId"`
		Reason     string    `json:"reason"`
		At         time.Time `json:"at"`
	}
	// OutHookEnabled enables a disabled endpoint again.
	OutHookEnabled struct {
		OrgID      string `json:"orgId"`
		EndpointID string `json:"endpointId"`
	}
	// OutHookRedeliveryRequested asks for a delivery to be sent again, by
	// hand, with the same webhook-id.
	OutHookRedeliveryRequested struct {
		OrgID      string    `json:"orgId"`
		EndpointID string    `json:"endpointId"`
		DeliveryID string    `json:"deliveryId"`
		At         time.Time `json:"at"`
	}
)

func (OutHookCreated) EventType() string             { return "webhook.endpoint.created" }
func (OutHookDeleted) EventType() string             { return "webhook.endpoint.deleted" }
func (OutHookRotated) EventType() string             { return "webhook.endpoint.rotated" }
func (OutHookDisabled) EventType() string            { return "webhook.endpoint.disabled" }
func (OutHookEnabled) EventType() string             { return "webhook.endpoint.enabled" }
func (OutHookRedeliveryRequested) EventType() string { return "webhook.endpoint.redelivery_requested" }

// Apply folds an event into the state.
func (h *OutHooks) Apply(e Event) {
	switch e := e.(type) {
	case OutHookCreated:
		h.OrgID = e.OrgID
		h.Endpoints[e.EndpointID] = &OutHookEndpoint{ID: e.EndpointID, URL: e.URL, Description: e.Description,
			EventTypes: slices.Clone(e.EventTypes), Secret: e.Secret, CreatedAt: e.At}
	case OutHookDeleted:
		delete(h.Endpoints, e.EndpointID)
	case OutHookRotated:
		if ep := h.Endpoints[e.EndpointID]; ep != nil {
			at := e.At
			ep.Secret, ep.Previous, ep.PreviousUntil, ep.RotatedAt = e.Secret, e.Previous, e.PreviousUntil, &at
		}
	case OutHookDisabled:
		if ep := h.Endpoints[e.EndpointID]; ep != nil {
			at := e.At
			ep.Disabled, ep.DisabledReason, ep.DisabledAt = true, e.Reason, &at
		}
	case OutHookEnabled:
		if ep := h.Endpoints[e.EndpointID]; ep != nil {
			ep.Disabled, ep.DisabledReason, ep.DisabledAt = false, "", nil
		}
	}
}

// OutHookCommand is a command of an organisation's endpoints.
type OutHookCommand interface{ outHookCommand() }

// CreateOutHook creates an endpoint; the caller made and sealed its secret.
type CreateOutHook struct {
	OrgID, EndpointID string
	URL, Description  string
	EventTypes        []string
	Secret            SealedValue
}

// DeleteOutHook deletes an endpoint.
type DeleteOutHook struct{ EndpointID string }

// RotateOutHookSecret gives an endpoint a new secret (sealed by the caller).
type RotateOutHookSecret struct {
	EndpointID string
	Secret     SealedValue
}

// DisableOutHook disables an endpoint; disabling a disabled one changes
// nothing.
type DisableOutHook struct{ EndpointID, Reason string }

// EnableOutHook enables a disabled endpoint.
type EnableOutHook struct{ EndpointID string }

// RedeliverOutHook asks for a delivery of the endpoint to be sent again.
type RedeliverOutHook struct{ EndpointID, DeliveryID string }

func (CreateOutHook) outHookCommand()       {}
func (DeleteOutHook) outHookCommand()       {}
func (RotateOutHookSecret) outHookCommand() {}
func (DisableOutHook) outHookCommand()      {}
func (EnableOutHook) outHookCommand()       {}
func (RedeliverOutHook) outHookCommand()    {}

// Endpoint returns an endpoint, or ErrNotFound.
func (h *OutHooks) Endpoint(id string) (*OutHookEndpoint, error) {
	if ep := h.Endpoints[id]; ep != nil {
		return ep, nil
	}
	return nil, notFoundf("webhook endpoint %s", id)
}

// Decide decides a command of the organisation's endpoints.
func (h *OutHooks) Decide(orgID string, cmd OutHookCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("organisation", orgID); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case CreateOutHook:
		if err := ValidateID("webhook endpoint", c.EndpointID); err != nil {
			return Decision{}, err
		}
		if ep := h.Endpoints[c.EndpointID]; ep != nil {
			// The same command again (a retried request): nothing more.
			return Decision{}, nil
		}
		if len(h.Endpoints) >= OutHookMaxEndpoints {
			return Decision{}, conflictf("the organisation has %d webhook endpoints, the most it may have", OutHookMaxEndpoints)
		}
		u, err := ValidateOutHookURL(c.URL)
		if err != nil {
			return Decision{}, err
		}
		if err := ValidateText("description", c.Description, OutHookMaxDescription); err != nil {
			return Decision{}, err
		}
		types, err := ValidateOutHookEventTypes(c.EventTypes)
		if err != nil {
			return Decision{}, err
		}
		if err := c.Secret.Validate(); err != nil {
			return Decision{}, err
		}
		return decided(OutHookCreated{OrgID: orgID, EndpointID: c.EndpointID, URL: u, Description: c.Description,
			EventTypes: types, Secret: c.Secret, At: m.Now}), nil
	case DeleteOutHook:
		if _, err := h.Endpoint(c.EndpointID); err != nil {
			return Decision{}, err
		}
		return decided(OutHookDeleted{OrgID: orgID, EndpointID: c.EndpointID}), nil
	case RotateOutHookSecret:
		ep, err := h.Endpoint(c.EndpointID)
		if err != nil {
			return Decision{}, err
		}
		if err := c.Secret.Validate(); err != nil {
			return Decision{}, err
		}
		prev := ep.Secret
		until := m.Now.Add(OutHookSecretGrace)
		return decided(OutHookRotated{OrgID: orgID, EndpointID: ep.ID, Secret: c.Secret, Previous: &prev, PreviousUntil: &until, At: m.Now}), nil
	case DisableOutHook:
		ep, err := h.Endpoint(c.EndpointID)
		if err != nil {
			return Decision{}, err
		}
		if err := ValidateText("reason", c.Reason, 1000); err != nil {
			return Decision{}, err
		}
		if ep.Disabled {
			return Decision{}, nil
		}
		return decided(OutHookDisabled{OrgID: orgID, EndpointID: ep.ID, Reason: c.Reason, At: m.Now}), nil
	case EnableOutHook:
		ep, err := h.Endpoint(c.EndpointID)
		if err != nil {
			return Decision{}, err
		}
		if !ep.Disabled {
			return Decision{}, nil
		}
		return decided(OutHookEnabled{OrgID: orgID, EndpointID: ep.ID}), nil
	case RedeliverOutHook:
		if _, err := h.Endpoint(c.EndpointID); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("delivery", c.DeliveryID); err != nil {
			return Decision{}, err
		}
		return decided(OutHookRedeliveryRequested{OrgID: orgID, EndpointID: c.EndpointID, DeliveryID: c.DeliveryID, At: m.Now}), nil
	}
	return Decision{}, invalidf("command %T is not a webhook endpoint command", cmd)
}

// ValidateOutHookURL checks an endpoint's URL and returns it as it will be
// called: http or https, a host, no user name or password, no fragment, at
// most OutHookMaxURL bytes, no control characters or spaces.
func ValidateOutHookURL(raw string) (string, error) {
	if raw == "" {
		return "", invalidf("a webhook endpoint has a url")
	}
	if err := ValidateText("url", raw, OutHookMaxURL); err != nil {
		return "", err
	}
	if strings.ContainsAny(raw, " \t\n\\") {
		return "", invalidf("url %q contains a space or a backslash", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", invalidf("url %q does not parse: %v", raw, err)
	}
	switch u.Scheme {
	case "https", "http":
	default:
		return "", invalidf("url %q: the scheme must be https or http", raw)
	}
	if u.User != nil {
		return "", invalidf("url %q: a user name or password in the URL is not accepted (the signature authenticates the control plane)", raw)
	}
	if u.Hostname() == "" {
		return "", invalidf("url %q has no host", raw)
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "", invalidf("url %q has a fragment, which is never sent", raw)
	}
	if p := u.Port(); p != "" {
		n := 0
		for _, r := range p {
			n = n*10 + int(r-'0')
			if n > 65535 {
				break
			}
		}
		if n < 1 || n > 65535 {
			return "", invalidf("url %q: port %s is out of range", raw, p)
		}
	}
	if u.Opaque != "" {
		return "", invalidf("url %q is not a hierarchical URL", raw)
	}
	return raw, nil
}

// ValidateOutHookEventTypes checks an endpoint's event types (each from
// OutHookEventTypes, or "*" alone) and returns them sorted.
func ValidateOutHookEventTypes(types []string) ([]string, error) {
	if len(types) == 0 {
		return nil, invalidf(`a webhook endpoint names its event types (or "*" for all): %s`, strings.Join(OutHookEventTypes, ", "))
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		if t != OutHookAllEvents && !slices.Contains(OutHookEventTypes, t) {
			if err := ValidateText("event type", t, 100); err != nil {
				return nil, err
			}
			return nil, invalidf(`event type %q is unknown (%s, or "*")`, t, strings.Join(OutHookEventTypes, ", "))
		}
		if slices.Contains(out, t) {
			return nil, invalidf("event type %q is named twice", t)
		}
		out = append(out, t)
	}
	if slices.Contains(out, OutHookAllEvents) && len(out) > 1 {
		return nil, invalidf(`"*" names every event type: name it alone`)
	}
	slices.Sort(out)
	return out, nil
}

// OutHookWants reports whether an endpoint with these event types receives
// an event of type t.
func OutHookWants(types []string, t string) bool {
	return slices.Contains(types, OutHookAllEvents) || slices.Contains(types, t)
}

// Cluster links: whether a cluster has a live agent, as a leader job reads
// the agents' leases (liveness.go). An agent's lease expires without any
// event when its control-plane replica dies, so no event says a cluster
// lost its last agent; the job records the transition here, on the
// cluster's link stream (clusterlink-<cluster>), and the webhooks tell it
// as cluster.connected and cluster.disconnected.

// ClusterLinkStream names a cluster's link stream.
func ClusterLinkStream(clusterID string) string { return "clusterlink-" + clusterID }

// ClusterLink is whether a cluster was last seen with a live agent.
type ClusterLink struct {
	Known     bool `json:"known"`
	Connected bool `json:"connected"`
}

// NewClusterLink returns the state of a cluster never seen connected.
func NewClusterLink() *ClusterLink { return &ClusterLink{} }

// ClusterLinkChanged records that a cluster gained its first live agent
// (Connected) or lost its last one.
type ClusterLinkChanged struct {
	ClusterID string `json:"clusterId"`
	OrgID     string `json:"orgId"`
	Connected bool   `json:"connected"`
	// Agents is how many of its agents were live.
	Agents int       `json:"agents"`
	At     time.Time `json:"at"`
}

func (ClusterLinkChanged) EventType() string { return "cluster.link.changed" }

// Apply folds an event into the state.
func (l *ClusterLink) Apply(e Event) {
	if e, ok := e.(ClusterLinkChanged); ok {
		l.Known, l.Connected = true, e.Connected
	}
}

// ObserveClusterLink is what the job saw of a cluster's agents' leases.
type ObserveClusterLink struct {
	ClusterID, OrgID string
	LiveAgents       int
}

// Decide records a transition; the same state again changes nothing, and a
// cluster never connected that has no live agent is not "disconnected".
func (l *ClusterLink) Decide(c ObserveClusterLink, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("cluster", c.ClusterID); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("organisation", c.OrgID); err != nil {
		return Decision{}, err
	}
	if c.LiveAgents < 0 {
		return Decision{}, invalidf("live agents cannot be negative")
	}
	connected := c.LiveAgents > 0
	if connected == l.Connected && (l.Known || !connected) {
		return Decision{}, nil
	}
	return decided(ClusterLinkChanged{ClusterID: c.ClusterID, OrgID: c.OrgID, Connected: connected, Agents: c.LiveAgents, At: m.Now}), nil
}

// auditOutHook describes the events of outbound webhooks and cluster links.
func auditOutHook(e Event) (AuditEntry, bool) {
	switch e := e.(type) {
	case OutHookCreated:
		return AuditEntry{"webhook.endpoint.create", "organisation", e.OrgID,
			fmt.Sprintf("endpoint %s to %s (%s)", e.EndpointID, redactURL(e.URL), strings.Join(e.EventTypes, ", "))}, true
	case OutHookDeleted:
		return AuditEntry{"webhook.endpoint.delete", "organisation", e.OrgID, "endpoint " + e.EndpointID}, true
	case OutHookRotated:
		return AuditEntry{"webhook.endpoint.rotate", "organisation", e.OrgID, "endpoint " + e.EndpointID + ": new secret; the previous one signs too for 24 hours"}, true
	case OutHookDisabled:
		return AuditEntry{"webhook.endpoint.disable", "organisation", e.OrgID, fmt.Sprintf("endpoint %s: %s", e.EndpointID, e.Reason)}, true
	case OutHookEnabled:
		return AuditEntry{"webhook.endpoint.enable", "organisation", e.OrgID, "endpoint " + e.EndpointID}, true
	case OutHookRedeliveryRequested:
		return AuditEntry{"webhook.endpoint.redeliver", "organisation", e.OrgID, fmt.Sprintf("endpoint %s: delivery %s", e.EndpointID, e.DeliveryID)}, true
	case ClusterLinkChanged:
		if e.Connected {
			return AuditEntry{"cluster.connect", "cluster", e.ClusterID, fmt.Sprintf("%d live agents", e.Agents)}, true
		}
		return AuditEntry{"cluster.disconnect", "cluster", e.ClusterID, "no live agent"}, true
	}
	return AuditEntry{}, false
}

// redactURL is a URL without its query (which may hold a receiver's token).
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	return u.String()
}
