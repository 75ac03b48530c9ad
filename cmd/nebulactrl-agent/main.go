// Command nebulactrl-agent is NebulaCtrl's agent: it runs in each cluster (a
// StatefulSet of two replicas in nebula-system) or on a host under systemd,
// opens the connection to the control plane itself and makes the cluster
// match the desired state it receives.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/agent/mesh"
	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/agent/selfupdate"
	"github.com/nebulactrl/nebulactrl/transport"
)

// version is set at build time: -ldflags "-X main.version=1.5.0".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, selfupdate.ErrRestart) {
		// Upgraded or rolled back: the supervisor (systemd Restart=always,
		// the container's restart policy) starts the binary at the path.
		fmt.Fprintln(os.Stderr, "nebulactrl-agent: exiting to restart with the binary now in place")
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nebulactrl-agent:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, c.App.Version) }
	app := &cli.App{
		Name:      "nebulactrl-agent",
		Usage:     "the NebulaCtrl agent: keeps a cluster matching the control plane's desired state",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		Description: `The agent connects out to the control plane (no inbound port), registers once
with the cluster's join token and keeps its own credential afterwards.

It upgrades itself when the control plane asks: it downloads the control plane's agent binary,
checks its SHA-256 and --version, keeps the running one as <binary>.prev, replaces its binary and
exits for systemd (Restart=always) or the pod to start the new one. A new binary that does not
stay connected is rolled back. Its last upgrade is recorded in --state-dir/upgrade.json.

Example (in a cluster, as the install manifest runs it):
   nebulactrl-agent --url https://nebula.example.com --join-token-file /etc/nebulactrl/join-token \
     --credential-secret nebulactrl-agent-0 --lease-name nebulactrl-agent`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "url", Usage: "the control plane's public URL (https://...)", EnvVars: []string{"NEBULACTRL_URL"}},
			&cli.StringFlag{Name: "join-token", Usage: "the cluster's join token (first start only)", EnvVars: []string{"NEBULACTRL_JOIN_TOKEN"}},
			&cli.StringFlag{Name: "join-token-file", Usage: "read the join token from this file", EnvVars: []string{"NEBULACTRL_JOIN_TOKEN_FILE"}},
			&cli.StringFlag{Name: "name", Usage: "this server's stable name (default: the pod or host name)", EnvVars: []string{"NEBULACTRL_SERVER_NAME", "POD_NAME"}},
			&cli.StringFlag{Name: "namespace", Usage: "the agent's own namespace", Value: "nebula-system", EnvVars: []string{"POD_NAMESPACE"}},
			&cli.StringFlag{Name: "credential-secret", Usage: "keep the credential in this Secret of --namespace (in-cluster)", EnvVars: []string{"NEBULACTRL_CREDENTIAL_SECRET"}},
			&cli.StringFlag{Name: "state-dir", Usage: "keep the credential (on a host) and the last self-upgrade's record, upgrade.json, in this directory", Value: "/var/lib/nebulactrl-agent", EnvVars: []string{"NEBULACTRL_STATE_DIR"}},
			&cli.StringFlag{Name: "ca-bundle", Usage: "also trust the CAs in this PEM file (besides the system roots)", EnvVars: []string{"NEBULACTRL_CA_BUNDLE"}},
			&cli.BoolFlag{Name: "insecure-plain-http", Usage: "allow an http:// URL to a loopback host (development)"},
			&cli.BoolFlag{Name: "insecure-plain-http-remote", Usage: "allow an http:// URL to any host: the join token, the credential and every secret cross the network in clear"},
			&cli.StringFlag{Name: "workload-role", EnvVars: []string{"NEBULACTRL_WORKLOAD_ROLE"},
				Usage: "bind this ClusterRole to the agent's ServiceAccount (--service-account in --namespace) in each namespace it creates: its only rights on workloads (the install manifest's RBAC)"},
			&cli.StringFlag{Name: "service-account", Usage: "the agent's own ServiceAccount", Value: "nebulactrl-agent", EnvVars: []string{"SERVICE_ACCOUNT"}},
			&cli.StringFlag{Name: "health-file", Usage: "keep this file fresh with the agent's health, for the health command (the pod's probes)", EnvVars: []string{"NEBULACTRL_HEALTH_FILE"}},
			&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default: in-cluster configuration)", EnvVars: []string{"KUBECONFIG"}},
			&cli.StringFlag{Name: "lease-name", Usage: "leader election Lease in --namespace; empty: this agent always reconciles", EnvVars: []string{"NEBULACTRL_LEASE_NAME"}},
			&cli.DurationFlag{Name: "lease-duration", Value: 15 * time.Second, Usage: "leader election lease duration"},
			&cli.DurationFlag{Name: "renew-deadline", Value: 10 * time.Second, Usage: "leader election renew deadline"},
			&cli.DurationFlag{Name: "retry-period", Value: 2 * time.Second, Usage: "leader election retry period"},
			&cli.DurationFlag{Name: "retire-grace", Value: reconcile.DefaultRetireGrace, EnvVars: []string{"NEBULACTRL_RETIRE_GRACE"},
				Usage: "how long an old release keeps running after traffic moved to the new one, so its requests can finish"},
			&cli.StringFlag{Name: "build-namespace", EnvVars: []string{"NEBULACTRL_BUILD_NAMESPACE"},
				Usage: "run the control plane's builds from Git as Jobs in this namespace (the manifest's nebula-build); empty: this agent runs no builds"},
			&cli.StringFlag{Name: "registry", Value: build.DefaultPushRegistry, EnvVars: []string{"NEBULACTRL_REGISTRY"},
				Usage: "the cluster's registry as build pods push to it (plain HTTP, in-cluster)"},
			&cli.StringFlag{Name: "node-registry", Value: build.DefaultNodeRegistry, EnvVars: []string{"NEBULACTRL_NODE_REGISTRY"},
				Usage: "the same registry as every node pulls from it (a localhost NodePort: containerd reaches it over plain HTTP)"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"NEBULACTRL_LOG_LEVEL"}},
		},
		Action: func(c *cli.Context) error { return serve(c) },
		Commands: []*cli.Command{{
			Name:  "health",
			Usage: "exit 0 when the agent's health file is fresh (and with --connected, when it is connected to the control plane)",
			Description: `The pod's probes run it: the agent needs no inbound port.

Example:
   nebulactrl-agent health --file /run/nebulactrl/health --connected`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "file", Usage: "the agent's --health-file", Required: true},
				&cli.BoolFlag{Name: "connected", Usage: "also require a connection to the control plane"},
				&cli.DurationFlag{Name: "max-age", Value: healthMaxAge, Usage: "how old the file may be"},
			},
			Action: func(c *cli.Context) error {
				msg, err := checkHealth(c.String("file"), c.Bool("connected"), c.Duration("max-age"), time.Now())
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, msg)
				return nil
			},
		}, {
			Name:  "mesh",
			Usage: "run the node agent of the WireGuard mesh on this node (the nebulactrl-mesh DaemonSet, or a host's systemd unit)",
			Description: `Keeps this node's private key in --key-dir (mode 0600; it never leaves the node),
publishes the public key and the node's candidate endpoints in a ConfigMap of --namespace,
and configures --interface with wgctrl from the peers the cluster's agent writes there
(kernel WireGuard when the module exists, else wireguard-go in this process). It needs
no credential to the control plane and opens no port but --listen-port (UDP).

Example:
   nebulactrl-agent mesh --node-name "$NODE_NAME"`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "node-name", Usage: "the Kubernetes node this runs on", EnvVars: []string{"NODE_NAME"}, Required: true},
				&cli.StringFlag{Name: "namespace", Usage: "the mesh's namespace", Value: mesh.DefaultNamespace, EnvVars: []string{"POD_NAMESPACE"}},
				&cli.StringFlag{Name: "interface", Usage: "the WireGuard interface (at most 15 bytes)", Value: mesh.DefaultInterface},
				&cli.StringFlag{Name: "key-dir", Usage: "the host directory that keeps this node's private key", Value: mesh.DefaultKeyDir},
				&cli.IntFlag{Name: "listen-port", Usage: "the WireGuard UDP port", Value: transport.MeshListenPort},
				&cli.StringFlag{Name: "mode", Usage: "auto (kernel WireGuard when the module exists, else wireguard-go), kernel or userspace", Value: mesh.ModeAuto},
				&cli.StringFlag{Name: "endpoint", Usage: "publish only this endpoint (IP, or IP:port): a node reached through a port forward"},
				&cli.DurationFlag{Name: "report-every", Usage: "how often the peers' handshakes are republished", Value: mesh.DefaultReportEvery},
				&cli.DurationFlag{Name: "rotation-grace", Usage: "how long to wait, once the peers were given this node's next key, before switching to it", Value: transport.MeshRotationGrace},
				&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig file (default: in-cluster configuration)", EnvVars: []string{"KUBECONFIG"}},
				&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"NEBULACTRL_LOG_LEVEL"}},
			},
			Action: func(c *cli.Context) error { return runMesh(c) },
		}, {
			Name:      "seed",
			Usage:     "copy this binary to a path (the install manifest's init container seeds the pod volume with it)",
			ArgsUsage: "DEST",
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return errors.New("want the destination path")
				}
				return seed(c.Args().First())
			},
		}},
	}
	return app.RunContext(ctx, args)
}

