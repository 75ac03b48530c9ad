package reconcile_test

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// A changed variable comes with a new release: only that service's objects
// are written; the Service moves to it once its pods are ready, and its old
// release's Deployments and Secret are pruned after the grace period.
func TestNewReleaseWritesOnlyThatServiceAndPrunesTheOldRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	a.converge(t, 1, doc, 60*time.Second)
	settled(t, b)
	others := b.objects(t, "cron")
	maps.Copy(others, b.objects(t, "web"))

	api := service(t, &doc, "api")
	api.Release = &desiredstate.Release{ID: "rel-api-2", Number: 2, Image: api.Release.Image, DeploymentID: "dep-api-2"}
	api.Variables[0].Value = "postgres://db2.internal/shop"
	since := time.Now()
	res := a.apply(t, 2, doc)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied", "web": "applied"}, outcomes(res))
	require.Equal(t, lines(fmt.Sprintf(`
		patch secrets api-r2
		patch deployments api-web-r2
		patch deployments api-worker-r2
		patch namespaces %s`, b.ns)), a.writes(t, since), "the new release starts next to the old one")
	require.Contains(t, b.objects(t, "api"), "Deployment/api-web-r1", "the old release stays while the new one starts")

	res, _ = a.converge(t, 2, doc, 60*time.Second)
	require.Equal(t, lines(fmt.Sprintf(`
		patch secrets api-r2
		patch deployments api-web-r2
		patch deployments api-worker-r2
		patch namespaces %s
		patch services api
		delete deployments api-web-r1
		delete deployments api-worker-r1
		delete secrets api-r1`, b.ns)), a.writes(t, since))
	require.Equal(t, []string{
		"Deployment/api-web-r2", "Deployment/api-worker-r2",
		"Ingress/api-api-example-com", "Ingress/api-www-example-com",
		"Secret/api-r2", "Service/api",
	}, names(b.objects(t, "api")))
	after := b.objects(t, "cron")
	maps.Copy(after, b.objects(t, "web"))
	require.Equal(t, others, after, "the other services' objects are untouched")

	// A release number reused for other content breaks the immutability the
	// Secret stands for: the service fails, and the Secret stays as it was.
	secretBefore := b.objects(t, "api")["Secret/api-r2"]
	api.Variables[1].Value = "rotated-without-a-new-release"
	since = time.Now()
	res = a.apply(t, 3, doc)
	require.Equal(t, "failed", res.Services[0].State)
	require.Contains(t, res.Services[0].Reason, "Secret api-r2 already exists with other content")
	require.Equal(t, []string{"patch namespaces " + b.ns}, a.writes(t, since))
	require.Equal(t, secretBefore, b.objects(t, "api")["Secret/api-r2"])
}

// A held service's objects are left exactly as they are while the rest of
// the document changes around them.
func TestHeldServiceIsLeftExactlyAsItIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	a.converge(t, 1, doc, 60*time.Second)
	settled(t, b)
	held := b.objects(t, "api")
	require.Len(t, held, 6)

	// Held: no release, no configuration. Unheld, that would prune all of
	// api's objects. Meanwhile web gets a new release and cron goes.
	*service(t, &doc, "api") = desiredstate.Service{ID: "svc-api", Name: "api", Held: true,
		HeldReason: "variable DATABASE_URL references the deleted service db"}
	web := service(t, &doc, "web")
	web.Release = &desiredstate.Release{ID: "rel-web-8", Number: 8, Image: image("web", 8)}
	doc.Services = []desiredstate.Service{doc.Services[0], *web}

	since := time.Now()
	res, _ := a.converge(t, 2, doc, 60*time.Second)
	require.Equal(t, map[string]string{
		"api": "held: variable DATABASE_URL references the deleted service db",
		"web": "applied",
	}, outcomes(res))
	require.Len(t, res.Rollouts, 1, "a held service has no rollout")
	require.Equal(t, held, b.objects(t, "api"), "every object of the held service keeps its resourceVersion")
	for _, w := range a.writes(t, since) {
		require.NotContains(t, w, " api", "no write touches the held service: %s", w)
	}
	require.Empty(t, b.objects(t, "cron"), "the removed service is pruned")
	require.Contains(t, b.objects(t, "web"), "Deployment/web-web-r8")
	require.NotContains(t, b.objects(t, "web"), "Deployment/web-web-r7")
}

