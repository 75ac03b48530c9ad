package reconcile_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
)

// The first apply creates the namespace, every release's Secret and
// Deployments; the progress passes that follow add the Services and
// Ingresses once the pods are ready, and record the switch of the service
// without a port on its Secret. Settled, a new Reconciler (a new leader)
// given the same revision writes nothing, and one given a newer revision of
// the same document writes only the applied-revision annotation: every
// object is recognised by its spec hash.
func TestApplyCreatesTheEnvironmentAndAnUnchangedOneCostsNoWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	ns := b.ns

	since := time.Now()
	res := a.apply(t, 1, doc)
	require.False(t, res.Ignored)
	require.True(t, res.Recorded)
	require.False(t, res.Settled, "the pods are not ready yet")
	require.Equal(t, "5c2d-env", res.Environment)
	require.Equal(t, 1, res.Revision)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied", "web": "applied"}, outcomes(res))
	for _, ro := range res.Rollouts {
		require.Equal(t, reconcile.StageProbing, ro.Stage, "%s: its Deployments were just applied", ro.Service)
	}
	first := a.writes(t, since)
	t.Logf("first apply: %d write calls: %v", len(first), first)
	require.Equal(t, lines(fmt.Sprintf(`
		patch namespaces %[1]s
		patch namespaces %[1]s
		patch secrets api-r1
		patch secrets cron-r4
		patch secrets web-r7
		patch deployments api-web-r1
		patch deployments api-worker-r1
		patch deployments cron-worker-r4
		patch deployments web-web-r7`, ns)), first,
		"one apply of the namespace's labels, one of its applied revision, one per release object; no Service before the switch")

	since = time.Now()
	res, seen := a.converge(t, 1, doc, 60*time.Second)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied", "web": "applied"}, outcomes(res))
	for _, ro := range res.Rollouts {
		require.Equal(t, reconcile.StageSucceeded, ro.Stage, ro.Service)
		require.Equal(t, ro.Desired, ro.Ready, ro.Service)
		require.Empty(t, ro.Retiring)
	}
	require.Equal(t, "dep-api-1", rollout(t, res, "api").DeploymentID)
	require.Equal(t, 3, rollout(t, res, "api").Desired, "two web pods and a worker")
	t.Logf("stages seen pass after pass: %v", seen)
	require.Equal(t, lines(`
		patch services api
		patch services web
		patch ingresses api-api-example-com
		patch ingresses api-www-example-com
		patch ingresses web-shop-example-com
		patch secrets cron-r4`), a.writes(t, since),
		"the switches: a Service per listening service with its Ingresses, the switch time on the Secret of the one without port")
	assertObjects(t, b)

	rev, hash, err := a.reconciler(t).AppliedRevision(t.Context(), ns)
	require.NoError(t, err)
	wantHash, err := doc.Hash()
	require.NoError(t, err)
	require.Equal(t, 1, rev)
	require.Equal(t, wantHash, hash)

	// A new leader receives the revision again on connecting: a progress
	// pass, which finds nothing to do.
	settled(t, b)
	since = time.Now()
	res = a.apply(t, 1, doc)
	require.False(t, res.Ignored)
	require.False(t, res.Recorded)
	require.True(t, res.Settled)
	for _, ro := range res.Rollouts {
		require.Equal(t, reconcile.StageSucceeded, ro.Stage)
		require.False(t, ro.Changed)
	}
	require.Empty(t, a.writes(t, since), "a new Reconciler passing over the applied revision makes no write")
	t.Logf("second apply (same revision, new Reconciler): 0 write calls")

	// The same content under a newer revision: every object is read, found
	// unchanged by its spec hash and skipped; only the record moves on.
	before := b.objects(t, "")
	since = time.Now()
	res = a.apply(t, 2, doc)
	require.False(t, res.Ignored)
	require.True(t, res.Settled)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied", "web": "applied"}, outcomes(res))
	require.Equal(t, []string{"patch namespaces " + ns}, a.writes(t, since),
		"an unchanged document under a new revision writes only the applied-revision annotation")
	require.Equal(t, before, b.objects(t, ""), "no object changed")
	rev, _, err = a.reconciler(t).AppliedRevision(t.Context(), ns)
	require.NoError(t, err)
	require.Equal(t, 2, rev)
}

