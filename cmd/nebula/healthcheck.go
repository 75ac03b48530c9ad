package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/internal/config"
)

// healthcheckCommand is the container's health check: the image has no
// shell or curl, so the binary asks its own /readyz over loopback.
func healthcheckCommand() *cli.Command {
	return &cli.Command{
		Name:  "healthcheck",
		Usage: "exit 0 when the control plane on this machine is ready (/readyz answers 200), 1 otherwise",
		Description: `Asks /readyz of the control plane listening on NEBULACTRL_LISTEN: at its
address, over loopback when it listens on all of them (https when
NEBULACTRL_TLS_CERT is set, without checking the certificate's name: it is
this machine). The health check of the container
image and of deploy/compose.yaml.

Example:
   nebulactrl-server healthcheck`,
		Flags: []cli.Flag{&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give up after this long"}},
		Action: func(c *cli.Context) error {
			cfg, err := config.Load(c.String("env-file"))
			if err != nil {
				return err
			}
			host, port, err := net.SplitHostPort(cfg.Listen)
			if err != nil {
				return fmt.Errorf("%s=%q: %w", config.EnvListen, cfg.Listen, err)
			}
			// All addresses (0.0.0.0, ::, none): loopback; one address of
			// this machine: that one, where the server listens.
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				host = "127.0.0.1"
			}
			scheme := "http"
			tr := &http.Transport{}
			if cfg.TLSCert != "" {
				scheme = "https"
				tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // loopback to itself
			}
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/readyz", nil)
			if err != nil {
				return err
			}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				return fmt.Errorf("not ready: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("not ready: /readyz answered %s", resp.Status)
			}
			fmt.Fprintln(c.App.Writer, "ready")
			return nil
		},
	}
}
