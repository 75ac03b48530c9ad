package k8stest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	serviceCIDR = "10.0.0.0/24"
	// podCIDR is where kwok takes pod IPs from; apart from serviceCIDR so a
	// pod IP is never mistaken for a ClusterIP.
	podCIDR = "10.244.0.1/16"
	// nodeIP is every fake node's InternalIP: the API server reaches kwok's
	// kubelet API (pods/log) there.
	nodeIP = "127.0.0.1"
)

// identity is a static-token user of the API server.
type identity struct {
	user   string
	groups string
	token  string
}

// start runs the control plane and returns once it can run workloads: API
// server ready, nodes Ready and untainted, default ServiceAccount present.
func start(opts Options) (_ *Cluster, err error) {
	if opts.Nodes < 0 {
		return nil, fmt.Errorf("Options.Nodes is %d, want >= 0", opts.Nodes)
	}
	if opts.Nodes == 0 {
		opts.Nodes = 2
	}
	k8sDir, err := findBinaries()
	if err != nil {
		return nil, err
	}
	bin := func(name string) string { return filepath.Join(k8sDir, "bin", name) }

	dir, err := os.MkdirTemp("", "nebula-k8stest-")
	if err != nil {
		return nil, fmt.Errorf("creating the cluster directory: %w", err)
	}
	c := &Cluster{Dir: dir, keepDir: os.Getenv(EnvKeepDir) != ""}
	defer func() {
		if err != nil {
			// The error carries the log tail; the directory goes unless kept.
			// A short grace: a process caught mid-start-up (the API server
			// waiting for etcd) may ignore SIGTERM, and has nothing to save.
			if stopErr := c.stop(time.Second); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
			if c.keepDir {
				err = fmt.Errorf("%w (cluster directory kept: %s)", err, dir)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)

	// Each component gets its own identity so that the audit log tells a
	// test's own writes (AdminUser) from the controllers'.
	admin := identity{user: AdminUser, groups: "system:masters", token: rand.Text()}
	// The controller manager runs all its controllers under this one user,
	// in system:masters: one ServiceAccount per controller
	// (--use-service-account-credentials, as kubeadm does) doubled the
	// start-up time, from about 5 s to 11 s, while the audit log still tells
	// the controllers' writes from a test's.
	kcm := identity{user: ControllerManagerUser, groups: "system:masters", token: rand.Text()}
	sched := identity{user: SchedulerUser, token: rand.Text()}
	kwok := identity{user: KwokUser, groups: "system:masters", token: rand.Text()}
	if err := writeTokenFile(filepath.Join(dir, "tokens.csv"), admin, kcm, sched, kwok); err != nil {
		return nil, err
	}
	if err := writeServiceAccountKeys(filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "audit-policy.yaml"), []byte(auditPolicy), 0o600); err != nil {
		return nil, fmt.Errorf("writing the audit policy: %w", err)
	}
	certDir := filepath.Join(dir, "certs")
	caFile := filepath.Join(certDir, "apiserver.crt")
	for _, id := range []identity{kcm, sched, kwok} {
		if err := writeKubeconfig(filepath.Join(dir, kubeconfigName(id)), c.Server, caFile, id); err != nil {
			return nil, err
		}
	}
	kwokYAML, err := kwokConfig(filepath.Join(k8sDir, "kwok-stages.yaml"), opts.Logs)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "kwok.yaml"), kwokYAML, 0o600); err != nil {
		return nil, fmt.Errorf("writing the kwok configuration: %w", err)
	}

	run := func(name string, args ...string) (*process, error) {
		p, err := startProcess(dir, name, bin(name), args...)
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
		return p, nil
	}

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd, err := run("etcd",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL,
		"--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		// Tests never need to survive a power cut.
		"--unsafe-no-fsync",
	)
	if err != nil {
		return nil, err
	}
	apiserver, err := run("kube-apiserver",
		"--etcd-servers", etcdURL,
		"--secure-port", strconv.Itoa(apiPort),
		"--bind-address", "127.0.0.1",
		"--cert-dir", certDir,
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "Node,RBAC",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-cluster-ip-range", serviceCIDR,
		// kwok's fake kubelets are reached at the node's InternalIP.
		"--kubelet-preferred-address-types", "InternalIP",
		// Product manifests may run privileged pods; a test cluster must
		// admit what a real one would.
		"--allow-privileged=true",
		"--audit-policy-file", filepath.Join(dir, "audit-policy.yaml"),
		"--audit-log-path", c.AuditLog(),
		"--audit-log-format", "json",
		// Blocking: the event is written before the response goes out, so a
		// test that counts writes right after making them sees them all.
		"--audit-log-mode", "blocking",
	)
	if err != nil {
		return nil, err
	}
	if err := waitAPIServer(ctx, c.Server, caFile, admin.token, etcd, apiserver); err != nil {
		return nil, err
	}
	if c.CAData, err = os.ReadFile(caFile); err != nil {
		return nil, fmt.Errorf("reading the API server's CA: %w", err)
	}
	c.Admin = &rest.Config{
		Host:            c.Server,
		BearerToken:     admin.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.CAData},
		// The default 5 QPS throttles tests that create many objects; the
		// API server's own priority and fairness is what a test should meet.
		QPS:   100,
		Burst: 200,
	}
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(c.Admin))
	if err != nil {
		return nil, fmt.Errorf("admin clientset: %w", err)
	}

	kcmProc, err := run("kube-controller-manager",
		"--kubeconfig", filepath.Join(dir, kubeconfigName(kcm)),
		"--authentication-kubeconfig", filepath.Join(dir, kubeconfigName(kcm)),
		"--authorization-kubeconfig", filepath.Join(dir, kubeconfigName(kcm)),
		"--leader-elect=false",
		"--controllers", "*",
		"--service-account-private-key-file", filepath.Join(dir, "sa.key"),
		"--root-ca-file", caFile,
		"--secure-port", "0",
	)
	if err != nil {
		return nil, err
	}
	c.controllerManager = kcmProc
	// Schedulability is not waited for: the scheduler has no start-up work
	// a test could race, and if it is down, pods stay Pending with its log
	// at hand.
	_, err = run("kube-scheduler",
		"--kubeconfig", filepath.Join(dir, kubeconfigName(sched)),
		"--authentication-kubeconfig", filepath.Join(dir, kubeconfigName(sched)),
		"--authorization-kubeconfig", filepath.Join(dir, kubeconfigName(sched)),
		"--leader-elect=false",
		"--secure-port", "0",
	)
	if err != nil {
		return nil, err
	}
	kwokAddr := net.JoinHostPort(nodeIP, strconv.Itoa(kwokPort))
	kwokProc, err := run("kwok",
		"--kubeconfig", filepath.Join(dir, kubeconfigName(kwok)),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", FakeNodeAnnotation+"=fake",
		"--config", filepath.Join(dir, "kwok.yaml"),
		"--cidr", podCIDR,
		"--node-ip", nodeIP,
		// The port kwok writes into each node's status is the one the API
		// server dials for pods/log, so it must be where kwok listens.
		"--node-port", strconv.Itoa(kwokPort),
		"--server-address", kwokAddr,
		// kwok renews each node's Lease, as a kubelet does: without it the
		// node lifecycle controller finds the nodes silent after its grace
		// period (about 50 s) and marks them and their pods not ready, which
		// would end any longer test's rollouts.
		"--node-lease-duration-seconds", "40",
	)
	if err != nil {
		return nil, err
	}

	for i := range opts.Nodes {
		if err := createNode(ctx, cs, fmt.Sprintf("node-%d", i)); err != nil {
			return nil, err
		}
	}
	all := c.procs
	err = waitFor(ctx, all, "the nodes to become Ready and untainted", []*process{kwokProc, kcmProc}, func(ctx context.Context) (bool, error) {
		return nodesReady(ctx, cs, opts.Nodes)
	})
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, all, "the default ServiceAccount in namespace default", []*process{kcmProc}, func(ctx context.Context) (bool, error) {
		return serviceAccountExists(ctx, cs, "default", "default")
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// auditPolicy logs every request at Metadata level: who did what to which
// object, without bodies. RequestReceived is omitted because every request
// also has a later stage and WritesBy reads ResponseComplete only.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
`

func kubeconfigName(id identity) string {
	return strings.ReplaceAll(strings.TrimPrefix(id.user, "system:"), ":", "-") + ".kubeconfig"
}

func writeTokenFile(path string, ids ...identity) error {
	var b strings.Builder
	for _, id := range ids {
		// token,user,uid,"group1,group2"
		fmt.Fprintf(&b, "%s,%s,%s", id.token, id.user, id.user)
		if id.groups != "" {
			fmt.Fprintf(&b, ",%q", id.groups)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	return nil
}

// writeServiceAccountKeys generates the key pair that signs and verifies
// ServiceAccount tokens.
func writeServiceAccountKeys(keyPath, pubPath string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating the service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding the service account public key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return fmt.Errorf("writing the service account key: %w", err)
	}
	if err := os.WriteFile(pubPath, pubPEM, 0o600); err != nil {
		return fmt.Errorf("writing the service account public key: %w", err)
	}
	return nil
}

// writeKubeconfig points a component at the API server. The CA file is named,
// not inlined: the API server writes it only once it runs, after this.
func writeKubeconfig(path, server, caFile string, id identity) error {
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: k8stest
  cluster:
    server: %q
    certificate-authority: %q
users:
- name: %q
  user:
    token: %q
contexts:
- name: k8stest
  context:
    cluster: k8stest
    user: %q
current-context: k8stest
`, server, caFile, id.user, id.token, id.user)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// kwokConfig is the fast node and pod Stages, the slow ones of podStages,
// and one ClusterLogs object per LogFile.
func kwokConfig(stagesPath string, logs []LogFile) ([]byte, error) {
	stages, err := os.ReadFile(stagesPath)
	if err != nil {
		return nil, fmt.Errorf("reading kwok's stages: %w", err)
	}
	all, err := podStages(string(stages))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", stagesPath, err)
	}
	var b strings.Builder
	b.WriteString(all)
	for i, l := range logs {
		if l.Path == "" {
			return nil, fmt.Errorf("Options.Logs[%d] has no Path", i)
		}
		path, err := filepath.Abs(l.Path)
		if err != nil {
			return nil, fmt.Errorf("Options.Logs[%d]: %w", i, err)
		}
		fmt.Fprintf(&b, "\n---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: ClusterLogs\nmetadata:\n  name: k8stest-logs-%d\nspec:\n", i)
		if l.Namespace != "" {
			fmt.Fprintf(&b, "  selector:\n    matchNamespaces: [%q]\n", l.Namespace)
		}
		b.WriteString("  logs:\n")
		if l.Container != "" {
			fmt.Fprintf(&b, "  - containers: [%q]\n    logsFile: %q\n", l.Container, path)
		} else {
			fmt.Fprintf(&b, "  - logsFile: %q\n", path)
		}
		b.WriteString("    follow: true\n")
	}
	return []byte(b.String()), nil
}

