package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type cp struct {
	t     *testing.T
	url   string
	token string
}

func (c cp) do(method, path string, body any, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+"/api/v1/orgs/acme"+path, rd)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(c.t, json.Unmarshal(b, out), string(b))
	}
	if resp.StatusCode >= 300 {
		c.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// pageItems decodes the items of a list's page ({"items": [...], "next"}) into v.
func pageItems(v any) any {
	return &struct {
		Items any `json:"items"`
	}{v}
}

type runningAgent struct {
	name   string
	a      *agent.Agent
	cancel context.CancelFunc
	done   chan error
}

// agentBinding is what the install manifest has the agent bind in each
// namespace it creates.
var agentBinding = &reconcile.Binding{ClusterRole: agentinstall.WorkloadRole, Namespace: agentinstall.AgentNamespace, ServiceAccount: agentinstall.AgentName}

// startAgent runs an agent replica with the test's short timings (a 1 s
// retire grace among them).
func startAgent(t *testing.T, k *k8stest.Cluster, url, joinToken, name string, more ...func(*agent.Config)) *runningAgent {
	t.Helper()
	// The agent authenticates as the manifest's service account: its RBAC is
	// what is exercised.
	cs, err := kubernetes.NewForConfig(k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))
	require.NoError(t, err)
	store := agent.SecretStore{Client: cs, Namespace: agentinstall.AgentNamespace, Name: name + "-credential"}
	ctx, cancel := context.WithCancel(context.Background())
	cred, err := store.Load(ctx)
	require.NoError(t, err)
	if cred == "" {
		reg, err := transport.Register(ctx, url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: name})
		require.NoError(t, err)
		require.NoError(t, store.Save(ctx, reg.Credential))
		cred = reg.Credential
	}
	cfg := agent.Config{
		Link:     transport.ClientConfig{URL: url, Credential: cred, AllowPlain: true, MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Heartbeat: time.Second},
		Client:   cs,
		Version:  "1.0.0",
		Identity: name, LeaseNamespace: agentinstall.AgentNamespace, LeaseName: agentinstall.AgentName,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ReportEvery: time.Second, RetireGrace: time.Second,
		Binding: agentBinding,
	}
	for _, f := range more {
		f(&cfg)
	}
	a, err := agent.New(cfg)
	require.NoError(t, err)
	ra := &runningAgent{name: name, a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ra.done })
	return ra
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// TestEndToEnd brings up the control plane, a real Kubernetes cluster and two
// agent replicas installed from the product's manifest; creates an environment
// with services and domains through the API; sees Deployments, Services,
// Ingresses and Ready pods appear; changes a variable and sees exactly that
// service roll; deletes a referenced service and sees its dependant held and
// untouched; stops the control plane, sees nothing change in the cluster,
// restarts it, and converges; kills the leader and sees the other take over.
func TestEndToEnd(t *testing.T) {
	ns := desiredstate.Namespace("acme", "shop", "staging")
	logFile := filepath.Join(t.TempDir(), "api.log")
	require.NoError(t, os.WriteFile(logFile, []byte(time.Now().UTC().Format(time.RFC3339Nano)+" stdout F hello from api\n"), 0o644))
	k := k8stest.Start(t, k8stest.Options{Nodes: 2, Logs: []k8stest.LogFile{{Namespace: ns, Container: "web", Path: logFile}}})
	admin := k.Client(t)
	ctx := context.Background()

	host := registrytest.Start(t, "api:v1", "worker:v1", "db:v1")
	addr := freeAddr(t)
	srv := servertest.Start(t, servertest.Options{Insecure: []string{host}, Listen: addr})
	c := cp{t: t, url: srv.URL, token: srv.Setup(t, "root@example.com", "acme")}

	var cluster api.ClusterResponse
	require.Equal(t, 201, c.do("POST", "/clusters", map[string]string{"name": "eu-1"}, &cluster))
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: srv.URL, JoinToken: cluster.JoinToken.Token, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)

	require.Equal(t, 201, c.do("POST", "/projects", map[string]string{"name": "shop"}, nil))
	require.Equal(t, 201, c.do("POST", "/projects/shop/environments", map[string]string{"name": "staging", "cluster": "eu-1"}, nil))
	for _, s := range []map[string]any{
		{"name": "api", "image": host + "/api:v1", "port": 8080, "replicas": 2},
		{"name": "worker", "image": host + "/worker:v1"},
		{"name": "db", "image": host + "/db:v1", "port": 5432},
	} {
		require.Equal(t, 201, c.do("POST", "/projects/shop/services", s, nil))
	}
	env := "/projects/shop/environments/staging/services/"
	require.Equal(t, 200, c.do("PUT", env+"db/variables", map[string]any{"variables": []map[string]any{{"name": "POSTGRES_PASSWORD", "value": "pw-s3cret-value", "secret": true}}}, nil))
	require.Equal(t, 200, c.do("PUT", env+"api/variables", map[string]any{"variables": []map[string]any{
		{"name": "DB_HOST", "value": "${{ db.HOST }}"}, {"name": "DB_PASSWORD", "value": "${{ db.POSTGRES_PASSWORD }}"}}}, nil))
	require.Equal(t, 200, c.do("PUT", env+"worker/variables", map[string]any{"variables": []map[string]any{{"name": "QUEUE", "value": "jobs"}}}, nil))
	require.Equal(t, 201, c.do("POST", env+"api/domains", map[string]string{"host": "api.example.com"}, nil))
	for _, s := range []string{"api", "worker", "db"} {
		require.Equal(t, 202, c.do("POST", env+s+"/deployments", map[string]string{}, nil))
	}

	a0 := startAgent(t, k, srv.URL, cluster.JoinToken.Token, "nebulactrl-agent-0")
	a1 := startAgent(t, k, srv.URL, cluster.JoinToken.Token, "nebulactrl-agent-1")

	ready := func(name string) bool {
		d, err := admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == *d.Spec.Replicas && *d.Spec.Replicas > 0
	}
	require.Eventually(t, func() bool { return ready("api-web-r1") && ready("worker-web-r1") && ready("db-web-r1") },
		90*time.Second, 200*time.Millisecond, "Deployments appear and their pods become Ready")
	// The Service and Ingress come once the pods are ready (the rollout's switch).
	var ings *networkingv1.IngressList
	require.Eventually(t, func() bool {
		_, err := admin.CoreV1().Services(ns).Get(ctx, "api", metav1.GetOptions{})
		ings, _ = admin.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		return err == nil && ings != nil && len(ings.Items) == 1
	}, 30*time.Second, 200*time.Millisecond, "the Service and Ingress appear at the switch")
	require.Equal(t, "api.example.com", ings.Items[0].Spec.Rules[0].Host)
	// The leader reports nodes, workloads and container logs.
	require.Eventually(t, func() bool {
		var ws []struct {
			Service        string
			Release, Ready int
		}
		c.do("GET", "/projects/shop/environments/staging/workloads", nil, pageItems(&ws))
		for _, w := range ws {
			if w.Service == "api" && w.Release == 1 && w.Ready == 2 {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "workloads are reported")
	var nodes []struct {
		Name  string
		Ready bool
	}
	require.Eventually(t, func() bool {
		c.do("GET", "/clusters/eu-1/nodes", nil, pageItems(&nodes))
		return len(nodes) == 2 && nodes[0].Ready
	}, 30*time.Second, 200*time.Millisecond)
	require.Eventually(t, func() bool {
		var page struct{ Items []struct{ Text string } }
		c.do("GET", env+"api/logs", nil, &page)
		for _, l := range page.Items {
			if l.Text == "hello from api" {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "container logs arrive through the pods/log API")

	// A warning about a managed object is reported too.
	_, err = admin.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "api-web-r1.warning", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: ns, Name: "api-web-r1", APIVersion: "apps/v1"},
		Reason:         "ProbeFailed", Message: "readiness probe failed", Type: corev1.EventTypeWarning, Count: 1,
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Source: corev1.EventSource{Component: "test"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var evs []struct{ Object, Reason string }
		c.do("GET", "/clusters/eu-1/events", nil, pageItems(&evs))
		for _, e := range evs {
			if e.Reason == "ProbeFailed" && e.Object == "deployment/api-web-r1" {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "warning events of managed objects are reported")

	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, "api-r1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "pw-s3cret-value", string(sec.Data["DB_PASSWORD"]), "secrets reach the cluster only as Kubernetes Secrets")
	require.Equal(t, "db."+ns+".svc.cluster.local", string(sec.Data["DB_HOST"]))

	rv := func(kind, name string) string {
		var obj metav1.Object
		var err error
		switch kind {
		case "deployment":
			obj, err = admin.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		case "service":
			obj, err = admin.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		case "ingress":
			var ing *networkingv1.Ingress
			ing, err = admin.NetworkingV1().Ingresses(ns).Get(ctx, name, metav1.GetOptions{})
			obj = ing
		}
		if err != nil {
			return "gone: " + err.Error()
		}
		return obj.GetResourceVersion()
	}
	apiRV, dbRV := rv("deployment", "api-web-r1"), rv("deployment", "db-web-r1")

	// A variable change rolls exactly that service.
	require.Equal(t, 200, c.do("PUT", env+"worker/variables", map[string]any{"variables": []map[string]any{{"name": "QUEUE", "value": "urgent"}}}, nil))
	require.Eventually(t, func() bool {
		_, err := admin.AppsV1().Deployments(ns).Get(ctx, "worker-web-r1", metav1.GetOptions{})
		return ready("worker-web-r2") && apierrors.IsNotFound(err)
	}, 60*time.Second, 200*time.Millisecond, "the worker rolls to release 2 and release 1 is pruned")
	require.Equal(t, apiRV, rv("deployment", "api-web-r1"), "api did not roll")
	require.Equal(t, dbRV, rv("deployment", "db-web-r1"), "db did not roll")

	// Deleting the referenced service holds its dependant, untouched.
	require.Equal(t, 204, c.do("DELETE", "/projects/shop/services/db", nil, nil))
	require.Eventually(t, func() bool {
		_, err := admin.AppsV1().Deployments(ns).Get(ctx, "db-web-r1", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 60*time.Second, 200*time.Millisecond, "the deleted service is pruned")
	require.Equal(t, apiRV, rv("deployment", "api-web-r1"), "the held service is untouched")
	var acks []struct {
		Server   string `json:"server"`
		Revision int    `json:"revision"`
		Ignored  bool   `json:"ignored"`
		Services []transport.ServiceOutcome
	}
	require.Eventually(t, func() bool {
		c.do("GET", "/projects/shop/environments/staging/acknowledgements", nil, pageItems(&acks))
		for _, a := range acks {
			for _, s := range a.Services {
				if s.Service == "api" && s.State == "held" && strings.Contains(s.Reason, "db") {
					return true
				}
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "the acknowledgement says api is held, and why")

	// With the control plane stopped, the cluster keeps serving and nothing changes.
	srv.Stop()
	stopped := time.Now()
	time.Sleep(3 * time.Second)
	for _, a := range []*runningAgent{a0, a1} {
		require.Empty(t, workloadWrites(k.WritesBy(t, k8stest.ServiceAccountUser(agentinstall.AgentNamespace, agentinstall.AgentName), stopped)),
			"agent %s changed the cluster while the control plane was down", a.name)
	}
	require.True(t, ready("api-web-r1") && ready("worker-web-r2"))

	// Restarted, with a change made meanwhile, it converges.
	srv = servertest.Start(t, servertest.Options{DatabaseURL: srv.DatabaseURL, SecretKey: srv.SecretKey, Insecure: []string{host}, Listen: addr})
	c.url = srv.URL
	require.Equal(t, 200, c.do("PUT", env+"worker/variables", map[string]any{"variables": []map[string]any{{"name": "QUEUE", "value": "later"}}}, nil))
	require.Eventually(t, func() bool { return ready("worker-web-r3") }, 60*time.Second, 200*time.Millisecond, "after the restart the cluster converges")

	// Kill the leader: the other replica takes over.
	leader, other := a0, a1
	require.Eventually(t, func() bool { return a0.a.Leader() || a1.a.Leader() }, 10*time.Second, 50*time.Millisecond)
	if a1.a.Leader() {
		leader, other = a1, a0
	}
	leader.cancel()
	<-leader.done
	leader.done <- nil // for the cleanup
	require.Eventually(t, other.a.Leader, 20*time.Second, 100*time.Millisecond, "the standby takes over")
	require.Equal(t, 200, c.do("PUT", env+"worker/variables", map[string]any{"variables": []map[string]any{{"name": "QUEUE", "value": "after-failover"}}}, nil))
	require.Eventually(t, func() bool { return ready("worker-web-r4") }, 60*time.Second, 200*time.Millisecond, "the new leader reconciles")
}

// workloadWrites leaves out the leader election's Lease renewals, which go on
// while the control plane is down: they change nothing that runs.
func workloadWrites(events []k8stest.AuditEvent) []string {
	var out []string
	for _, e := range events {
		if e.Resource != "leases" {
			out = append(out, fmt.Sprintf("%s %s %s/%s", e.Verb, e.Resource, e.Namespace, e.Name))
		}
	}
	return out
}

// The manifest's RBAC is what the agent needs, rule by rule: without the
// Ingress rule of the workload role it binds in the namespace, the services
// with domains fail with Forbidden, the others apply.
func TestManifestRBACWithoutOneRule(t *testing.T) {
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	ctx := context.Background()
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_x", Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	role, err := admin.RbacV1().ClusterRoles().Get(ctx, agentinstall.WorkloadRole, metav1.GetOptions{})
	require.NoError(t, err)
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if len(r.APIGroups) == 1 && r.APIGroups[0] == "networking.k8s.io" {
			continue
		}
		kept = append(kept, r)
	}
	require.Len(t, kept, len(role.Rules)-1)
	role.Rules = kept
	_, err = admin.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
	require.NoError(t, err)

	cs, err := kubernetes.NewForConfig(k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))
	require.NoError(t, err)
	r, err := reconcile.New(reconcile.Config{Client: cs, Binding: agentBinding})
	require.NoError(t, err)
	doc := desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{
		OrgID: "00000000-0000-4000-8000-000000000001", Org: "acme", ProjectID: "00000000-0000-4000-8000-000000000002", Project: "shop",
		ID: "00000000-0000-4000-8000-000000000003", Name: "staging", ClusterID: "00000000-0000-4000-8000-000000000004",
		Namespace: desiredstate.Namespace("acme", "shop", "staging")},
		Services: []desiredstate.Service{
			{ID: "00000000-0000-4000-8000-000000000010", Name: "api", Release: &desiredstate.Release{ID: "r1", Number: 1, Image: "registry.example.com/api@sha256:" + strings.Repeat("a", 64)},
				Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 1}}, Domains: []string{"api.example.com"}},
			{ID: "00000000-0000-4000-8000-000000000011", Name: "worker", Release: &desiredstate.Release{ID: "r2", Number: 1, Image: "registry.example.com/worker@sha256:" + strings.Repeat("b", 64)},
				Processes: []desiredstate.Process{{Name: "worker", Replicas: 1}}},
		}}
	res, err := r.Apply(ctx, 1, "h", doc)
	require.NoError(t, err)
	outcomes := map[string]reconcile.Outcome{}
	for _, o := range res.Services {
		outcomes[o.Service] = o
	}
	require.Equal(t, reconcile.StateFailed, outcomes["api"].State)
	require.Contains(t, strings.ToLower(outcomes["api"].Reason), "forbidden")
	require.Equal(t, reconcile.StateApplied, outcomes["worker"].State, "everything else the manifest allows")
}
