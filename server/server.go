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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nebulactrl/nebulactrl/agentbin"
	"github.com/nebulactrl/nebulactrl/agentlink"
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/backup"
	"github.com/nebulactrl/nebulactrl/command"
	"github.com/nebulactrl/nebulactrl/config"
	"github.com/nebulactrl/nebulactrl/console"
	"github.com/nebulactrl/nebulactrl/database"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/image"
	"github.com/nebulactrl/nebulactrl/jobs"
	"github.com/nebulactrl/nebulactrl/pgcluster"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/query"
	"github.com/nebulactrl/nebulactrl/reactions"
	"github.com/nebulactrl/nebulactrl/seal"
	"github.com/nebulactrl/nebulactrl/telemetry"
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

// Run serves until ctx ends, then shuts down gracefully.
func Run(ctx context.Context, cfg config.Config, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	// Listen first: a taken port is the most common start-up problem and
	// should be reported before anything else is started.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	var metricsLn net.Listener
	if cfg.MetricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			return fmt.Errorf("listening on %s (%s): %w", cfg.MetricsListen, config.EnvMetricsListen, err)
		}
		defer metricsLn.Close()
	}

	url := cfg.DatabaseURL
	var managed *pgcluster.Cluster
	// pgFailed says that the managed PostgreSQL died and could not be
	// restarted: the server then stops with an error (exit status 1).
	var pgFailed chan error
	if url == "" {
		log.Info("no NEBULACTRL_DATABASE_URL: running the managed PostgreSQL", "data_dir", cfg.DataDir)
		url, managed, err = database.ManagedWith(ctx, database.ManagedConfig{DataDir: cfg.DataDir, Logger: log, Restart: opts.ManagedRestart})
		if err != nil {
			return fmt.Errorf("starting the managed PostgreSQL: %w", err)
		}
		pgFailed = make(chan error, 1)
		go func() {
			if err := managed.Supervise(context.WithoutCancel(ctx)); err != nil {
				pgFailed <- err
			}
		}()
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if err := managed.Stop(stopCtx); err != nil {
				log.Error("stopping the managed PostgreSQL", "err", err)
			}
		}()
	}
	pool, err := database.Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Before a new version migrates the schema, back the database up (or
	// reuse the installer's backup); a failed backup stops the start.
	backupDir, err := backup.Destination(cfg)
	if err != nil {
		return err
	}
	backupCfg := backup.Config{DatabaseURL: url, Dir: backupDir, Version: opts.Version, Now: opts.Now, Logger: log}
	if _, err := backup.BeforeMigrate(ctx, pool, backupCfg, 0); err != nil {
		return err
	}
	if err := database.Migrate(ctx, pool, log); err != nil {
		return err
	}
	key, err := masterKey(ctx, cfg, pool, log)
	if err != nil {
		return err
	}

	store := eventstore.New(pool, log)
	sealer := seal.New(pool, key, log)
	commands := newCommandsCounter()
	cmd, err := command.New(command.Config{Store: store, Logger: log, Now: opts.Now,
		Observe: func(command, outcome string) { commands.WithLabelValues(command, outcome).Inc() }})
	if err != nil {
		return err
	}
	react, err := reactions.New(reactions.Config{Store: store, Commands: cmd, Logger: log, Now: opts.Now, Documents: projections.Document,
		ApprovalTTL: cfg.ApprovalTTL, StallTimeout: cfg.StallTimeout,
		Upgrades: reactions.Upgrades{Version: opts.Version, Timeout: cfg.AgentUpgradeTimeout}})
	if err != nil {
		return err
	}
	proj, err := projections.New(projections.Config{Store: store, Keys: sealer, Logger: log, Park: opts.Park})
	if err != nil {
		return err
	}
	replica := replicaName(ln.Addr().String())
	tel := telemetry.New(pool, opts.Now)
	if err := tel.EnsurePartitions(ctx); err != nil {
		return err
	}
	waker := store.NewWaker(replica, projections.ProjectedChannel)
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(parkedCollector{pool: pool})
	registry.MustRegister(lagCollector{pool: pool}, poolCollector{pool: pool}, deploymentsCollector{pool: pool},
		buildInfo(opts.Version), commands)
	registryAuth, err := image.ParseAuth(cfg.RegistryAuth)
	if err != nil {
		return fmt.Errorf("%s: %w", config.EnvRegistryAuth, err)
	}
	a, err := api.New(api.Config{
		Pool: pool, Commands: cmd, Sealer: sealer, Changed: waker.Changed, Logger: log, Version: opts.Version, AgentBinaries: opts.AgentBinaries,
		Images: image.NewResolver(image.Config{Insecure: cfg.InsecureRegistries, Allowed: cfg.AllowedRegistries,
			DenyPrivate: cfg.RegistryDenyPrivate, AuthFile: cfg.RegistryAuthFile, Auth: registryAuth}),
		Registry:    registry,
		Now:         opts.Now,
		Telemetry:   tel,
		RetryParked: retryParked(store, proj.Subscription(nil), react.Subscription(nil)),
		Backup:      backupCfg,
		PublicURL:   cfg.PublicURL,
	})
	if err != nil {
		return err
	}
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHub()
	link, err := agentlink.New(agentlink.Config{Pool: pool, Commands: cmd, Secrets: sealer, Logger: log, Replica: replica, Now: opts.Now, Changed: waker.Changed, Telemetry: tel,
		Binaries: opts.AgentBinaries})
	if err != nil {
		return err
	}
	hub, err := transport.NewHub(hubCtx, transport.HubConfig{
		// The access log names the server an agent's connection belongs to.
		Authenticate: func(r *http.Request) (transport.Peer, error) {
			p, err := link.Authenticate(r)
			if err == nil {
				api.NotePrincipal(r.Context(), p.ServerID)
			}
			return p, err
		},
		Heads: link.Heads, Fetch: link.Fetch,
		OnHello: link.OnHello, OnHeartbeat: link.OnHeartbeat, OnAck: link.OnAck, OnDisconnect: link.OnDisconnect,
		OnStatus: link.OnStatus, OnLogs: link.OnLogs, OnStage: link.OnStage, OnUpgradeResult: link.UpgradeResult,
		OnBuildReport: link.OnBuildReport, OnBuildLogs: link.OnBuildLogs,
		Logger: log,
	})
	if err != nil {
		return err
	}
	registry.MustRegister(agentsConnected(func() int { return len(hub.Connected()) }))
	link.Attach(hub)
	if opts.OnLink != nil {
		opts.OnLink(link)
	}
	// Agent upgrades go out over this replica's hub; the agents' answers
	// come back through the link.
	react.AttachAgents(upgradeSender{link}, agentlink.ErrServerOffline, link)
	link.OnUpgradeResult = func(ctx context.Context, serverID string, r transport.AgentUpgradeResult) {
		react.UpgradeResult(ctx, serverID, reactions.UpgradeReport{ID: r.ID, Version: r.Version, OK: r.OK, Step: transport.StepName(r.Step), Error: r.Error})
	}
	sched, err := jobs.New(jobs.Config{Pool: pool, Replica: replica, Logger: log,
		Jobs: append(backgroundJobs(store, pool, tel, opts.JobInterval), jobs.Job{Name: "fire-timers", Interval: time.Second,
			Run: func(ctx context.Context) error { _, err := react.FireDue(ctx); return err }})})
	if err != nil {
		return err
	}

	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for name, run := range map[string]func(context.Context) error{
		"notifier":    store.RunNotifier,
		"waker":       waker.Run,
		"projections": func(ctx context.Context) error { return proj.Run(ctx, waker.Subscribe()) },
		"reactions":   func(ctx context.Context) error { return react.Run(ctx, waker.Subscribe()) },
		"jobs":        sched.Run,
		"agent-hub":   func(ctx context.Context) error { return refreshHub(ctx, hub, link, waker, log) },
		// An agent upgrade whose agent is connected to this replica goes
		// out from here, whichever replica reacted to the request.
		"agent-upgrades": func(ctx context.Context) error {
			return react.DeliverUpgrades(ctx, connectedServers(hub), waker.Subscribe())
		},
		// Each cluster's builds go to its servers connected here.
		"agent-builds": func(ctx context.Context) error { return link.DeliverBuilds(ctx, waker.Subscribe()) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(bg); err != nil && bg.Err() == nil {
				log.Error("background task stopped", "task", name, "err", err)
			}
		}()
	}
	defer func() {
		stopBackground()
		wg.Wait()
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", readyz(pool))
	// /metrics: on its own listener without authentication when there is
	// one (and then not here), else here for instance administrators.
	var metricsSrv *http.Server
	if metricsLn != nil {
		mm := http.NewServeMux()
		mm.Handle("GET /metrics", a.OpenMetricsHandler())
		metricsSrv = &http.Server{Handler: api.AccessLog(log, mm), ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	} else {
		mux.Handle("GET /metrics", a.MetricsHandler())
	}
	mux.Handle("/api/", a.Handler())
	mux.Handle("GET "+transport.ConnectPath, hub)
	mux.HandleFunc("POST "+transport.RegisterPath, link.Register)
	mux.HandleFunc("GET "+transport.DownloadPath+"{file}", link.Download)
	// The web console: every other path. It reaches the control plane only
	// through the API's handler, in process (package console).
	con, err := console.New(console.Config{API: a.Handler(), Secure: cfg.TLSCert != "" || strings.HasPrefix(cfg.PublicURL, "https://"),
		PublicURL: cfg.PublicURL, Version: opts.Version, ApprovalTTL: cfg.ApprovalTTL, Logger: log, Now: opts.Now})
	if err != nil {
		return err
	}
	mux.Handle("/", con.Handler())
	srv := &http.Server{
		Handler:           strictTransport(api.AccessLog(log, mux)),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Event streams never end on their own: shutting down ends them, and
	// their clients resume on another replica with Last-Event-ID.
	srv.RegisterOnShutdown(a.CloseStreams)
	errc := make(chan error, 2)
	go func() {
		if cfg.TLSCert != "" {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			errc <- srv.ServeTLS(ln, cfg.TLSCert, cfg.TLSKey)
			return
		}
		errc <- srv.Serve(ln)
	}()
	started := Started{Addr: ln.Addr().String()}
	if metricsSrv != nil {
		started.MetricsAddr = metricsLn.Addr().String()
		go func() {
			if err := metricsSrv.Serve(metricsLn); err != nil && err != http.ErrServerClosed {
				errc <- fmt.Errorf("metrics listener: %w", err)
			}
		}()
		defer metricsSrv.Close()
	}
	log.Info("control plane ready", "listen", started.Addr, "metrics_listen", started.MetricsAddr, "public_url", cfg.PublicURL, "version", opts.Version, "replica", replica)
	if opts.Started != nil {
		users, err := query.CountUsers(ctx, pool)
		if err != nil {
			log.Warn("counting users", "err", err)
		}
		started.NeedsSetup = err == nil && users == 0
		opts.Started(started)
	}
	if opts.Ready != nil {
		opts.Ready(ln.Addr().String())
	}
	var runErr error
	select {
	case err := <-errc:
		return fmt.Errorf("serving HTTP: %w", err)
	case err := <-pgFailed:
		log.Error("the managed PostgreSQL stopped and could not be restarted: shutting down", "err", err)
		runErr = fmt.Errorf("the managed PostgreSQL stopped and could not be restarted: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: letting requests in flight finish", "timeout", opts.ShutdownTimeout)
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.ShutdownTimeout)
	defer cancel()
	// Agents' connections are hijacked, so Shutdown does not wait for them:
	// close them with a reason; the agents reconnect to another replica.
	stopHub()
	if err := srv.Shutdown(shutCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	hub.Wait()
	return runErr
}
