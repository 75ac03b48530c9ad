// Package server wires the control plane together for `nebula serve`: the
// database (given, or the managed local PostgreSQL), migrations, the master
// key, the event store, projections, background jobs and the HTTP server,
// with a graceful shutdown that lets in-flight requests finish.
package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/console"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/image"
	"github.com/nebulactrl/nebulactrl/internal/jobs"
	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/internal/webhooks"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/transport"
)

// Options are what the command line adds to the configuration.
type Options struct {
	Version string
	Logger  *slog.Logger
	// Ready, when set, receives the address the server listens on.
	Ready func(addr string)
	// Started, when set, learns what `nebula serve` prints at start.
	Started func(Started)
	// ShutdownTimeout bounds how long in-flight requests may take to finish.
	ShutdownTimeout time.Duration
	// JobInterval overrides the interval of the periodic jobs (tests).
	JobInterval time.Duration
	// Now is the clock of the API and the agent link (tests inject one).
	Now func() time.Time
	// Park is when the projections park an event they cannot handle
	// (default: after 5 attempts over a minute; tests shorten it).
	Park eventstore.ParkPolicy
	// ManagedRestart bounds the restarts of the managed PostgreSQL (tests;
	// default 5 within 10 minutes, the first after 1 s).
	ManagedRestart pgcluster.Restart
	// AgentBinaries are the agent binaries served at /agent/v1/download/
	// (default: those embedded at build time, agentbin.Embedded()).
	AgentBinaries agentbin.Source
	// OnLink, when set, is given the agent link (tests send agent_upgrade
	// through it).
	OnLink func(*agentlink.Link)
}

// Started is what the server tells at start.
type Started struct {
	// Addr is the address of the public listener, MetricsAddr the metrics
	// listener's ("" without one).
	Addr, MetricsAddr string
	// NeedsSetup is true while no user exists: the first one is still to be
	// created (nebula setup).
	NeedsSetup bool
}

// Run serves until ctx ends, then shuts down gracefully. Its steps: listen,
// start the database (given or managed; back up, migrate, the master key),
// build the components (each given what it needs through its constructor),
// run the background work, serve HTTP.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	ls, err := listen(cfg)
	if err != nil {
		return err
	}
	defer ls.close()
	db, err := startDatabase(ctx, cfg, opts, log)
	if err != nil {
		return err
	}
	defer db.close()
	replica := replicaName(ls.public.Addr().String())
	c, err := buildComponents(ctx, cfg, opts, log, db, replica)
	if err != nil {
		return err
	}
	defer c.link.Close()
	stopBackground := c.runBackground(ctx, log)
	defer stopBackground()
	return serve(ctx, cfg, opts, log, ls, db, c, replica)
}

// listeners are the public listener and, when configured, the metrics one.
// Listening comes first: a taken port is the most common start-up problem
// and should be reported before anything else is started.
type listeners struct{ public, metrics net.Listener }

func listen(cfg config.Config) (*listeners, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	ls := &listeners{public: ln}
	if cfg.MetricsListen != "" {
		if ls.metrics, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listening on %s (%s): %w", cfg.MetricsListen, config.EnvMetricsListen, err)
		}
	}
	return ls, nil
}

func (ls *listeners) close() {
	if ls.metrics != nil {
		ls.metrics.Close()
	}
	ls.public.Close()
}

// db is the database the control plane runs on, migrated, with its master key.
type db struct {
	pool      *pgxpool.Pool
	managed   *pgcluster.Cluster
	backupCfg backup.Config
	key       seal.MasterKey
	previous  seal.MasterKey // during a rotation: the key being rotated away
	// failed says that the managed PostgreSQL died and could not be
	// restarted: the server then stops with an error (exit status 1).
	failed chan error
	stop   []func()
}

func (d *db) close() {
	for i := len(d.stop) - 1; i >= 0; i-- {
		d.stop[i]()
	}
}

