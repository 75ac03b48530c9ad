package console_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent"
	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

// startRealAgent runs the real agent (package agent: the reconciler and the
// transport client) in process, as the manifest's service account, against
// the test's Kubernetes API server.
func startRealAgent(t *testing.T, k *k8stest.Cluster, url, joinToken string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))
	require.NoError(t, err)
	reg, err := transport.Register(t.Context(), url, nil, transport.RegisterRequest{JoinToken: joinToken, Name: "nebulactrl-agent-0"})
	require.NoError(t, err)
	a, err := agent.New(agent.Config{
		Link:     transport.ClientConfig{URL: url, Credential: reg.Credential, AllowPlain: true, MinBackoff: 100 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Heartbeat: time.Second},
		Client:   cs,
		Version:  "1.0.0",
		Identity: "nebulactrl-agent-0", LeaseNamespace: agentinstall.AgentNamespace, LeaseName: agentinstall.AgentName,
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
		ReportEvery: time.Second, RetireGrace: time.Second,
		Binding: &reconcile.Binding{ClusterRole: agentinstall.WorkloadRole, Namespace: agentinstall.AgentNamespace, ServiceAccount: agentinstall.AgentName},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestConsoleDeploymentOnKubernetes watches a deployment's page while the
// real agent rolls it out on the Kubernetes test cluster (k8stest: a real
// kube-apiserver, etcd and kwok nodes): the stages arrive on the page
// without a reload, up to succeeded with every pod ready.
func TestConsoleDeploymentOnKubernetes(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	host := registrytest.Start(t, "api:v1")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	srv := servertest.Start(t, servertest.Options{Insecure: []string{host}, Listen: addr})
	admin := srv.Setup(t, "ada@example.com", "acme")

	var cl struct {
		JoinToken struct{ Token string } `json:"joinToken"`
	}
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", admin, map[string]any{"name": "eu-1"}, &cl))
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: srv.URL, JoinToken: cl.JoinToken.Token, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, k.Client(t), manifest, installtest.NoAgentPod) // the agent runs in process
	startRealAgent(t, k, srv.URL, cl.JoinToken.Token)
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects", admin, map[string]any{"name": "shop"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/environments", admin, map[string]any{"name": "staging", "cluster": "eu-1"}, nil))
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/projects/shop/services", admin,
		map[string]any{"name": "api", "image": host + "/api:v1", "port": 8080, "replicas": 2}, nil))

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", "/o/acme/p/shop/e/staging/s/api", "#deploy-form")
	b.submit("#deploy", "#stages")
	eval[bool](b, "window.__sameDocument = true; true")
	b.waitJS(`document.querySelector('#dep-status').innerText === 'succeeded' && document.querySelector('#stages').innerText.includes('succeeded')`, "the rollout succeeds on the page")
	require.True(t, eval[bool](b, "window.__sameDocument === true"), "the stages arrived without a reload")
	stages := b.text("#stages")
	for _, s := range []string{"delivering", "starting", "succeeded"} {
		require.Contains(t, stages, s)
	}
	require.Equal(t, "2/2", b.text("#dep-pods"))
	b.visit("deployment-kubernetes")
}
