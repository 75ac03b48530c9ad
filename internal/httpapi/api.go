// Package httpapi is the control plane's REST API under /api/v1: JSON in and out,
// bearer tokens, one route table that drives routing, access control and the
// OpenAPI document alike. Handlers turn requests into commands for the domain
// and answer from the projections; they write no SQL of their own.
package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/image"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/projections"
)

// Sealer seals secret values before they become part of a command, and
// seals and opens the responses kept for idempotent replays.
type Sealer interface {
	Seal(ctx context.Context, orgID string, plaintext []byte) (domain.SealedValue, error)
	Open(ctx context.Context, v domain.SealedValue) ([]byte, error)
}

// Config is what the API needs.
type Config struct {
	Pool     *pgxpool.Pool
	Commands *dispatch.Handler
	Sealer   Sealer
	Images   *image.Resolver
	// Changed wakes requests waiting for the projections to catch up.
	Changed func() <-chan struct{}
	Logger  *slog.Logger
	Now     func() time.Time
	Version string
	// Registry receives the API's metrics; nil makes a private one.
	Registry *prometheus.Registry
	// LoginLimit and LoginWindow bound failed password attempts per e-mail
	// address and client address (ten times as many per client address),
	// shared by all replicas.
	LoginLimit  int
	LoginWindow time.Duration
	// LoginConcurrency bounds the passwords hashed at once (default: half
	// the processors, at least one); LoginQueue bounds the sign-ins waiting
	// for their turn (default 16): more get 429 at once.
	LoginConcurrency, LoginQueue int
	// SessionTTL is how long a console session lasts.
	SessionTTL time.Duration
	// ConsistencyTimeout bounds how long a write waits for its projection.
	ConsistencyTimeout time.Duration
	// Telemetry reads the agents' reports and logs.
	Telemetry *telemetry.Store
	// AgentBinaries are the agent binaries the control plane serves, whose
	// SHA-256 an upgrade carries (default agentbin.Embedded()).
	AgentBinaries agentbin.Source
	// RetryParked retries the events the subscriptions parked (nebula audit
	// retry); without it that route answers 503.
	RetryParked RetryParkedFunc
	// PublicURL is where forges deliver push webhooks (the project's
	// webhook URL starts with it).
	PublicURL string
	// BuildTimeout bounds a build a deploy asks for (default 30 min).
	BuildTimeout time.Duration
	// Backup is where control-plane backups go (nebula backup list|create);
	// without a destination those routes answer 503.
	Backup backup.Config
}

// Validate joins every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Pool == nil {
		errs = append(errs, errors.New("api: no database"))
	}
	if c.Commands == nil {
		errs = append(errs, errors.New("api: no command handler"))
	}
	if c.Sealer == nil {
		errs = append(errs, errors.New("api: no sealer"))
	}
	if c.Images == nil {
		errs = append(errs, errors.New("api: no image resolver"))
	}
	return errors.Join(errs...)
}

// API serves the REST API.
type API struct {
	cfg     Config
	pool    *pgxpool.Pool
	cmd     *dispatch.Handler
	logger  *slog.Logger
	routes  []route
	mux     *http.ServeMux
	metrics *metrics
	doc     openapiDoc
	gate    *hashGate
	// closing is closed by CloseStreams.
	closing   chan struct{}
	closeOnce sync.Once
}