// freePorts finds n distinct free ports on 127.0.0.1 by holding n listeners
// open at once; another process may still take one before its user binds it,
// which on a test machine is rare enough to accept.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitAPIServer polls /readyz with the admin token, verifying the serving
// certificate against the CA the API server writes into --cert-dir.
func waitAPIServer(ctx context.Context, server, caFile, token string, etcd, apiserver *process) error {
	var lastErr error
	for {
		for _, p := range []*process{etcd, apiserver} {
			if err := p.exitError(); err != nil {
				return err
			}
		}
		lastErr = readyz(ctx, server, caFile, token)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the API server's /readyz: %v; the end of %s:\n%s\nthe end of %s:\n%s",
				lastErr, filepath.Base(apiserver.logPath), apiserver.tail(), filepath.Base(etcd.logPath), etcd.tail())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func readyz(ctx context.Context, server, caFile, token string) error {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("no serving certificate yet: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("no certificate in %s yet", caFile)
	}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

// waitFor polls cond until it holds, failing early with the log of any
// process that exits and, on timeout, with the logs of the processes blamed
// for what did not happen.
func waitFor(ctx context.Context, all []*process, what string, blame []*process, cond func(context.Context) (bool, error)) error {
	var lastErr error
	for {
		for _, p := range all {
			if err := p.exitError(); err != nil {
				return fmt.Errorf("waiting for %s: %w", what, err)
			}
		}
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("timed out waiting for %s", what)
			if lastErr != nil {
				msg += fmt.Sprintf(" (last error: %v)", lastErr)
			}
			for _, p := range blame {
				msg += fmt.Sprintf("\nthe end of %s:\n%s", filepath.Base(p.logPath), p.tail())
			}
			return errors.New(msg)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// createNode registers a fake node for kwok. It carries no taint: a cluster
// of fake nodes only has no real pods to keep away, and product manifests
// must not need test-only tolerations.
func createNode(ctx context.Context, cs kubernetes.Interface, name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{FakeNodeAnnotation: "fake"},
			Labels: map[string]string{
				"kubernetes.io/os":       "linux",
				"kubernetes.io/hostname": name,
				"type":                   "kwok",
			},
		},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	return nil
}

// nodesReady reports whether n nodes are Ready and carry no taints; the
// node lifecycle controller removes the not-ready taint the API server adds
// at creation only after the node turns Ready, and until then the scheduler
// would leave pods Pending.
func nodesReady(ctx context.Context, cs kubernetes.Interface, n int) (bool, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err
	}
	ready := 0
	for _, node := range nodes.Items {
		if len(node.Spec.Taints) > 0 {
			continue
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	return ready >= n, nil
}

func serviceAccountExists(ctx context.Context, cs kubernetes.Interface, namespace, name string) (bool, error) {
	_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
