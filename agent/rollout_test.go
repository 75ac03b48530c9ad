package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The agent's side of rollouts against a real Kubernetes control plane (one
// cluster for the subtests): deliveries acknowledged, rollouts carried on by
// the progress loop without new revisions, stage reports in order through
// the outbox, traffic only to ready pods, transient errors retried before
// the acknowledgement. The link itself is not used: the test calls what the
// transport client calls (apply, hello, the connected hook) and reads the
// outbox it would drain.
func TestAgentRollouts(t *testing.T) {
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})

	t.Run("StagesInOrderAndTrafficOnlyToReadyPods", func(t *testing.T) {
		t.Parallel()
		ns := k.Namespace(t)
		rig := newRig(t, k, ns, nil)
		endpoints := k.WatchEndpoints(t, ns, "shop")

		ack := rig.a.apply(t.Context(), delivery(ns, 1, 1, "registry.example/acme/shop:1"))
		require.Equal(t, []transport.ServiceOutcome{{Service: "shop", State: "applied"}}, ack.Services)
		require.False(t, ack.Ignored)
		require.Equal(t, []string{"dep-1 starting", "dep-1 probing", "dep-1 switching", "dep-1 retiring", "dep-1 succeeded"},
			rig.stagesUntil(t, "dep-1", transport.StageSucceeded, 60*time.Second))

		// Release 2's pods take 5 s to become ready: it probes, then
		// switches, then release 1 retires after the grace period.
		began := time.Now()
		ack = rig.a.apply(t.Context(), delivery(ns, 2, 2, "registry.example/acme/shop-"+k8stest.SlowReady+":2"))
		require.Equal(t, []transport.ServiceOutcome{{Service: "shop", State: "applied"}}, ack.Services)
		var probing []transport.StageReport
		var order []string
		for _, r := range rig.reportsUntil(t, "dep-2", transport.StageSucceeded, 60*time.Second) {
			if len(order) == 0 || order[len(order)-1] != r.Stage {
				order = append(order, r.Stage)
			}
			if r.Stage == transport.StageProbing {
				probing = append(probing, r)
			}
			if r.Stage == transport.StageSwitching {
				// The endpoint watch checks that no pod served before it
				// was ready; this, that the switch waited for them.
				require.GreaterOrEqual(t, r.Time.Sub(began), k8stest.SlowReadyDelay-time.Second, "the switch waits for the pods")
				require.Equal(t, 2, r.Ready)
			}
		}
		require.Equal(t, []string{"starting", "probing", "switching", "retiring", "succeeded"}, order)
		t.Logf("release 2: %d probing reports, succeeded after %v; last probing: %+v", len(probing), time.Since(began).Round(time.Millisecond), probing[len(probing)-1])
		require.Equal(t, 2, probing[0].Desired)
		require.Equal(t, "2", selected(t, rig.admin, ns))
		require.Positive(t, endpoints.Events())

		// Settled: the progress loop stops, and nothing is written.
		require.Eventually(t, func() bool { return rig.idle() }, 5*time.Second, 50*time.Millisecond, "no pass is due once settled")
		since := time.Now()
		time.Sleep(time.Second)
		require.Empty(t, k.WritesBy(t, rig.user, since), "a settled environment costs no write")

		// After a reconnect, the rollout that just finished is reported again.
		rig.a.onConnected()
		require.Equal(t, []string{"dep-2 succeeded"}, rig.stagesUntil(t, "dep-2", transport.StageSucceeded, 5*time.Second))

		// A replica that has just started asks for the applied revision
		// again, so that it holds its document; this one holds it.
		env := "env-" + ns
		require.Equal(t, 2, rig.a.hello(t.Context()).Applied[env])
		fresh := newRig(t, k, ns, nil)
		require.Equal(t, 1, fresh.a.hello(t.Context()).Applied[env])
		// Given it, it passes over it: nothing to do, nothing written, its
		// end reported once.
		since = time.Now()
		ack = fresh.a.apply(t.Context(), delivery(ns, 2, 2, "registry.example/acme/shop-"+k8stest.SlowReady+":2"))
		require.Equal(t, []transport.ServiceOutcome{{Service: "shop", State: "applied"}}, ack.Services)
		require.Equal(t, []string{"dep-2 succeeded"}, fresh.stagesUntil(t, "dep-2", transport.StageSucceeded, 5*time.Second))
		require.Empty(t, k.WritesBy(t, fresh.user, since))
		require.Equal(t, 2, fresh.a.hello(t.Context()).Applied[env])
	})

	t.Run("TransientErrorsAreRetriedBeforeTheAcknowledgement", func(t *testing.T) {
		t.Parallel()
		ns := k.Namespace(t)
		// The real clientset's HTTP transport, wrapped: the first three
		// Deployment applies get a 503, as from an overloaded API server.
		var failed atomic.Int32
		rig := newRig(t, k, ns, func(rt http.RoundTripper) http.RoundTripper {
			return roundTripper(func(req *http.Request) (*http.Response, error) {
				if req.Method == http.MethodPatch && strings.Contains(req.URL.Path, "/deployments/") && failed.Add(1) <= 3 {
					return unavailable(req), nil
				}
				return rt.RoundTrip(req)
			})
		})
		began := time.Now()
		ack := rig.a.apply(t.Context(), delivery(ns, 1, 1, "registry.example/acme/shop:1"))
		require.Equal(t, []transport.ServiceOutcome{{Service: "shop", State: "applied"}}, ack.Services,
			"acknowledged once through, never as failed")
		require.GreaterOrEqual(t, failed.Load(), int32(4), "three refused applies, then one through")
		t.Logf("applied after %v, with 3 transient errors", time.Since(began).Round(time.Millisecond))
		rev, _, err := rig.a.rec.AppliedRevision(t.Context(), ns)
		require.NoError(t, err)
		require.Equal(t, 1, rev)
		require.Equal(t, []string{"dep-1 starting", "dep-1 probing", "dep-1 switching", "dep-1 retiring", "dep-1 succeeded"},
			rig.stagesUntil(t, "dep-1", transport.StageSucceeded, 60*time.Second))

		// A permanent error is acknowledged as failed, with its reason.
		ds := delivery(ns, 2, 2, "registry.example/acme/shop:2")
		ds.Document.Services[0].Variables = []desiredstate.Variable{{Name: "TOKEN", Secret: &desiredstate.Sealed{DataKeyID: "dk", Ciphertext: []byte("x")}}}
		ack = rig.a.apply(t.Context(), ds)
		require.Equal(t, []transport.ServiceOutcome{{Service: "shop", State: "failed", Reason: "variable TOKEN: secret not opened"}}, ack.Services)
	})
}

