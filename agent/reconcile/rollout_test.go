package reconcile_test

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
)

// shop is an environment of one service, "shop", whose web process listens
// on 8080 with two replicas, at release n of image.
func shop(ns string, n int, image string) desiredstate.Document {
	return desiredstate.Document{
		SchemaVersion: desiredstate.SchemaVersion,
		Environment: desiredstate.Environment{
			OrgID: "0b0a3a44-org", Org: "acme", ProjectID: "7f1e-project", Project: "shop",
			ID: "9a7e-env", Name: "production", ClusterID: "c1", Namespace: ns,
		},
		Services: []desiredstate.Service{{
			ID: "svc-shop", Name: "shop",
			Release: &desiredstate.Release{ID: fmt.Sprintf("rel-%d", n), Number: n, Image: image, DeploymentID: fmt.Sprintf("dep-%d", n)},
			Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 2,
				HealthCheck: &desiredstate.HealthCheck{Path: "/healthz", Port: 8080}}},
			Variables: []desiredstate.Variable{{Name: "RELEASE", Value: fmt.Sprint(n)}},
			Domains:   []string{"shop.example.com"},
		}},
	}
}

// Image references the kwok Stages of k8stest recognise.
var (
	fastImage  = "registry.example/acme/shop@sha256:" + strings.Repeat("a", 64)
	slowImage  = "registry.example/acme/shop-" + k8stest.SlowReady + ":2"
	neverImage = "registry.example/acme/shop-" + k8stest.NeverReady + ":2"
)

// selectedRelease is the release the shop Service's selector names.
func (b *bundle) selectedRelease(t *testing.T) string {
	t.Helper()
	svc, err := b.admin.CoreV1().Services(b.ns).Get(t.Context(), "shop", metav1.GetOptions{})
	require.NoError(t, err)
	return svc.Spec.Selector["nebulactrl.io/release"]
}

// podsOf returns the names of the shop pods of a release.
func (b *bundle) podsOf(t *testing.T, release int) []string {
	t.Helper()
	pods, err := b.admin.CoreV1().Pods(b.ns).List(t.Context(), metav1.ListOptions{
		LabelSelector: fmt.Sprintf("nebulactrl.io/service=shop,nebulactrl.io/release=%d", release)})
	require.NoError(t, err)
	var out []string
	for _, p := range pods.Items {
		out = append(out, p.Name)
	}
	return out
}

// A release whose pods never become ready stays probing, with the reason
// from the pods, while the Service keeps sending traffic to the old
// release; the document naming the old release again (the control plane
// giving up) removes the new release and never moves traffic.
func TestNeverReadyReleaseKeepsTrafficOnTheOldOneAndGoingBackRemovesIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	endpoints := b.cluster.WatchEndpoints(t, b.ns, "shop")
	one := shop(b.ns, 1, fastImage)
	a.converge(t, 1, one, 60*time.Second)
	require.Equal(t, "1", b.selectedRelease(t))
	r1Pods := b.podsOf(t, 1)
	require.Eventually(t, func() bool { return fmt.Sprint(endpoints.Pods()) == fmt.Sprint(r1Pods) },
		30*time.Second, 100*time.Millisecond, "the Service's endpoints are release 1's pods")

	two := shop(b.ns, 2, neverImage)
	r := a.reconciler(t)
	var last reconcile.Rollout
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		res := applyWith(t, r, 2, two)
		require.False(t, res.Settled)
		last = rollout(t, res, "shop")
		require.Equal(t, reconcile.StageProbing, last.Stage, "pass %d", i)
		require.Equal(t, "dep-2", last.DeploymentID)
		require.Equal(t, 2, last.Desired)
		require.Zero(t, last.Ready)
		require.Equal(t, "1", b.selectedRelease(t), "traffic stays on release 1")
		if last.Detail == "Readiness probe failed: HTTP probe failed with statuscode: 503 (2 pods)" {
			break
		}
		require.True(t, time.Now().Before(deadline), "the detail says why the pods are not ready; last: %q", last.Detail)
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("probing detail: %q", last.Detail)
	require.Len(t, b.podsOf(t, 2), 2, "release 2's pods run")
	require.Equal(t, r1Pods, endpoints.Pods(), "no pod of release 2 gets traffic")
	require.Contains(t, b.objects(t, "shop"), "Deployment/shop-web-r1")

	// The control plane gives up: revision 3 names release 1 again, with its
	// deployment. (Past the grace period after release 1's switch, release 2
	// goes at once.)
	time.Sleep(testGrace)
	since := time.Now()
	res, seen := a.converge(t, 3, one, 30*time.Second)
	require.Equal(t, []string{reconcile.StageSucceeded}, seen["shop"], "release 1 serves throughout: nothing to wait for")
	ro := rollout(t, res, "shop")
	require.Equal(t, "dep-1", ro.DeploymentID)
	require.True(t, ro.Changed, "release 2 was removed")
	require.Equal(t, lines(fmt.Sprintf(`
		delete deployments shop-web-r2
		delete secrets shop-r2
		patch namespaces %s`, b.ns)), a.writes(t, since), "only release 2 goes; release 1 is not touched")
	require.Equal(t, "1", b.selectedRelease(t))
	require.Equal(t, []string{"Deployment/shop-web-r1", "Ingress/shop-shop-example-com", "Secret/shop-r1", "Service/shop"}, names(b.objects(t, "shop")))
	require.Equal(t, r1Pods, endpoints.Pods())
	require.Positive(t, endpoints.Events())
}

