package main

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/config"
	"github.com/nebulactrl/nebulactrl/server"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the control plane: REST API, background jobs and (without NEBULACTRL_DATABASE_URL) a managed PostgreSQL",
		Description: `Reads NEBULACTRL_* settings from the environment and the .env file. On the first
start without NEBULACTRL_SECRET_KEY it generates one into the .env file (mode 0600).
Stops gracefully on SIGINT/SIGTERM: requests in flight finish first.

Example:
   NEBULACTRL_LISTEN=0.0.0.0:8080 nebula serve`,
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return err
			}
			log := newLogger(cfg.LogLevel)
			return server.Run(c.Context, cfg, server.Options{
				Version: version,
				Logger:  log,
				Ready: func(addr string) {
					if c.Bool("quiet") {
						return
					}
					fmt.Fprintf(c.App.ErrWriter, "NebulaCtrl is running at %s (API: %s/api/v1)\n", cfg.PublicURL, strings.TrimRight(cfg.PublicURL, "/"))
					fmt.Fprintf(c.App.ErrWriter, "First time? Create the first user:  nebula setup --url %s --email you@example.com --org acme\n", cfg.PublicURL)
				},
			})
		},
		Flags: []cli.Flag{&cli.BoolFlag{Name: "quiet", Usage: "do not print the welcome lines"}},
	}
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