func startDatabase(ctx context.Context, cfg config.Config, opts Options, log *slog.Logger) (d *db, err error) {
	d = &db{}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	url := cfg.DatabaseURL
	if url == "" {
		log.Info("no NEBULACTRL_DATABASE_URL: running the managed PostgreSQL", "data_dir", cfg.DataDir)
		url, d.managed, err = database.ManagedWith(ctx, database.ManagedConfig{DataDir: cfg.DataDir, Logger: log, Restart: opts.ManagedRestart})
		if err != nil {
			return d, fmt.Errorf("starting the managed PostgreSQL: %w", err)
		}
		d.failed = make(chan error, 1)
		go func() {
			if err := d.managed.Supervise(context.WithoutCancel(ctx)); err != nil {
				d.failed <- err
			}
		}()
		d.stop = append(d.stop, func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := d.managed.Stop(stopCtx); err != nil {
				log.Error("stopping the managed PostgreSQL", "err", err)
			}
		})
	}
	if d.pool, err = database.Open(ctx, url); err != nil {
		return d, err
	}
	d.stop = append(d.stop, d.pool.Close)
	// Before a new version migrates the schema, back the database up (or
	// reuse the installer's backup); a failed backup stops the start.
	backupDir, err := backup.Destination(cfg)
	if err != nil {
		return d, err
	}
	d.backupCfg = backup.Config{DatabaseURL: url, Dir: backupDir, Version: opts.Version, Now: opts.Now, Logger: log}
	if _, err := backup.BeforeMigrate(ctx, d.pool, d.backupCfg, 0); err != nil {
		return d, err
	}
	if err := database.Migrate(ctx, d.pool, log); err != nil {
		return d, err
	}
	d.key, d.previous, err = masterKey(ctx, cfg, d.pool, log)
	return d, err
}

// components are the control plane's parts, built once the database is up.
// Each gets what it needs through its constructor: the agent link gets the
// reactions' deliveries (for a stage report that came first), the reactions
// get the link (to send agent upgrades), the jobs get the reactions' timers.
type components struct {
	store    *eventstore.Store
	cmd      *dispatch.Handler
	react    *reactions.Reactions
	proj     *projections.Projections
	tel      *telemetry.Store
	waker    *eventstore.Waker
	registry *prometheus.Registry
	api      *httpapi.API
	link     *agentlink.Link
	sched    *jobs.Scheduler
	hooks    *webhooks.Webhooks
}

func buildComponents(ctx context.Context, cfg config.Config, opts Options, log *slog.Logger, d *db, replica string) (*components, error) {
	c := &components{store: eventstore.New(d.pool, log)}
	sealer := seal.New(d.pool, d.key, log, d.previous)
	commands := newCommandsCounter()
	var err error
	if c.cmd, err = dispatch.New(dispatch.Config{Store: c.store, Logger: log, Now: opts.Now,
		Observe: func(command, outcome string) { commands.WithLabelValues(command, outcome).Inc() }}); err != nil {
		return nil, err
	}
	if c.proj, err = projections.New(projections.Config{Store: c.store, Keys: sealer, Logger: log, Park: opts.Park}); err != nil {
		return nil, err
	}
	c.tel = telemetry.New(d.pool, opts.Now)
	if err := c.tel.EnsurePartitions(ctx); err != nil {
		return nil, err
	}
	// The waker also wakes on the webhooks' written deliveries, for their senders.
	c.waker = c.store.NewWaker(replica, projections.ProjectedChannel, webhooks.DueChannel)
	if err := c.connectAgents(cfg, opts, log, d, sealer, replica); err != nil {
		return nil, err
	}
	if c.hooks, err = webhooks.New(webhooks.Config{Store: c.store, Commands: c.cmd, Secrets: sealer, Logger: log, Now: opts.Now,
		Replica: replica, AllowedHosts: cfg.WebhookAllowedHosts, DenyPrivate: cfg.WebhookDenyPrivate, Version: opts.Version, Park: opts.Park}); err != nil {
		c.link.Close()
		return nil, err
	}
	c.registry = prometheus.NewRegistry()
	c.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c.registry.MustRegister(parkedCollector{pool: d.pool})
	c.registry.MustRegister(lagCollector{pool: d.pool}, poolCollector{pool: d.pool}, deploymentsCollector{pool: d.pool}, meshCollector{pool: d.pool},
		buildInfo(opts.Version), commands, agentsConnected(func() int { return len(c.link.Connected()) }))
	registryAuth, err := image.ParseAuth(cfg.RegistryAuth)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", config.EnvRegistryAuth, err)
	}
	c.api, err = httpapi.New(httpapi.Config{
		Pool: d.pool, Commands: c.cmd, Sealer: sealer, Changed: c.waker.Changed, Logger: log, Version: opts.Version, AgentBinaries: opts.AgentBinaries,
		Images: image.NewResolver(image.Config{Insecure: cfg.InsecureRegistries, Allowed: cfg.AllowedRegistries,
			DenyPrivate: cfg.RegistryDenyPrivate, AuthFile: cfg.RegistryAuthFile, Auth: registryAuth}),
		Registry:    c.registry,
		Now:         opts.Now,
		Telemetry:   c.tel,
		RetryParked: retryParked(c.store, c.proj.Subscription(nil), c.react.Subscription(nil), c.hooks.Subscription(nil)),
		Backup:      d.backupCfg,
		PublicURL:   cfg.PublicURL,
	})
	if err != nil {
		c.link.Close()
		return nil, err
	}
	react := c.react
	c.sched, err = jobs.New(jobs.Config{Pool: d.pool, Replica: replica, Logger: log,
		Jobs: append(append(backgroundJobs(d.pool, c.tel, opts.JobInterval), jobs.Job{Name: "fire-timers", Interval: time.Second,
			Run: func(ctx context.Context) error { _, err := react.FireDue(ctx); return err }}), c.hooks.Jobs(opts.JobInterval)...)})
	if err != nil {
		c.link.Close()
	}
	return c, err
}