// A rewind (issue 17, item 7: the control plane was restored from a backup
// taken before revisions the cluster applied) applies a revision older than
// the applied one, or the same number with another document, and records
// it: the services the control plane does not know of are pruned, and the
// next older revision is ignored again as usual. The same revision with its
// own document, rewound again, is a progress pass that writes nothing.
func TestARewindReturnsToWhatTheControlPlaneKnows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	a.converge(t, 7, doc, 60*time.Second)
	require.NotEmpty(t, b.objects(t, "cron"))

	older := doc
	older.Services = nil
	for _, s := range doc.Services {
		if s.Name != "cron" {
			older.Services = append(older.Services, s)
		}
	}
	hash, err := older.Hash()
	require.NoError(t, err)
	rewind := func(rev int, d desiredstate.Document) reconcile.Result {
		t.Helper()
		h, err := d.Hash()
		require.NoError(t, err)
		res, err := a.reconciler(t).Rewind(t.Context(), rev, h, d)
		require.NoError(t, err)
		return res
	}
	require.True(t, a.apply(t, 5, older).Ignored, "without a rewind an older revision changes nothing")
	res := rewind(5, older)
	require.False(t, res.Ignored)
	require.True(t, res.Recorded)
	require.Empty(t, b.objects(t, "cron"), "the service the restored control plane does not know is pruned")
	require.NotEmpty(t, b.objects(t, "web"))
	rev, got, err := a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	require.Equal(t, 5, rev)
	require.Equal(t, hash, got)

	since := time.Now()
	res = rewind(5, older)
	require.False(t, res.Ignored)
	require.False(t, res.Recorded, "the same revision and document again is a progress pass")
	require.Empty(t, a.writes(t, since))
	require.True(t, a.apply(t, 4, doc).Ignored, "after the rewind, older revisions are ignored again")

	// The same number with another document.
	res = rewind(5, doc)
	require.True(t, res.Recorded)
	require.NotEmpty(t, b.objects(t, "cron"))
	want, err := doc.Hash()
	require.NoError(t, err)
	rev, got, err = a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	require.Equal(t, 5, rev)
	require.Equal(t, want, got)
}

// Revisions older than the applied one change nothing, nor does the applied
// revision with another document.
func TestOlderRevisionIsIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	a.converge(t, 5, doc, 60*time.Second)
	before := settled(t, b)

	empty := doc
	empty.Services = []desiredstate.Service{}
	since := time.Now()
	for _, rev := range []int{4, 5} {
		res := a.apply(t, rev, empty)
		require.True(t, res.Ignored, "revision %d after 5", rev)
		require.Equal(t, rev, res.Revision)
		require.Empty(t, res.Services)
	}
	require.Empty(t, a.writes(t, since))
	require.Equal(t, before, b.objects(t, ""))

	// The applied revision with its own document is a progress pass.
	res := a.apply(t, 5, doc)
	require.False(t, res.Ignored)
	require.True(t, res.Settled)
	require.Len(t, res.Services, 3)
	require.Empty(t, a.writes(t, since))

	rev, hash, err := a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	want, err := doc.Hash()
	require.NoError(t, err)
	require.Equal(t, 5, rev)
	require.Equal(t, want, hash)

	// The agent's grant names its namespace only; the admin can see that
	// another one does not exist.
	admin, err := reconcile.New(reconcile.Config{Client: b.admin})
	require.NoError(t, err)
	rev, hash, err = admin.AppliedRevision(t.Context(), "no-such-namespace")
	require.NoError(t, err)
	require.Zero(t, rev)
	require.Empty(t, hash)
}