// A newer release replacing one still probing: the one in between goes at
// once, the newest rolls out, and the serving release keeps the traffic
// until the newest is ready.
func TestNewerReleaseReplacesOneStillProbing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	endpoints := b.cluster.WatchEndpoints(t, b.ns, "shop")
	a.converge(t, 1, shop(b.ns, 1, fastImage), 60*time.Second)
	res := a.apply(t, 2, shop(b.ns, 2, neverImage))
	require.Equal(t, reconcile.StageProbing, rollout(t, res, "shop").Stage)
	require.Contains(t, b.objects(t, "shop"), "Deployment/shop-web-r2")
	// The grace period after release 1's switch must be over for release 2
	// to go at once.
	time.Sleep(testGrace)

	three := shop(b.ns, 3, strings.Replace(slowImage, ":2", ":3", 1))
	since := time.Now()
	r := a.reconciler(t)
	res = applyWith(t, r, 3, three)
	ro := rollout(t, res, "shop")
	require.Equal(t, reconcile.StageProbing, ro.Stage)
	require.Equal(t, lines(fmt.Sprintf(`
		patch secrets shop-r3
		patch deployments shop-web-r3
		delete deployments shop-web-r2
		delete secrets shop-r2
		patch namespaces %s`, b.ns)), a.writes(t, since), "release 2 goes in the same pass release 3 starts")
	require.Equal(t, []string{"Deployment/shop-web-r1", "Deployment/shop-web-r3", "Ingress/shop-shop-example-com",
		"Secret/shop-r1", "Secret/shop-r3", "Service/shop"}, names(b.objects(t, "shop")))

	probing := 0
	res, seen := convergeWith(t, r, 3, three, 60*time.Second, func(res reconcile.Result) {
		if ro := rollout(t, res, "shop"); ro.Stage == reconcile.StageProbing {
			probing++
			require.Equal(t, "1", b.selectedRelease(t), "release 1 serves while release 3 probes")
		}
	})
	t.Logf("stages: %v after %d probing passes", seen["shop"], probing)
	require.Equal(t, []string{reconcile.StageProbing, reconcile.StageRetiring, reconcile.StageSucceeded}, seen["shop"])
	require.Greater(t, probing, 5, "release 3's pods take seconds to become ready")
	require.Equal(t, "3", b.selectedRelease(t))
	require.Equal(t, []string{"Deployment/shop-web-r3", "Ingress/shop-shop-example-com", "Secret/shop-r3", "Service/shop"},
		names(b.objects(t, "shop")))
	require.Eventually(t, func() bool { return fmt.Sprint(endpoints.Pods()) == fmt.Sprint(b.podsOf(t, 3)) },
		30*time.Second, 100*time.Millisecond, "the Service's endpoints are release 3's pods")
	require.Equal(t, 2, rollout(t, res, "shop").Ready)
}

// The retire grace period is counted from the switch time kept on the
// Service, not in memory: fresh Reconcilers (a restarted agent, a new
// leader) keep the old release exactly until it is over. The clock is
// injected; the cluster's part (pods becoming ready) is real.
func TestRetireGraceSurvivesAFreshReconciler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	const grace = 15 * time.Second
	switchAt := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(now time.Time) func(*reconcile.Config) {
		return func(c *reconcile.Config) {
			c.RetireGrace = grace
			c.Now = func() time.Time { return now }
		}
	}
	a.converge(t, 1, shop(b.ns, 1, fastImage), 60*time.Second)

	two := shop(b.ns, 2, fastImage)
	res := applyWith(t, a.reconciler(t, at(switchAt.Add(-time.Minute))), 2, two)
	require.Equal(t, reconcile.StageProbing, rollout(t, res, "shop").Stage)
	var ro reconcile.Rollout
	require.Eventually(t, func() bool {
		res := applyWith(t, a.reconciler(t, at(switchAt)), 2, two)
		ro = rollout(t, res, "shop")
		return ro.Stage != reconcile.StageProbing
	}, 30*time.Second, 200*time.Millisecond, "release 2 becomes ready")
	require.Equal(t, reconcile.StageRetiring, ro.Stage)
	require.Equal(t, []int{1}, ro.Retiring)
	require.Equal(t, switchAt.Add(grace), ro.RetireAt)
	svc, err := b.admin.CoreV1().Services(b.ns).Get(t.Context(), "shop", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "2", svc.Spec.Selector["nebulactrl.io/release"])
	require.Equal(t, switchAt.Format(time.RFC3339Nano), svc.Annotations["nebulactrl.io/switched-at"])

	// A new leader a moment before the grace is over: release 1 stays, and
	// nothing is written.
	since := time.Now()
	res = applyWith(t, a.reconciler(t, at(switchAt.Add(grace-time.Millisecond))), 2, two)
	ro = rollout(t, res, "shop")
	require.Equal(t, reconcile.StageRetiring, ro.Stage)
	require.Equal(t, switchAt.Add(grace), ro.RetireAt)
	require.False(t, ro.Changed)
	require.False(t, res.Settled)
	require.Empty(t, a.writes(t, since))
	require.Contains(t, b.objects(t, "shop"), "Deployment/shop-web-r1")

	// Another one once it is over: release 1 goes.
	res = applyWith(t, a.reconciler(t, at(switchAt.Add(grace))), 2, two)
	ro = rollout(t, res, "shop")
	require.Equal(t, reconcile.StageSucceeded, ro.Stage)
	require.True(t, res.Settled)
	require.Equal(t, lines(`
		delete deployments shop-web-r1
		delete secrets shop-r1`), a.writes(t, since))

	// Settled: yet another one writes nothing.
	since = time.Now()
	res = applyWith(t, a.reconciler(t, at(switchAt.Add(time.Hour))), 2, two)
	require.True(t, res.Settled)
	require.False(t, rollout(t, res, "shop").Changed)
	require.Empty(t, a.writes(t, since), "a settled environment costs no write")
}

