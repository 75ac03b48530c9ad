package reconcile_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
)

// Every test here runs against the real API server of k8stest, with kwok
// playing the kubelets; none uses a fake clientset.
func TestMain(m *testing.M) { k8stest.Main(m) }

// bundle is one test's cluster, admin client and environment namespace.
type bundle struct {
	cluster *k8stest.Cluster
	admin   kubernetes.Interface
	ns      string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	c := k8stest.Shared(t)
	return &bundle{cluster: c, admin: c.Client(t), ns: c.Namespace(t)}
}

// agent is the reconciler's identity in a test: a ServiceAccount, so that
// its requests are authorised by RBAC and attributed to it in the audit log.
type agent struct {
	b    *bundle
	user string
	cfg  *rest.Config
}

var allVerbs = []string{"get", "list", "watch", "create", "patch", "update", "delete"}

// fullRules is what the agent needs in an environment's namespace: its
// objects, and reading pods and events to say why a rollout waits.
func fullRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets", "services"}, Verbs: allVerbs},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: allVerbs},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: allVerbs},
		{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list", "watch"}},
	}
}

// newAgent makes ServiceAccount name in the test's namespace, grants it rules
// there plus get and patch of the namespace itself, and waits until the
// authorizer, which learns of bindings through an informer, lets it read.
func (b *bundle) newAgent(t *testing.T, name string, rules []rbacv1.PolicyRule) *agent {
	t.Helper()
	ctx := t.Context()
	cfg := b.cluster.ServiceAccountConfig(t, b.ns, name)
	// client-go's default of 5 requests a second would make the test
	// measure the client's rate limiter, not the reconcile.
	cfg.QPS, cfg.Burst = 200, 400
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: b.ns, Name: name}}

	_, err := b.admin.RbacV1().Roles(b.ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = b.admin.RbacV1().RoleBindings(b.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// Namespaces are cluster-scoped; resourceNames keeps the grant to the
	// test's own namespace.
	cluster := b.ns + "-" + name
	_, err = b.admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: cluster},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"},
			ResourceNames: []string{b.ns}, Verbs: []string{"get", "patch"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = b.admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cluster},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cluster},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		// Cluster-scoped, so not removed with the namespace.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, err := range []error{
			b.admin.RbacV1().ClusterRoleBindings().Delete(ctx, cluster, metav1.DeleteOptions{}),
			b.admin.RbacV1().ClusterRoles().Delete(ctx, cluster, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting ClusterRole(Binding) %s: %v", cluster, err)
			}
		}
	})

	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, b.ns, metav1.GetOptions{}); err != nil {
			return false
		}
		_, err := cs.CoreV1().Secrets(b.ns).List(ctx, metav1.ListOptions{})
		return err == nil
	}, 15*time.Second, 100*time.Millisecond, "RBAC grants for %s take effect", name)
	return &agent{b: b, user: k8stest.ServiceAccountUser(b.ns, name), cfg: cfg}
}

// testGrace is the retire grace period of the tests' Reconcilers: long
// enough to see the old release stay after the switch, short enough to wait.
const testGrace = time.Second

// reconciler returns a fresh Reconciler with a fresh client, as a newly
// elected leader would have; opts adjust its Config (a clock, a grace).
func (a *agent) reconciler(t *testing.T, opts ...func(*reconcile.Config)) *reconcile.Reconciler {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(a.cfg))
	require.NoError(t, err)
	cfg := reconcile.Config{
		Client:      cs,
		RetireGrace: testGrace,
		Logger:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	r, err := reconcile.New(cfg)
	require.NoError(t, err)
	return r
}

// apply runs one Apply with a fresh Reconciler and fails the test on error.
func (a *agent) apply(t *testing.T, revision int, doc desiredstate.Document) reconcile.Result {
	t.Helper()
	return applyWith(t, a.reconciler(t), revision, doc)
}

func applyWith(t *testing.T, r *reconcile.Reconciler, revision int, doc desiredstate.Document) reconcile.Result {
	t.Helper()
	hash, err := doc.Hash()
	require.NoError(t, err)
	res, err := r.Apply(t.Context(), revision, hash, doc)
	require.NoError(t, err)
	return res
}

// stages collects, per service, the stage each pass ended in, without
// repeats: what an agent would see pass after pass.
type stages map[string][]string

func (s stages) add(res reconcile.Result) {
	for _, ro := range res.Rollouts {
		seq := s[ro.Service]
		if len(seq) == 0 || seq[len(seq)-1] != ro.Stage {
			s[ro.Service] = append(seq, ro.Stage)
		}
	}
}

// converge applies revision, then goes on with progress passes of it, as
// the agent does, until the result is settled; it fails the test if that
// takes longer than within. It returns the last result and the stages seen.
func (a *agent) converge(t *testing.T, revision int, doc desiredstate.Document, within time.Duration) (reconcile.Result, stages) {
	t.Helper()
	return convergeWith(t, a.reconciler(t), revision, doc, within, nil)
}