// seed copies the running binary to dest atomically: the path holds a whole
// binary at every moment.
// It streams: the init container's memory limit is far below the binary's size.
func seed(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("reading %s: %w", self, err)
	}
	defer in.Close()
	tmp := dest + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	return os.Rename(tmp, dest)
}

func serve(c *cli.Context) error {
	if c.String("url") == "" {
		return errors.New("--url (or NEBULACTRL_URL) is required: the control plane's public URL")
	}
	if g := c.Duration("retire-grace"); g <= 0 {
		return fmt.Errorf("--retire-grace %v: must be positive", g)
	}
	// Before anything is read or sent: the join token, the credential and
	// the desired state's secrets cross plain HTTP only on loopback, unless
	// the operator said otherwise in so many words.
	plain, plainRemote := c.Bool("insecure-plain-http"), c.Bool("insecure-plain-http-remote")
	if err := transport.CheckURL(c.String("url"), plain, plainRemote); err != nil {
		return err
	}
	var binding *reconcile.Binding
	if role := c.String("workload-role"); role != "" {
		binding = &reconcile.Binding{ClusterRole: role, Namespace: c.String("namespace"), ServiceAccount: c.String("service-account")}
		if err := binding.Validate(); err != nil {
			return err
		}
	}
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.String("log-level")))
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f := c.String("ca-bundle"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("reading the CA bundle: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("the CA bundle %s holds no PEM certificate", f)
		}
		tlsCfg.RootCAs = pool
	}
	// First of all, a new binary on probation counts its start and rolls
	// back after too many (a crash loop); a rollback decided before a kill
	// is completed.
	ctx, cancel := context.WithCancelCause(c.Context)
	defer cancel(nil)
	updater, err := selfupdate.New(selfupdate.Config{
		StateDir: c.String("state-dir"), URL: c.String("url"), Version: version, Arch: runtime.GOARCH, Logger: log,
		HTTP: &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}},
		Exit: func(reason string) {
			log.Info("stopping to restart", "reason", reason)
			cancel(selfupdate.ErrRestart)
			// A shutdown that hangs must not keep the old binary running.
			time.AfterFunc(time.Minute, func() { os.Exit(0) })
		},
	})
	if err != nil {
		return err
	}
	if err := updater.Start(); errors.Is(err, selfupdate.ErrRestart) {
		return err
	} else if err != nil {
		log.Error("the upgrade's probation", "err", err)
	}
	health := newHealthFile(c.String("health-file"))
	if err := health.write(false, false); err != nil {
		return err
	}
	restCfg, err := kubeConfig(c.String("kubeconfig"))
	if err != nil {
		return err
	}
	restCfg.UserAgent = "nebulactrl-agent/" + version
	// client-go's default (5 requests a second) would take minutes to apply
	// a large environment the first time.
	restCfg.QPS, restCfg.Burst = 50, 100
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	name := c.String("name")
	if name == "" {
		name, _ = os.Hostname()
	}
	var store agent.CredentialStore = agent.FileStore{Path: filepath.Join(c.String("state-dir"), "credential")}
	if s := c.String("credential-secret"); s != "" {
		store = agent.SecretStore{Client: client, Namespace: c.String("namespace"), Name: s}
	}
	cred, err := store.Load(c.Context)
	if err != nil {
		return err
	}
	if cred == "" {
		token := c.String("join-token")
		if f := c.String("join-token-file"); token == "" && f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				return fmt.Errorf("reading the join token: %w", err)
			}
			token = string(b)
		}
		if token == "" {
			return errors.New("no credential yet and no join token: give --join-token (from nebula cluster create) on the first start")
		}
		// Register only when the credential can be kept: otherwise the
		// name would stay taken by a server that can never connect.
		if err := store.Writable(c.Context); err != nil {
			return fmt.Errorf("not registering, as the credential could not be kept: %w", err)
		}
		register := transport.Register
		if plainRemote {
			register = transport.RegisterPlainRemote
		}
		reg, err := register(c.Context, c.String("url"), tlsCfg, transport.RegisterRequest{JoinToken: trim(token), Name: name})
		if err != nil {
			return err
		}
		if err := store.Save(c.Context, reg.Credential); err != nil {
			return err
		}
		log.Info("registered with the control plane", "server_id", reg.ServerID, "name", name)
		cred = reg.Credential
	}
	updater.SetCredential(cred)
	var builds *build.Config
	if ns := c.String("build-namespace"); ns != "" {
		builds = &build.Config{Client: client, Namespace: ns, PushRegistry: c.String("registry"), NodeRegistry: c.String("node-registry"),
			Report: func(transport.BuildReport) {}, Logs: func(transport.BuildLogs) {}}
		if err := builds.Validate(); err != nil {
			return err
		}
	}
	a, err := agent.New(agent.Config{
		Link: transport.ClientConfig{URL: c.String("url"), Credential: cred, TLS: tlsCfg, AllowPlain: plain, AllowPlainRemote: plainRemote, Logger: log,
			OnConnected: func(transport.Welcome) { health.connected.Store(true) }, OnDisconnected: func(error) { health.connected.Store(false) }},
		Client:   client,
		Version:  version,
		Identity: name, LeaseNamespace: c.String("namespace"), LeaseName: c.String("lease-name"),
		LeaseDuration: c.Duration("lease-duration"), RenewDeadline: c.Duration("renew-deadline"), RetryPeriod: c.Duration("retry-period"),
		RetireGrace: c.Duration("retire-grace"),
		Binding:     binding,
		Logger:      log,
		Updater:     updater,
		Builds:      builds,
	})
	if err != nil {
		return err
	}
	go health.keep(ctx, a.Leader, log)
	err = a.Run(ctx)
	if cause := context.Cause(ctx); errors.Is(cause, selfupdate.ErrRestart) {
		return cause
	}
	return err
}

