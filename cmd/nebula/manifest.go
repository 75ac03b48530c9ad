package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// clusterManifestCommand is nebula cluster manifest.
func clusterManifestCommand(hours cli.Flag) *cli.Command {
	return spec{
		name: "manifest", usage: "print what installs the agent: the Kubernetes manifest, or systemd units with --host", argsUsage: shapeCluster,
		description: `Prints the install manifest of the cluster's agent: namespaces nebula-system,
nebula-build and nebula-mesh, RBAC that reaches only the namespaces NebulaCtrl manages, a
StatefulSet of two agent replicas (leader election on a Lease) that passes the Pod Security
Standard "restricted", a PodDisruptionBudget, and the WireGuard mesh's node agent on every
node (the DaemonSet nebulactrl-mesh). The agent image is the control plane's own version
(--image to choose another; never latest).

By default it issues a new join token and puts it in the manifest's Secret: treat that
output like a password. With --without-token it issues none and the manifest holds no
secret, so it can live in Git; the token's Secret is created on its own, as it says.

With --host it prints systemd units instead: the agent's with its environment file,
and the mesh's node agent's (nebulactrl-mesh.service).

Join tokens and desired state never cross plain HTTP except on loopback: an http:// URL
to another host is refused unless --insecure.

Example:
   nebula cluster manifest acme/eu-1 | kubectl apply -f -
   nebula cluster manifest acme/eu-1 --without-token > nebulactrl-agent.yaml
   nebula cluster manifest acme/eu-1 --host`,
		flags: []cli.Flag{hours,
			&cli.BoolFlag{Name: "host", Usage: "print the systemd units of an agent and the mesh's node agent on a host"},
			&cli.StringFlag{Name: "image", Usage: "the agent image (default: the control plane's version)"},
			&cli.StringFlag{Name: "ca-bundle", Usage: "a PEM file of CAs the agents trust besides the system roots"},
			&cli.StringFlag{Name: "public-url", Usage: "the URL agents reach the control plane at (default: the one you use)"},
			&cli.BoolFlag{Name: "without-token", Usage: "issue no join token and leave it out: a manifest to keep in Git"},
			&cli.BoolFlag{Name: "insecure", Usage: "allow a plain http:// URL to a host that is not loopback (secrets cross the network in clear)"}},
		nargs: 1,
		run: func(x *cmdCtx) error {
			a, cl, err := x.addressClient(0, shapeCluster)
			if err != nil {
				return err
			}
			opts := agentinstall.Options{ControlPlaneURL: cl.URL(), Image: x.String("image"), Cluster: a.String(),
				WithoutToken: x.Bool("without-token"), InsecurePlainHTTP: x.Bool("insecure")}
			if u := x.String("public-url"); u != "" {
				opts.ControlPlaneURL = u
			}
			// Refused before a join token is issued for nothing.
			if err := agentinstall.CheckURL(opts.ControlPlaneURL, opts.InsecurePlainHTTP); err != nil {
				return err
			}
			if f := x.String("ca-bundle"); f != "" {
				b, err := os.ReadFile(f)
				if err != nil {
					return fmt.Errorf("reading the CA bundle: %w", err)
				}
				opts.CABundle = string(b)
			}
			if !x.Bool("host") {
				if opts.Image == "" {
					v, err := controlPlaneVersion(x.Context.Context, cl.URL())
					if err != nil {
						return fmt.Errorf("%w; give the agent image with --image", err)
					}
					if opts.Image = agentinstall.DefaultImage(v); opts.Image == "" {
						return fmt.Errorf("the control plane runs version %q, which is not a release and has no published agent image: give the agent image with --image (a tag or digest, not latest)", v)
					}
				}
				if err := agentinstall.CheckImage(opts.Image); err != nil {
					return err
				}
			}
			if x.Bool("host") {
				// The unit names the version (and image) the agents run;
				// without an answer it leaves that line out.
				if v, err := controlPlaneVersion(x.Context.Context, cl.URL()); err == nil {
					opts.Version = v
				}
			}
			render := func() error {
				if x.Bool("host") {
					unit, env, err := agentinstall.SystemdUnit(opts)
					if err != nil {
						return err
					}
					mesh, err := agentinstall.MeshUnit(opts)
					if err != nil {
						return err
					}
					x.printf("%s\n%s\n%s", unit, env, mesh)
					return nil
				}
				m, err := agentinstall.Manifest(opts)
				if err != nil {
					return err
				}
				x.printf("%s", m)
				return nil
			}
			if opts.WithoutToken {
				if err := render(); err != nil {
					return err
				}
				where := "the Secret " + agentinstall.JoinSecret + " in " + agentinstall.AgentNamespace
				command := agentinstall.JoinSecretCommand("TOKEN")
				if x.Bool("host") {
					where, command = "/etc/nebulactrl/agent.env", "NEBULACTRL_JOIN_TOKEN=TOKEN"
				}
				x.warnf("The output holds no join token. Before the agent starts, put one in %s:\n    nebula cluster token create %s\n    %s\n", where, a, command)
				return nil
			}
			var t api.CreatedJoinToken
			return x.read(&t, func(ctx context.Context) (err error) {
				t, err = cl.CreateJoinToken(ctx, a.Org, a.Cluster, api.JoinTokenRequest{ExpiresInHours: x.Int("expires-in-hours")})
				return
			}, func() error {
				opts.JoinToken = t.Token
				return render()
			})
		},
	}.command()
}

// controlPlaneVersion asks the control plane which version it runs: the
// version of its OpenAPI document, which it serves to anyone.
func controlPlaneVersion(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/api/v1/openapi.json", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("User-Agent", "nebula/"+version)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("asking the control plane for its version: %w", err)
	}
	defer resp.Body.Close()
	var doc struct {
		Info struct {
			Version string `json:"version"`
		} `json:"info"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("asking the control plane for its version: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&doc); err != nil || doc.Info.Version == "" {
		return "", fmt.Errorf("the control plane did not say its version (%v)", err)
	}
	return doc.Info.Version, nil
}