// convergeWith is converge with a given Reconciler, calling each (when not
// nil) after every pass.
func convergeWith(t *testing.T, r *reconcile.Reconciler, revision int, doc desiredstate.Document, within time.Duration,
	each func(reconcile.Result)) (reconcile.Result, stages) {
	t.Helper()
	seen := stages{}
	deadline := time.Now().Add(within)
	for {
		res := applyWith(t, r, revision, doc)
		require.False(t, res.Ignored, "revision %d is not ignored", revision)
		seen.add(res)
		if each != nil {
			each(res)
		}
		if res.Settled {
			return res, seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("revision %d did not settle within %v: rollouts %+v, outcomes %v", revision, within, res.Rollouts, outcomes(res))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rollout returns the named service's rollout of a result.
func rollout(t *testing.T, res reconcile.Result, svc string) reconcile.Rollout {
	t.Helper()
	for _, ro := range res.Rollouts {
		if ro.Service == svc {
			return ro
		}
	}
	t.Fatalf("no rollout of %s in %+v", svc, res.Rollouts)
	return reconcile.Rollout{}
}

// writes returns the agent's write requests since, as sorted
// "verb resource name" lines, so a test can compare them as a whole.
func (a *agent) writes(t *testing.T, since time.Time) []string {
	t.Helper()
	var out []string
	for _, ev := range a.b.cluster.WritesBy(t, a.user, since) {
		out = append(out, fmt.Sprintf("%s %s %s", ev.Verb, ev.Resource, ev.Name))
	}
	slices.Sort(out)
	return out
}

// document is an environment of three services: api (two processes,
// variables, two domains), cron (a worker, no port) and web (one domain, a
// TCP health check).
func document(ns string) desiredstate.Document {
	return desiredstate.Document{
		SchemaVersion: desiredstate.SchemaVersion,
		Environment: desiredstate.Environment{
			OrgID: "0b0a3a44-org", Org: "acme", ProjectID: "7f1e-project", Project: "shop",
			ID: "5c2d-env", Name: "production", ClusterID: "c1", Namespace: ns,
		},
		Services: []desiredstate.Service{
			{
				ID: "svc-api", Name: "api",
				Release: &desiredstate.Release{ID: "rel-api-1", Number: 1, Image: image("api", 1), DeploymentID: "dep-api-1"},
				Processes: []desiredstate.Process{
					{Name: "web", Command: []string{"bin/api", "--listen", ":8080"}, Port: 8080, Replicas: 2,
						HealthCheck: &desiredstate.HealthCheck{Path: "/healthz", Port: 8080, InitialDelaySeconds: 2, PeriodSeconds: 5}},
					{Name: "worker", Command: []string{"bin/worker"}, Replicas: 1},
				},
				Variables: []desiredstate.Variable{
					{Name: "DATABASE_URL", Value: "postgres://db.internal/shop"},
					{Name: "SECRET_KEY", Value: "opened-by-the-control-plane"},
				},
				Domains: []string{"api.example.com", "www.example.com"},
			},
			{
				ID: "svc-cron", Name: "cron",
				Release:   &desiredstate.Release{ID: "rel-cron-4", Number: 4, Image: image("cron", 4), DeploymentID: "dep-cron-4"},
				Processes: []desiredstate.Process{{Name: "worker", Command: []string{"cron", "-f"}, Replicas: 1}},
				Variables: []desiredstate.Variable{{Name: "TZ", Value: "UTC"}},
			},
			{
				ID: "svc-web", Name: "web",
				Release: &desiredstate.Release{ID: "rel-web-7", Number: 7, Image: image("web", 7), DeploymentID: "dep-web-7"},
				Processes: []desiredstate.Process{{Name: "web", Port: 3000, Replicas: 1,
					HealthCheck: &desiredstate.HealthCheck{Port: 3000}}},
				Variables: []desiredstate.Variable{{Name: "NODE_ENV", Value: "production"}},
				Domains:   []string{"shop.example.com"},
			},
		},
	}
}

// image is a digest-pinned reference; kwok never pulls it.
func image(service string, release int) string {
	return fmt.Sprintf("registry.example/acme/%s@sha256:%064x", service, release)
}

// service returns a pointer to the named service of doc, to edit in place.
func service(t *testing.T, doc *desiredstate.Document, name string) *desiredstate.Service {
	t.Helper()
	for i := range doc.Services {
		if doc.Services[i].Name == name {
			return &doc.Services[i]
		}
	}
	t.Fatalf("no service %s in the document", name)
	return nil
}

// outcomes maps a result's services to "state" or "state: reason".
func outcomes(res reconcile.Result) map[string]string {
	m := map[string]string{}
	for _, o := range res.Services {
		m[o.Service] = o.State
		if o.Reason != "" {
			m[o.Service] += ": " + o.Reason
		}
	}
	return m
}

// objects returns "Kind/name" -> resourceVersion of the managed objects of
// one service ("" for every service) in the namespace.
func (b *bundle) objects(t *testing.T, svc string) map[string]string {
	t.Helper()
	ctx := t.Context()
	sel := "app.kubernetes.io/managed-by=nebulactrl"
	if svc != "" {
		sel += ",nebulactrl.io/service=" + svc
	}
	opts := metav1.ListOptions{LabelSelector: sel}
	out := map[string]string{}
	secrets, err := b.admin.CoreV1().Secrets(b.ns).List(ctx, opts)
	require.NoError(t, err)
	for _, o := range secrets.Items {
		out["Secret/"+o.Name] = o.ResourceVersion
	}
	deps, err := b.admin.AppsV1().Deployments(b.ns).List(ctx, opts)
	require.NoError(t, err)
	for _, o := range deps.Items {
		out["Deployment/"+o.Name] = o.ResourceVersion
	}
	svcs, err := b.admin.CoreV1().Services(b.ns).List(ctx, opts)
	require.NoError(t, err)
	for _, o := range svcs.Items {
		out["Service/"+o.Name] = o.ResourceVersion
	}
	ings, err := b.admin.NetworkingV1().Ingresses(b.ns).List(ctx, opts)
	require.NoError(t, err)
	for _, o := range ings.Items {
		out["Ingress/"+o.Name] = o.ResourceVersion
	}
	return out
}

// names returns the sorted keys of objects.
func names(objects map[string]string) []string {
	out := make([]string, 0, len(objects))
	for k := range objects {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// lines splits a multi-line literal into sorted lines, for comparing with
// agent.writes.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}