// assertObjects checks the objects the first apply of document makes.
func assertObjects(t *testing.T, b *bundle) {
	t.Helper()
	ctx := t.Context()
	envLabels := map[string]string{
		"app.kubernetes.io/managed-by": "nebulactrl",
		"nebulactrl.io/org":            "acme",
		"nebulactrl.io/project":        "shop",
		"nebulactrl.io/environment":    "production",
		"nebulactrl.io/environment-id": "5c2d-env",
	}
	hasLabels := func(what string, got map[string]string, extra ...string) {
		t.Helper()
		for k, v := range envLabels {
			require.Equal(t, v, got[k], "%s label %s", what, k)
		}
		for i := 0; i+1 < len(extra); i += 2 {
			require.Equal(t, extra[i+1], got[extra[i]], "%s label %s", what, extra[i])
		}
	}

	ns, err := b.admin.CoreV1().Namespaces().Get(ctx, b.ns, metav1.GetOptions{})
	require.NoError(t, err)
	hasLabels("namespace", ns.Labels)
	require.Equal(t, "1", ns.Annotations["nebulactrl.io/applied-revision"])
	require.NotEmpty(t, ns.Annotations["nebulactrl.io/applied-hash"])

	sec, err := b.admin.CoreV1().Secrets(b.ns).Get(ctx, "api-r1", metav1.GetOptions{})
	require.NoError(t, err)
	hasLabels("secret", sec.Labels, "nebulactrl.io/service", "api", "nebulactrl.io/release", "1")
	require.NotNil(t, sec.Immutable)
	require.True(t, *sec.Immutable)
	require.Equal(t, map[string][]byte{
		"DATABASE_URL": []byte("postgres://db.internal/shop"),
		"SECRET_KEY":   []byte("opened-by-the-control-plane"),
	}, sec.Data)
	require.NotEmpty(t, sec.Annotations["nebulactrl.io/spec-hash"])

	dep, err := b.admin.AppsV1().Deployments(b.ns).Get(ctx, "api-web-r1", metav1.GetOptions{})
	require.NoError(t, err)
	hasLabels("deployment", dep.Labels, "nebulactrl.io/service", "api", "nebulactrl.io/process", "web", "nebulactrl.io/release", "1")
	require.Equal(t, map[string]string{"nebulactrl.io/service": "api", "nebulactrl.io/process": "web", "nebulactrl.io/release": "1"},
		dep.Spec.Selector.MatchLabels)
	require.Equal(t, int32(2), *dep.Spec.Replicas)
	require.Equal(t, map[string]string{
		"app.kubernetes.io/managed-by": "nebulactrl", "nebulactrl.io/environment-id": "5c2d-env",
		"nebulactrl.io/service": "api", "nebulactrl.io/process": "web", "nebulactrl.io/release": "1",
	}, dep.Spec.Template.Labels, "pods carry only labels that a rename cannot change")
	c := dep.Spec.Template.Spec.Containers[0]
	require.Equal(t, "registry.example/acme/api@sha256:"+strings.Repeat("0", 63)+"1", c.Image)
	require.Equal(t, []string{"bin/api", "--listen", ":8080"}, c.Args)
	require.Equal(t, []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}, c.Ports)
	require.Equal(t, "api-r1", c.EnvFrom[0].SecretRef.Name)
	require.NotNil(t, c.ReadinessProbe.HTTPGet)
	require.Equal(t, "/healthz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, 8080, c.ReadinessProbe.HTTPGet.Port.IntValue())
	require.Equal(t, int32(2), c.ReadinessProbe.InitialDelaySeconds)
	require.Equal(t, int32(5), c.ReadinessProbe.PeriodSeconds)

	worker, err := b.admin.AppsV1().Deployments(b.ns).Get(ctx, "api-worker-r1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, worker.Spec.Template.Spec.Containers[0].Ports)
	require.Nil(t, worker.Spec.Template.Spec.Containers[0].ReadinessProbe, "a process without port or health check has no probe")

	webDep, err := b.admin.AppsV1().Deployments(b.ns).Get(ctx, "web-web-r7", metav1.GetOptions{})
	require.NoError(t, err)
	probe := webDep.Spec.Template.Spec.Containers[0].ReadinessProbe
	require.NotNil(t, probe.TCPSocket, "a health check with only a port is a TCP check")
	require.Equal(t, 3000, probe.TCPSocket.Port.IntValue())

	svc, err := b.admin.CoreV1().Services(b.ns).Get(ctx, "api", metav1.GetOptions{})
	require.NoError(t, err)
	hasLabels("service", svc.Labels, "nebulactrl.io/service", "api")
	require.Equal(t, map[string]string{"nebulactrl.io/service": "api", "nebulactrl.io/process": "web", "nebulactrl.io/release": "1"}, svc.Spec.Selector,
		"traffic goes to one release")
	require.NotEmpty(t, svc.Annotations["nebulactrl.io/switched-at"])
	cronSecret, err := b.admin.CoreV1().Secrets(b.ns).Get(ctx, "cron-r4", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, cronSecret.Annotations["nebulactrl.io/switched-at"], "the switch of a service without port is on its release's Secret")
	require.Equal(t, int32(8080), svc.Spec.Ports[0].Port)
	require.Equal(t, 8080, svc.Spec.Ports[0].TargetPort.IntValue())
	_, err = b.admin.CoreV1().Services(b.ns).Get(ctx, "cron", metav1.GetOptions{})
	require.Error(t, err, "a service without a listening process gets no Service")

	ing, err := b.admin.NetworkingV1().Ingresses(b.ns).Get(ctx, "api-www-example-com", metav1.GetOptions{})
	require.NoError(t, err)
	hasLabels("ingress", ing.Labels, "nebulactrl.io/service", "api")
	require.Nil(t, ing.Spec.IngressClassName, "the cluster's default class (K3s: Traefik) serves it")
	rule := ing.Spec.Rules[0]
	require.Equal(t, "www.example.com", rule.Host)
	path := rule.HTTP.Paths[0]
	require.Equal(t, "/", path.Path)
	require.Equal(t, networkingv1.PathTypePrefix, *path.PathType)
	require.Equal(t, "api", path.Backend.Service.Name)
	require.Equal(t, int32(8080), path.Backend.Service.Port.Number)
}

// waitReady waits until kwok has made every replica of a Deployment Ready.
func waitReady(t *testing.T, b *bundle, name string) {
	t.Helper()
	var d *appsv1.Deployment
	require.Eventually(t, func() bool {
		var err error
		d, err = b.admin.AppsV1().Deployments(b.ns).Get(t.Context(), name, metav1.GetOptions{})
		return err == nil && d.Spec.Replicas != nil && d.Status.ReadyReplicas == *d.Spec.Replicas &&
			d.Status.ObservedGeneration == d.Generation
	}, 60*time.Second, 200*time.Millisecond, "Deployment %s becomes Ready", name)
}

// settled waits until the controllers are done with the namespace's
// Deployments (every replica Ready, status no longer moving) and returns the
// objects' resourceVersions: a Deployment's resourceVersion also changes
// with its status, which is the controllers' writing, not the agent's.
func settled(t *testing.T, b *bundle) map[string]string {
	t.Helper()
	deps, err := b.admin.AppsV1().Deployments(b.ns).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for _, d := range deps.Items {
		waitReady(t, b, d.Name)
	}
	var last map[string]string
	require.Eventually(t, func() bool {
		now := b.objects(t, "")
		stable := maps.Equal(now, last)
		last = now
		return stable
	}, 30*time.Second, time.Second, "the namespace's objects stop changing")
	return last
}