// connectAgents makes the agent link (which owns the agents' hub) and the
// reactions, in that order: the link asks the reactions' deliveries to open
// a deployment's stream for a report that came first, and the reactions
// send agent upgrades over the link.
func (c *components) connectAgents(cfg config.Config, opts Options, log *slog.Logger, d *db, sealer *seal.Sealer, replica string) error {
	reads := projections.ReadModels{}
	deliveries, err := reactions.NewDeliveries(d.pool, c.cmd, reads)
	if err != nil {
		return err
	}
	c.link, err = agentlink.New(agentlink.Config{Pool: d.pool, Commands: c.cmd, Secrets: sealer, Logger: log, Replica: replica, Now: opts.Now,
		Changed: c.waker.Changed, Telemetry: c.tel, Binaries: opts.AgentBinaries, Deliveries: deliveries,
		// The access log names the server an agent's connection belongs to.
		Authenticated: func(r *http.Request, serverID string) { httpapi.NotePrincipal(r.Context(), serverID) }})
	if err != nil {
		return err
	}
	if opts.OnLink != nil {
		opts.OnLink(c.link)
	}
	c.react, err = reactions.New(reactions.Config{Store: c.store, Commands: c.cmd, Logger: log, Now: opts.Now, Documents: projections.CompiledDocument,
		Reads: reads, ApprovalTTL: cfg.ApprovalTTL, StallTimeout: cfg.StallTimeout,
		Upgrades: reactions.Upgrades{Version: opts.Version, Timeout: cfg.AgentUpgradeTimeout,
			Sender: upgradeSender{c.link}, Offline: agentlink.ErrServerOffline, Binaries: c.link, Leases: query.ServerLease}})
	if err != nil {
		c.link.Close()
	}
	return err
}

// runBackground starts the background work; the function it returns stops
// it and waits for it.
func (c *components) runBackground(ctx context.Context, log *slog.Logger) func() {
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{
		"notifier":    c.store.RunNotifier,
		"waker":       c.waker.Run,
		"projections": func(ctx context.Context) error { return c.proj.Run(ctx, c.waker.Subscribe()) },
		"reactions":   func(ctx context.Context) error { return c.react.Run(ctx, c.waker.Subscribe()) },
		"jobs":        c.sched.Run,
		"agent-hub":   func(ctx context.Context) error { return c.link.PushRevisions(ctx, c.waker) },
		// An agent upgrade whose agent is connected to this replica goes
		// out from here, whichever replica reacted to the request.
		"agent-upgrades": func(ctx context.Context) error {
			return c.react.DeliverUpgrades(ctx, c.link.Connected, c.waker.Subscribe())
		},
		// Each cluster's builds go to its servers connected here.
		"agent-builds": func(ctx context.Context) error { return c.link.DeliverBuilds(ctx, c.waker.Subscribe()) },
		// Outbound webhooks: the subscription writes deliveries, the sender
		// (on every replica, leasing rows) sends them.
		"webhooks":       func(ctx context.Context) error { return c.hooks.Run(ctx, c.waker.Subscribe()) },
		"webhook-sender": func(ctx context.Context) error { return c.hooks.Send(ctx, c.waker.Subscribe()) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(bg); err != nil && bg.Err() == nil {
				log.Error("background task stopped", "task", name, "err", err)
			}
		}()
	}
	return func() {
		stop()
		wg.Wait()
	}
}