func trim(s string) string {
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == ' ' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no in-cluster Kubernetes configuration (give --kubeconfig outside a cluster): %w", err)
		}
		return cfg, nil
	}
	return clientcmd.BuildConfigFromFlags("", path)
}

// runMesh runs the mesh's node agent.
func runMesh(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	if n := c.String("interface"); n == "" || len(n) > 15 {
		return fmt.Errorf("--interface %q: an interface name is 1 to 15 bytes", n)
	}
	if p := c.Int("listen-port"); p < 1 || p > 65535 {
		return fmt.Errorf("--listen-port %d: not a UDP port", p)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return fmt.Errorf("--log-level %q: %w", c.String("log-level"), err)
	}
	log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
	rc, err := kubeConfig(c.String("kubeconfig"))
	if err != nil {
		return fmt.Errorf("kubernetes configuration: %w", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	return mesh.Run(c.Context, mesh.Config{Client: cs, Namespace: c.String("namespace"), NodeName: c.String("node-name"),
		Interface: c.String("interface"), KeyDir: c.String("key-dir"), ListenPort: c.Int("listen-port"), Mode: c.String("mode"),
		Endpoint: c.String("endpoint"), ReportEvery: c.Duration("report-every"), RotationGrace: c.Duration("rotation-grace"), Logger: log})
}