// New returns the API.
func New(cfg Config) (*API, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Changed == nil {
		never := make(chan struct{})
		cfg.Changed = func() <-chan struct{} { return never }
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.LoginLimit == 0 {
		cfg.LoginLimit = 10
	}
	if cfg.LoginWindow == 0 {
		cfg.LoginWindow = 15 * time.Minute
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.ConsistencyTimeout == 0 {
		cfg.ConsistencyTimeout = 10 * time.Second
	}
	a := &API{cfg: cfg, pool: cfg.Pool, cmd: cfg.Commands, logger: cfg.Logger, mux: http.NewServeMux(), closing: make(chan struct{})}
	a.metrics = newMetrics(cfg.Registry)
	a.gate = newHashGate(cfg.LoginConcurrency, cfg.LoginQueue)
	a.gate.hashed, a.gate.queued = a.metrics.hashes.Inc, a.metrics.hashQueue.Add
	a.routes = a.routeTable()
	for _, rt := range a.routes {
		a.mux.Handle(rt.method+" "+rt.path, a.wrap(rt))
	}
	a.mux.HandleFunc("GET /api/v1/openapi.json", a.serveOpenAPI)
	a.mux.HandleFunc("/api/", a.noRoute)
	return a, nil
}

// noRoute answers what no route matches: 405 with Allow when the path is a
// route's with another method, 404 otherwise.
func (a *API) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "" && pattern != "/api/" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		a.writeError(w, r, errorf(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	a.writeError(w, r, errorf(http.StatusNotFound, "not_found", "no route %s %s", r.Method, r.URL.Path))
}

// Handler serves the API, with request ids and the headers every API
// response carries: answers are not to be sniffed as another type, nor
// cached (they hold secrets and per-user data).
func (a *API) Handler() http.Handler {
	next := withRequestID(a.mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// RouteInfo describes a route: for tests of access control, of the
// document and of bad input.
type RouteInfo struct {
	Method, Path string
	Scope        domain.Scope
	Public       bool
	// Request is a zero value of the body's type; nil for no body.
	Request any
	// Query names the query parameters, with their types (integer, string).
	Query map[string]string
	// Creating routes honour Idempotency-Key.
	Creating bool
	// IfMatch routes honour If-Match (412 when it is stale).
	IfMatch bool
	// List routes answer a page ({"items", "next"}) and take limit and cursor.
	List bool
}

// Routes lists every route.
func (a *API) Routes() []RouteInfo {
	out := make([]RouteInfo, 0, len(a.routes))
	for _, r := range a.routes {
		info := RouteInfo{Method: r.method, Path: r.path, Scope: r.scope, Public: r.public, Request: r.request, Creating: r.creating && !r.public,
			IfMatch: honoursIfMatch(r), List: isList(r)}
		if qs := queryParams(r); len(qs) > 0 || r.events != nil {
			info.Query = map[string]string{}
			for _, q := range qs {
				info.Query[q.name] = q.typ
			}
		}
		if r.events != nil {
			info.Query["lastEventId"] = "integer"
		}
		out = append(out, info)
	}
	return out
}

// settle waits until the projections have handled a command's events, so
// that the response, and any request after it on any replica, sees them.
//
// When the projections do not move (one is stuck at an event it cannot
// handle) or do not get there in time, the answer is 503 projections_behind
// at once: the change is recorded, but reads would not show it.
func (a *API) settle(ctx context.Context, res dispatch.Result) error {
	deadline := time.Now().Add(a.cfg.ConsistencyTimeout)
	for {
		_, before, err := eventstore.Checkpoint(ctx, a.pool, projections.SubscriptionName)
		if err != nil {
			return err
		}
		step, cancel := context.WithTimeout(ctx, min(2*time.Second, time.Until(deadline)))
		err = projections.WaitFor(step, a.pool, res.Last, a.cfg.Changed)
		cancel()
		var parked *projections.ParkedError
		if errors.As(err, &parked) {
			return errorf(http.StatusServiceUnavailable, "projections_parked", "%s (nebula audit parked)", parked)
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		_, after, cerr := eventstore.Checkpoint(ctx, a.pool, projections.SubscriptionName)
		if cerr != nil {
			return cerr
		}
		if after == before || !time.Now().Before(deadline) {
			lag, lerr := projections.SubscriptionLag(ctx, a.pool, projections.SubscriptionName)
			if lerr != nil {
				return lerr
			}
			return errorf(http.StatusServiceUnavailable, "projections_behind",
				"the change was recorded, but the projections are behind (%s); reads do not show it yet", lag)
		}
	}
}

// commandContext is who issues a command in this request.
func commandContext(r *http.Request, c *call) dispatch.Context {
	return dispatch.Context{Actor: c.actor, Person: c.principal.UserID, RequestID: requestID(r.Context()), Via: via(r.Context()), IfVersion: c.ifVersion}
}

var _ eventstore.Querier = (*pgxpool.Pool)(nil)