// handler is the public listener's routes: health, metrics (unless on their
// own listener), the API, the agents' endpoints and the console.
func (c *components) handler(cfg config.Config, opts Options, log *slog.Logger, d *db, metricsOwn bool) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", readyz(d.pool))
	// /metrics: on its own listener without authentication when there is
	// one (and then not here), else here for instance administrators.
	if !metricsOwn {
		mux.Handle("GET /metrics", c.api.MetricsHandler())
	}
	mux.Handle("/api/", c.api.Handler())
	// The MCP server: each tool a call of the API's handler, in process
	// (package mcpserver), with the same tokens.
	mcpSrv, err := mcpserver.New(mcpserver.Config{API: c.api, PublicURL: cfg.PublicURL, Version: opts.Version, Logger: log, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	mux.Handle(mcpserver.Path, mcpSrv.Handler())
	mux.Handle(mcpserver.MetadataPath, mcpSrv.Handler())
	mux.HandleFunc("GET "+transport.ConnectPath, c.link.Connect)
	mux.HandleFunc("POST "+transport.RegisterPath, c.link.Register)
	mux.HandleFunc("GET "+transport.DownloadPath+"{file}", c.link.Download)
	// The web console: every other path. It reaches the control plane only
	// through the API's handler, in process (package console).
	con, err := console.New(console.Config{API: c.api.Handler(), Secure: cfg.TLSCert != "" || strings.HasPrefix(cfg.PublicURL, "https://"),
		PublicURL: cfg.PublicURL, Version: opts.Version, ApprovalTTL: cfg.ApprovalTTL, Logger: log, Now: opts.Now})
	if err != nil {
		return nil, err
	}
	mux.Handle("/", con.Handler())
	return strictTransport(httpapi.AccessLog(log, mux)), nil
}

// serve serves HTTP until ctx ends (or the managed PostgreSQL fails), then
// lets the requests in flight finish.
func serve(ctx context.Context, cfg config.Config, opts Options, log *slog.Logger, ls *listeners, d *db, c *components, replica string) error {
	h, err := c.handler(cfg, opts, log, d, ls.metrics != nil)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	// Event streams never end on their own: shutting down ends them, and
	// their clients resume on another replica with Last-Event-ID.
	srv.RegisterOnShutdown(c.api.CloseStreams)
	errc := make(chan error, 2)
	go func() {
		if cfg.TLSCert != "" {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			errc <- srv.ServeTLS(ls.public, cfg.TLSCert, cfg.TLSKey)
			return
		}
		errc <- srv.Serve(ls.public)
	}()
	started := Started{Addr: ls.public.Addr().String()}
	if ls.metrics != nil {
		mm := http.NewServeMux()
		mm.Handle("GET /metrics", c.api.OpenMetricsHandler())
		metricsSrv := &http.Server{Handler: httpapi.AccessLog(log, mm), ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
		started.MetricsAddr = ls.metrics.Addr().String()
		go func() {
			if err := metricsSrv.Serve(ls.metrics); err != nil && err != http.ErrServerClosed {
				errc <- fmt.Errorf("metrics listener: %w", err)
			}
		}()
		defer metricsSrv.Close()
	}
	log.Info("control plane ready", "listen", started.Addr, "metrics_listen", started.MetricsAddr, "public_url", cfg.PublicURL, "version", opts.Version, "replica", replica)
	if opts.Started != nil {
		users, err := query.CountUsers(ctx, d.pool)
		if err != nil {
			log.Warn("counting users", "err", err)
		}
		started.NeedsSetup = err == nil && users == 0
		opts.Started(started)
	}
	if opts.Ready != nil {
		opts.Ready(ls.public.Addr().String())
	}
	var runErr error
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case err := <-d.failed:
		log.Error("the managed PostgreSQL stopped and could not be restarted: shutting down", "err", err)
		runErr = fmt.Errorf("the managed PostgreSQL stopped and could not be restarted: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: letting requests in flight finish", "timeout", opts.ShutdownTimeout)
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	// Agents' connections are hijacked, so Shutdown does not wait for them:
	// close them with a reason; the agents reconnect to another replica.
	c.link.Close()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	c.link.Wait()
	return runErr
}
