// Package webhooks tells an organisation's endpoints what happened, signed
// per the Standard Webhooks specification (docs/webhooks.md).
//
// At least once, from the event stream: a checkpointed subscription (like
// the projections and the reactions, woken through the store's waker by
// the appends' notifications and its watermill subscription to the events
// table) maps domain events to the
// documented webhook event types and writes one delivery per (event,
// endpoint) in its own transaction, with its checkpoint. A delivery's id is
// its webhook-id, derived from the event's position and the endpoint, so a
// batch handled again after a crash writes nothing twice.
//
// A sender on every replica leases due deliveries (FOR UPDATE SKIP LOCKED,
// a lease that expires when its holder dies), POSTs them through the
// dial-time address policy (internal/netguard), records every attempt, and
// retries failures after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h (with
// jitter, at least as long as Retry-After). A 410 Gone disables the
// endpoint, and so do 5 days of failures; both are commands on the
// endpoints' stream, so the organisation's audit log says so.
//
// A leader job watches the agents' leases of each cluster that ever had
// one connect and records when a cluster gains its first live agent or
// loses its last (cluster.link.changed): a dead replica's agents expire by
// lease time, without a disconnect event, and this is what makes
// cluster.disconnected honest. Every timing reads the injected clock.
package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/netguard"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// DueChannel is notified when the subscription wrote deliveries: a waker
// listening on it (eventstore.Store.NewWaker) wakes the senders at once.
const DueChannel = hookstore.DueChannel

// SubscriptionName is the stable name of the webhooks' subscription.
const SubscriptionName = "webhooks"

// Timings of delivery (the product's).
const (
	// Timeout bounds one attempt.
	Timeout = 15 * time.Second
	// DisableAfter: an endpoint whose deliveries failed this long is
	// disabled.
	DisableAfter = 5 * 24 * time.Hour
	// Keep is how long deliveries and their attempts are kept.
	Keep = 30 * 24 * time.Hour
	// lease is how long a sender holds a delivery it sends: longer than
	// an attempt may take.
	lease = Timeout + 15*time.Second
	// maxResponse is how much of an answer is kept.
	maxResponse = 1024
)

// Schedule is the wait before each retry; a delivery whose last retry
// fails has failed.
var Schedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Sealer opens the endpoints' sealed secrets.
type Sealer interface {
	Open(ctx context.Context, v domain.SealedValue) ([]byte, error)
}

// Config configures the webhooks.
type Config struct {
	Store    *eventstore.Store
	Commands *dispatch.Handler
	Secrets  Sealer
	Logger   *slog.Logger
	// Now is the clock of every timing (time.Now when nil).
	Now func() time.Time
	// Replica names this process's leases.
	Replica string
	// AllowedHosts ("host:port") may be reached on addresses the policy
	// refuses otherwise; DenyPrivate refuses private ranges too.
	AllowedHosts []string
	DenyPrivate  bool
	// Poll is how often the sender looks for due deliveries when nothing
	// woke it (default 100 ms).
	Poll time.Duration
	// Jitter spreads a retry's wait (default: ±10 % at random).
	Jitter func(time.Duration) time.Duration
	// Version goes into the User-Agent.
	Version   string
	BatchSize int
	// Park is when the subscription parks an event it keeps failing on.
	Park eventstore.ParkPolicy
}

// Webhooks is the subscription, the sender and the jobs.
type Webhooks struct {
	cfg    Config
	pool   *pgxpool.Pool
	client *http.Client
}

// New returns the webhooks.
func New(cfg Config) (*Webhooks, error) {
	if cfg.Store == nil || cfg.Commands == nil || cfg.Secrets == nil {
		return nil, errors.New("webhooks: needs an event store, a command handler and the sealer")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Jitter == nil {
		cfg.Jitter = jitter
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.Replica == "" {
		cfg.Replica = "webhooks"
	}
	// No proxy from the environment: through a proxy the address checked
	// here is not the one connected to (the proxy resolves the name again),
	// so a receiver could be a name that resolves to the proxy's own
	// loopback or the metadata service there.
	g := netguard.New(netguard.NewHostList(cfg.AllowedHosts), cfg.DenyPrivate, nil)
	tr := &http.Transport{DialContext: g.DialContext, Proxy: g.Proxy, ForceAttemptHTTP2: true, MaxIdleConns: 64,
		IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: Timeout}
	client := &http.Client{Transport: tr, Timeout: Timeout,
		// Redirects are not followed: the receiver is the URL given.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Webhooks{cfg: cfg, pool: cfg.Store.Pool(), client: client}, nil
}

// Settle is how long the webhooks' subscription lets events gather while
// busy (eventstore.Subscription.Settle): a burst's deliveries are written in
// batches of many; a single change waits for nothing.
const Settle = 25 * time.Millisecond

// Subscription returns the webhooks' subscription.
func (w *Webhooks) Subscription(wake <-chan struct{}) eventstore.Subscription {
	return eventstore.Subscription{Name: SubscriptionName, BatchSize: w.cfg.BatchSize, Wake: wake, Handle: w.handle, Park: w.cfg.Park, Settle: Settle}
}

// Run handles the event stream until ctx ends.
func (w *Webhooks) Run(ctx context.Context, wake <-chan struct{}) error {
	return w.cfg.Store.Run(ctx, w.Subscription(wake))
}

// CatchUp handles every event visible now (tests, tools).
func (w *Webhooks) CatchUp(ctx context.Context) (int, error) {
	sub := w.Subscription(nil)
	if err := eventstore.EnsureCheckpoint(ctx, w.pool, sub.Name); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := w.cfg.Store.Step(ctx, sub)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

func (w *Webhooks) handle(ctx context.Context, tx pgx.Tx, events []eventstore.Event) error {
	wrote := false
	// The organisations with an enabled endpoint, read once a batch: the
	// events of the others are only kept (subjects), never looked up.
	hooked, err := hookstore.OrgsWithEndpoints(ctx, tx)
	if err != nil {
		return err
	}
	for _, e := range events {
		d, err := domain.Decode(e.Type, e.SchemaVersion, e.Payload)
		if err != nil {
			// The projections report an event nobody can read; no webhook
			// tells of it.
			w.cfg.Logger.Error("webhooks: skipping an undecodable event", "position", e.Position, "type", e.Type, "err", err)
			continue
		}
		switch d.(type) {
		case domain.OutHookCreated, domain.OutHookEnabled:
			hooked[e.OrgID] = true
		}
		t, data, err := w.translate(ctx, tx, e, d, hooked[e.OrgID])
		if err != nil {
			return err
		}
		if t == "" || e.OrgID == "" || !hooked[e.OrgID] {
			continue
		}
		endpoints, err := hookstore.Subscribers(ctx, tx, e.OrgID, t)
		if err != nil {
			return err
		}
		if len(endpoints) == 0 {
			continue
		}
		if data, err = withNames(ctx, tx, data); err != nil {
			return err
		}
		body, err := encode(t, e.OccurredAt, data)
		if err != nil {
			return err
		}
		for _, ep := range endpoints {
			if err := hookstore.InsertDelivery(ctx, tx, hookstore.NewDelivery{ID: DeliveryID(e.Position, ep), OrgID: e.OrgID, EndpointID: ep,
				Position: e.Position, EventType: t, Payload: body, At: e.OccurredAt}); err != nil {
				return err
			}
			wrote = true
		}
	}
	if wrote {
		return hookstore.NotifyDue(ctx, tx)
	}
	return nil
}