// A removed service loses all its objects, a removed domain its Ingress, and
// a document without services empties the namespace but keeps it.
func TestRemovedServicesAndDomainsArePruned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	a.converge(t, 1, doc, 60*time.Second)
	require.Len(t, b.objects(t, "web"), 4)

	service(t, &doc, "api").Domains = []string{"api.example.com"}
	doc.Services = []desiredstate.Service{*service(t, &doc, "api"), *service(t, &doc, "cron")}
	since := time.Now()
	res := a.apply(t, 2, doc)
	require.Equal(t, map[string]string{"api": "applied", "cron": "applied"}, outcomes(res))
	require.Empty(t, b.objects(t, "web"))
	require.NotContains(t, b.objects(t, "api"), "Ingress/api-www-example-com")
	require.Contains(t, b.objects(t, "api"), "Ingress/api-api-example-com")
	require.Equal(t, lines(fmt.Sprintf(`
		delete ingresses api-www-example-com
		delete ingresses web-shop-example-com
		delete services web
		delete deployments web-web-r7
		delete secrets web-r7
		patch namespaces %s`, b.ns)), a.writes(t, since))

	// The environment was deleted.
	doc.Services = []desiredstate.Service{}
	res = a.apply(t, 3, doc)
	require.Empty(t, res.Services)
	require.Empty(t, b.objects(t, ""), "nothing managed is left")
	ns, err := b.admin.CoreV1().Namespaces().Get(t.Context(), b.ns, metav1.GetOptions{})
	require.NoError(t, err, "the namespace stays")
	require.Equal(t, "3", ns.Annotations["nebulactrl.io/applied-revision"])
	require.Equal(t, "nebulactrl", ns.Labels["app.kubernetes.io/managed-by"])
}

// An agent missing a permission fails the services that need it, with the
// API server's Forbidden message, and applies the others. Ingresses are
// applied at the switch, so that is where the services with domains fail:
// their rollout stops there and says why.
func TestMissingPermissionFailsOnlyThatService(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rules := fullRules()
	rules[2].Verbs = []string{"get", "list", "watch"} // Ingresses: read-only
	a := b.newAgent(t, "agent-ingress-readonly", rules)
	doc := document(b.ns)

	since := time.Now()
	res, _ := a.converge(t, 1, doc, 60*time.Second)
	got := outcomes(res)
	require.Equal(t, "applied", got["cron"])
	for _, s := range []string{"api", "web"} {
		require.Regexp(t, `^failed: ingresses\.networking\.k8s\.io ".+" is forbidden: User "`+a.user+`" cannot patch resource "ingresses"`, got[s])
		ro := rollout(t, res, s)
		require.Equal(t, reconcile.StageSwitching, ro.Stage, "the rollout stops at the switch")
		require.Contains(t, ro.Detail, "forbidden")
	}
	require.Equal(t, reconcile.StageSucceeded, rollout(t, res, "cron").Stage)
	refused := map[string]bool{}
	for _, ev := range b.cluster.WritesBy(t, a.user, since) {
		if ev.Resource == "ingresses" {
			require.Equal(t, 403, ev.Code)
			refused[ev.Name] = true
		}
	}
	require.Equal(t, map[string]bool{"api-api-example-com": true, "web-shop-example-com": true}, refused,
		"a service stops at its first failure")
	rev, _, err := a.reconciler(t).AppliedRevision(t.Context(), b.ns)
	require.NoError(t, err)
	require.Equal(t, 1, rev, "the revision is recorded even though services failed")
	require.Len(t, b.objects(t, "cron"), 2)

	// Without even reading Ingresses, the agent cannot tell what it would
	// prune or overwrite: the services with domains fail on the LIST,
	// before anything of them is written.
	none := b.newAgent(t, "agent-no-ingress", fullRules()[:2])
	res = none.apply(t, 2, doc)
	got = outcomes(res)
	require.Equal(t, "applied", got["cron"])
	require.Regexp(t, `^failed: ingresses\.networking\.k8s\.io is forbidden: .* cannot list resource "ingresses"`, got["api"])
	require.Len(t, res.Rollouts, 1, "only cron has a rollout")
}

// A variable the control plane failed to open fails its service only.
func TestUnopenedSecretFailsThatService(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.newAgent(t, "agent", fullRules())
	doc := document(b.ns)
	cron := service(t, &doc, "cron")
	cron.Variables = append(cron.Variables, desiredstate.Variable{Name: "API_TOKEN",
		Secret: &desiredstate.Sealed{DataKeyID: "dk-1", Ciphertext: []byte("sealed")}})

	res := a.apply(t, 1, doc)
	require.Equal(t, map[string]string{
		"api": "applied", "cron": "failed: variable API_TOKEN: secret not opened", "web": "applied",
	}, outcomes(res))
	require.Empty(t, b.objects(t, "cron"), "nothing of the failed service was written")
	_, err := b.admin.CoreV1().Secrets(b.ns).Get(t.Context(), "cron-r4", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err))
}
