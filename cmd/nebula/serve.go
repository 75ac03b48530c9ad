package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/server"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the control plane: REST API, background jobs and (without NEBULACTRL_DATABASE_URL) a managed PostgreSQL",
		Description: `Reads NEBULACTRL_* settings from the environment and the .env file. On the first
start without NEBULACTRL_SECRET_KEY it generates one into the .env file (mode 0600).
Stops gracefully on SIGINT/SIGTERM: requests in flight finish first.
Logs go to stderr, as text or (NEBULACTRL_LOG_FORMAT=json) one JSON object a
line, with one "request" line per HTTP request. /metrics needs an instance
administrator's token, unless NEBULACTRL_METRICS_LISTEN gives it a listener of
its own (see docs/operations.md).

Example:
   NEBULACTRL_LISTEN=0.0.0.0:8080 nebula serve`,
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return err
			}
			log := newLogger(c.App.ErrWriter, cfg.LogLevel, cfg.LogFormat)
			return server.Run(c.Context, cfg, server.Options{
				Version: version,
				Logger:  log,
				Started: func(s server.Started) {
					if c.Bool("quiet") {
						return
					}
					if cfg.LogFormat == "json" {
						// Nothing but JSON lines on stderr for a log collector.
						if s.NeedsSetup {
							log.Info("no user yet: create the first one with nebula setup", "command", "nebula setup --url "+cfg.PublicURL+" --email you@example.com --org acme")
						}
						return
					}
					fmt.Fprintf(c.App.ErrWriter, "NebulaCtrl is running at %s (the console; API: %s/api/v1)\n", cfg.PublicURL, strings.TrimRight(cfg.PublicURL, "/"))
					if s.NeedsSetup {
						fmt.Fprintf(c.App.ErrWriter, "First time? Create the first user:  nebula setup --url %s --email you@example.com --org acme\n", cfg.PublicURL)
					}
				},
			})
		},
		Flags: []cli.Flag{&cli.BoolFlag{Name: "quiet", Usage: "do not print the welcome lines"}},
	}
}

// newLogger logs to w at level, as text or json (config.Validate checked
// both).
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: l}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