// failing is an http.RoundTripper that answers 503 Service Unavailable to
// the first n requests it is given that match, and passes everything else
// to the real API server. It stands for an overloaded or restarting API
// server, which client-go does not retry by itself without a Retry-After.
type failing struct {
	next  http.RoundTripper
	match func(*http.Request) bool
	left  atomic.Int32
	seen  atomic.Int32
}

func (f *failing) RoundTrip(req *http.Request) (*http.Response, error) {
	if f.match(req) && f.left.Add(-1) >= 0 {
		f.seen.Add(1)
		body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server is currently unable to handle the request","reason":"ServiceUnavailable","code":503}`
		if req.Body != nil {
			req.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req}, nil
	}
	return f.next.RoundTrip(req)
}

// Transient errors (here 503s from the API server, injected by wrapping the
// real clientset's HTTP transport) leave the services they hit retrying:
// not failed, not applied, and the revision not recorded, so it is tried
// again; the next pass gets through and records it. A namespace that cannot
// be read is a transient error of the whole environment.
func TestTransientErrorsAreRetriedAndTheRevisionRecordedOnlyOnceThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	wrap := func(match func(*http.Request) bool, n int32) (*failing, func(*reconcile.Config)) {
		f := &failing{match: match}
		f.left.Store(n)
		return f, func(c *reconcile.Config) {
			cfg := rest.CopyConfig(a.cfg)
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { f.next = rt; return f }
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			c.Client = cs
		}
	}

	// The environment's namespace cannot be read.
	f, opt := wrap(func(r *http.Request) bool {
		return r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/namespaces/"+b.ns)
	}, 1)
	hash, err := doc.Hash()
	require.NoError(t, err)
	_, err = a.reconciler(t, opt).Apply(t.Context(), 1, hash, doc)
	require.Error(t, err)
	require.True(t, reconcile.IsTransient(err), "%v", err)
	require.EqualValues(t, 1, f.seen.Load())

	// Two Deployment applies fail: the first two services in name order.
	f, opt = wrap(func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/deployments/")
	}, 2)
	r := a.reconciler(t, opt)
	res := applyWith(t, r, 1, doc)
	require.EqualValues(t, 2, f.seen.Load())
	got := outcomes(res)
	require.Equal(t, "applied", got["web"])
	for _, s := range []string{"api", "cron"} {
		require.True(t, strings.HasPrefix(got[s], "retrying: "), "%s: %s", s, got[s])
		require.Contains(t, got[s], "the server is currently unable to handle the request")
	}
	require.True(t, res.Retry())
	require.False(t, res.Recorded)
	require.False(t, res.Settled)
	rev, _, err := a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	require.Zero(t, rev, "a revision with services to retry is not recorded as applied")

	res = applyWith(t, r, 1, doc)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied", "web": "applied"}, outcomes(res))
	require.False(t, res.Retry())
	require.True(t, res.Recorded, "the retry gets through and records the revision")
	rev, _, err = a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	require.Equal(t, 1, rev)

	// Permanent errors are not transient.
	ingresses := schema.GroupResource{Group: "networking.k8s.io", Resource: "ingresses"}
	require.False(t, reconcile.IsTransient(apierrors.NewForbidden(ingresses, "x", fmt.Errorf("no"))))
	require.False(t, reconcile.IsTransient(apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "x", nil)))
	require.False(t, reconcile.IsTransient(context.Canceled))
	require.True(t, reconcile.IsTransient(apierrors.NewTooManyRequests("slow down", 1)))
	require.True(t, reconcile.IsTransient(apierrors.NewConflict(ingresses, "x", fmt.Errorf("changed"))))
	require.True(t, reconcile.IsTransient(apierrors.NewInternalError(fmt.Errorf("etcd"))))
}
