// Package servertest starts a whole control plane (server.Run, as `nebula
// serve` runs it) for a test, on its own fresh PostgreSQL database and a free
// port, and stops it when the test ends.
package servertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// Server is a running control plane.
type Server struct {
	URL string
	// MetricsURL is the metrics listener's (NEBULACTRL_METRICS_LISTEN):
	// MetricsURL+"/metrics" answers without a token.
	MetricsURL  string
	DatabaseURL string
	SecretKey   string
	// Link is the control plane's agent link (tests send agent_upgrade
	// through it).
	Link *agentlink.Link
	stop func()
	once sync.Once
}

// Stop shuts the control plane down (it also stops when the test ends).
func (s *Server) Stop() { s.once.Do(s.stop) }

// Options tune the server.
type Options struct {
	// DatabaseURL shares a database (a second replica); a fresh one otherwise.
	DatabaseURL string
	SecretKey   string
	// PreviousSecretKey is NEBULACTRL_PREVIOUS_SECRET_KEY: the old master
	// key during a rotation.
	PreviousSecretKey string
	Insecure          []string
	JobInterval       time.Duration
	// Now injects the clock of the API and the agent link.
	Now func() time.Time
	// Listen is the address (default 127.0.0.1:0); a restarted control plane
	// takes the address it had, so its agents find it again.
	Listen string
	// ApprovalTTL and StallTimeout override the defaults (72 h, 10 min).
	ApprovalTTL, StallTimeout time.Duration
	// Version is the version the control plane says it runs ("test").
	Version string
	// AgentUpgradeTimeout overrides how long an upgraded agent has to come
	// back with the new version (10 min).
	AgentUpgradeTimeout time.Duration
	// Park shortens when the projections park an event they cannot handle.
	Park eventstore.ParkPolicy
	// AgentBinaries are the agent binaries served at /agent/v1/download/
	// (default: none, as in a plain go build).
	AgentBinaries agentbin.Source
	// Logger receives the control plane's log (default: warnings and
	// errors, as text on stderr).
	Logger *slog.Logger
	// PublicMetrics serves /metrics on the public listener (to instance
	// administrators) instead of a metrics listener of its own.
	PublicMetrics bool
	// WebhookAllowedHosts is NEBULACTRL_WEBHOOK_ALLOWED_HOSTS: outbound
	// webhook receivers on loopback the deliveries may reach.
	WebhookAllowedHosts []string
}

// Start starts a control plane for t.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.DatabaseURL == "" {
		opts.DatabaseURL = pgtest.URL(t)
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Version == "" {
		opts.Version = "test"
	}
	if opts.SecretKey == "" {
		k, err := seal.GenerateMasterKey()
		if err != nil {
			t.Fatal(err)
		}
		opts.SecretKey = k
	}
	cfg := config.Config{
		DatabaseURL: opts.DatabaseURL, SecretKey: opts.SecretKey, PreviousSecretKey: opts.PreviousSecretKey, Listen: opts.Listen, LogLevel: "warn",
		PublicURL: "http://127.0.0.1", InsecureRegistries: opts.Insecure,
		ApprovalTTL: opts.ApprovalTTL, StallTimeout: opts.StallTimeout, AgentUpgradeTimeout: opts.AgentUpgradeTimeout,
		WebhookAllowedHosts: opts.WebhookAllowedHosts,
	}
	if !opts.PublicMetrics {
		cfg.MetricsListen = "127.0.0.1:0"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	var link *agentlink.Link
	ready := make(chan server.Started, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(ctx, cfg, server.Options{Version: opts.Version, Logger: logger, Started: func(s server.Started) { ready <- s },
			JobInterval: opts.JobInterval, Now: opts.Now,
			AgentBinaries: opts.AgentBinaries, OnLink: func(l *agentlink.Link) { link = l }, Park: opts.Park})
	}()
	var started server.Started
	select {
	case started = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("servertest: the control plane did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("servertest: the control plane did not start within 60 s")
	}
	s := &Server{URL: "http://" + started.Addr, DatabaseURL: opts.DatabaseURL, SecretKey: opts.SecretKey, Link: link}
	if started.MetricsAddr != "" {
		s.MetricsURL = "http://" + started.MetricsAddr
	}
	s.stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("servertest: the control plane did not stop within 30 s")
		}
	}
	t.Cleanup(s.Stop)
	return s
}

// Setup creates the first user and organisation and returns the user's token.
func (s *Server) Setup(t testing.TB, email, org string) string {
	t.Helper()
	body := fmt.Sprintf(`{"email":%q,"password":"correct horse battery staple","organisation":%q}`, email, org)
	resp, err := http.Post(s.URL+"/api/v1/setup", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("servertest: setup: %d %s", resp.StatusCode, b)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Token
}