// rig is an agent under test, leading, with its progress and send loops
// running, and the outbox the link would drain.
type rig struct {
	a     *Agent
	admin kubernetes.Interface
	user  string
	seen  []transport.StageReport
}

func newRig(t *testing.T, k *k8stest.Cluster, ns string, wrap func(http.RoundTripper) http.RoundTripper) *rig {
	t.Helper()
	admin := k.Client(t)
	name := fmt.Sprintf("agent-%d", time.Now().UnixNano()%1e6)
	cfg := k.ServiceAccountConfig(t, ns, name)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.WrapTransport = wrap
	// The agent's own identity, so that the audit log tells its writes; its
	// rights do not matter here (the end-to-end test runs the manifest's).
	binding := ns + "-" + name
	_, err := admin.RbacV1().ClusterRoleBindings().Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
		return err == nil
	}, 15*time.Second, 100*time.Millisecond, "RBAC grants take effect")

	a, err := New(Config{
		Link:   transport.ClientConfig{URL: "https://nebula.example.com", Credential: "unused"},
		Client: cs, Version: "test", Identity: name,
		RetireGrace: time.Second, ProgressEvery: 200 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 400 * time.Millisecond,
	})
	require.NoError(t, err)
	a.leader.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { a.progressLoop(ctx); done <- struct{}{} }()
	go func() { a.sendLoop(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
	return &rig{a: a, admin: admin, user: k8stest.ServiceAccountUser(ns, name)}
}

// reportsUntil reads stage reports of dep from the outbox until one says
// stage, and returns them; other frames are dropped.
func (r *rig) reportsUntil(t *testing.T, dep, stage string, within time.Duration) []transport.StageReport {
	t.Helper()
	var out []transport.StageReport
	deadline := time.After(within)
	for {
		select {
		case <-deadline:
			t.Fatalf("no %s report of %s within %v; got %v", stage, dep, within, stagesOf(out))
		case rep := <-r.a.outbox:
			sr, ok := rep.Payload.(transport.StageReport)
			if rep.Type != transport.TypeStage || !ok || sr.DeploymentID != dep {
				continue
			}
			out = append(out, sr)
			if sr.Stage == stage {
				return out
			}
		}
	}
}

// stagesUntil is reportsUntil as "dep stage" lines, without consecutive
// repeats (probing is reported again as pods become ready).
func (r *rig) stagesUntil(t *testing.T, dep, stage string, within time.Duration) []string {
	t.Helper()
	var out []string
	for _, s := range r.reportsUntil(t, dep, stage, within) {
		line := s.DeploymentID + " " + s.Stage
		if len(out) == 0 || out[len(out)-1] != line {
			out = append(out, line)
		}
	}
	return out
}

// idle reports whether no pass is due.
func (r *rig) idle() bool {
	r.a.mu.Lock()
	defer r.a.mu.Unlock()
	return len(r.a.due) == 0
}

// delivery is revision rev of an environment in ns with one service, shop,
// whose web process listens, at release n of image (deployment dep-n).
func delivery(ns string, rev, n int, image string) transport.DesiredState {
	doc := desiredstate.Document{
		SchemaVersion: desiredstate.SchemaVersion,
		Environment: desiredstate.Environment{OrgID: "org", Org: "acme", ProjectID: "prj", Project: "shop",
			ID: "env-" + ns, Name: "production", ClusterID: "c1", Namespace: ns},
		Services: []desiredstate.Service{{
			ID: "svc-shop", Name: "shop",
			Release:   &desiredstate.Release{ID: fmt.Sprintf("rel-%d", n), Number: n, Image: image, DeploymentID: fmt.Sprintf("dep-%d", n)},
			Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 2}},
		}},
	}
	hash, err := doc.Hash()
	if err != nil {
		panic(err)
	}
	return transport.DesiredState{EnvironmentID: doc.Environment.ID, Revision: rev, Hash: hash, Document: doc}
}

func selected(t *testing.T, cs kubernetes.Interface, ns string) string {
	t.Helper()
	svc, err := cs.CoreV1().Services(ns).Get(t.Context(), "shop", metav1.GetOptions{})
	require.NoError(t, err)
	return svc.Spec.Selector[releaseKey]
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// unavailable is the API server's answer when it cannot take a request.
func unavailable(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}
}
