package agent_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// The install manifest on a real API server (RBAC, Pod Security Admission,
// ValidatingAdmissionPolicy): the agent's pods pass the "restricted" Pod
// Security Standard; as its ServiceAccount the agent can neither read a
// Secret in kube-system nor change a Deployment outside the namespaces it
// created, nor climb there through the role it may bind; within the
// namespaces it creates it does its work, also in one created before it
// bound its role in each.
func TestInstallOnARealAPIServer(t *testing.T) {
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	ctx := context.Background()
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", WithoutToken: true, Image: agentinstall.DefaultImage("1.0.0"),
		CABundle: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	sa, err := kubernetes.NewForConfig(k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName))
	require.NoError(t, err)
	agentUser := k8stest.ServiceAccountUser(agentinstall.AgentNamespace, agentinstall.AgentName)

	t.Run("pods pass Pod Security restricted", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().Get(ctx, agentinstall.AgentNamespace, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "restricted", ns.Labels["pod-security.kubernetes.io/enforce"])
		// The admission plugin is on: a pod as root is refused there.
		rootPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: agentinstall.AgentNamespace},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}}}
		_, err = admin.CoreV1().Pods(agentinstall.AgentNamespace).Create(ctx, rootPod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.ErrorContains(t, err, "violates PodSecurity", "the API server enforces Pod Security")

		sts, err := admin.AppsV1().StatefulSets(agentinstall.AgentNamespace).Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
		require.NoError(t, err)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent-dry-run", Namespace: agentinstall.AgentNamespace, Labels: sts.Spec.Template.Labels},
			Spec: sts.Spec.Template.Spec}
		_, err = admin.CoreV1().Pods(agentinstall.AgentNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "the agent's pod is admitted under restricted")
		// And the StatefulSet's own pods are created and run.
		require.Eventually(t, func() bool {
			pods, err := admin.CoreV1().Pods(agentinstall.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + agentinstall.AgentName})
			if err != nil || len(pods.Items) != 2 {
				return false
			}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodRunning {
					return false
				}
			}
			return true
		}, 60*time.Second, 200*time.Millisecond, "both replicas are admitted and run")
	})

	// The policy takes a moment to be enforced after it is created: wait on
	// a dry run, which changes nothing either way.
	require.Eventually(t, func() bool {
		_, err := sa.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), agentinstall.ManagedByLabel)
	}, 30*time.Second, 100*time.Millisecond, "the admission policy is enforced")

	t.Run("nothing outside its namespaces", func(t *testing.T) {
		_, err := admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cluster-secret"},
			StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		one := int32(1)
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses"}, Spec: appsv1.DeploymentSpec{Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}}}}}
		_, err = admin.AppsV1().Deployments("default").Create(ctx, dep, metav1.CreateOptions{})
		require.NoError(t, err)

		// What RBAC says, asked of the API server.
		for _, tc := range []struct {
			ns, verb, group, resource string
			allowed                   bool
		}{
			{"kube-system", "get", "", "secrets", false},
			{"", "list", "", "secrets", false},
			{"default", "get", "", "secrets", false},
			{"default", "update", "apps", "deployments", false},
			{"default", "patch", "apps", "deployments", false},
			{"kube-system", "create", "apps", "deployments", false},
			{"", "list", "apps", "deployments", false},
			{"default", "delete", "", "services", false},
			{"", "delete", "", "namespaces", false},
			{"", "escalate", "rbac.authorization.k8s.io", "clusterroles", false},
			{"", "create", "rbac.authorization.k8s.io", "clusterrolebindings", false},
			{agentinstall.AgentNamespace, "get", "", "secrets", true},
			{"", "list", "", "nodes", true},
		} {
			sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: agentUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + agentinstall.AgentNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tc.ns, Verb: tc.verb, Group: tc.group, Resource: tc.resource}}}, metav1.CreateOptions{})
			require.NoError(t, err)
			require.Equal(t, tc.allowed, sar.Status.Allowed, "%s %s/%s in %q", tc.verb, tc.group, tc.resource, tc.ns)
		}

		// And real calls as the agent.
		_, err = sa.CoreV1().Secrets("kube-system").Get(ctx, "cluster-secret", metav1.GetOptions{})
		require.True(t, apierrors.IsForbidden(err), "reading a Secret in kube-system: %v", err)
		_, err = sa.AppsV1().Deployments("default").Patch(ctx, "someone-elses", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
		require.True(t, apierrors.IsForbidden(err), "changing a Deployment it did not create: %v", err)

		// The right to bind does not reach kube-system, nor an unmanaged
		// namespace made managed by a label.
		bind := func(ns, role string, subject rbacv1.Subject) error {
			_, err := sa.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "climb"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
				Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
			return err
		}
		self := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: agentinstall.AgentNamespace, Name: agentinstall.AgentName}
		require.ErrorContains(t, bind("kube-system", agentinstall.WorkloadRole, self), "only in namespaces labelled")
		require.ErrorContains(t, bind("default", agentinstall.WorkloadRole, self), "only in namespaces labelled")
		_, err = sa.CoreV1().Namespaces().Patch(ctx, "kube-system", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"`+agentinstall.ManagedByLabel+`":"`+agentinstall.ManagedByValue+`"}}}`), metav1.PatchOptions{})
		require.ErrorContains(t, err, "changes only namespaces labelled")
		_, err = sa.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "unlabelled"}}, metav1.CreateOptions{})
		require.ErrorContains(t, err, agentinstall.ManagedByLabel)
		require.NoError(t, bindFails(ctx, admin, "kube-system"), "nothing was bound in kube-system")

		// In a namespace it manages, only its workload role, only to itself.
		_, err = sa.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "acme-managed",
			Labels: map[string]string{agentinstall.ManagedByLabel: agentinstall.ManagedByValue}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.True(t, apierrors.IsForbidden(bind("acme-managed", "cluster-admin", self)), "binding another role is an escalation")
		require.ErrorContains(t, bind("acme-managed", agentinstall.WorkloadRole, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: "acme-managed", Name: "default"}),
			"only to itself")
		require.ErrorContains(t, bind("acme-managed", agentinstall.WorkloadRole, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "mallory"}),
			"only to itself")
	})

	t.Run("its work in the namespaces it creates", func(t *testing.T) {
		doc := func(env, name string) desiredstate.Document {
			return desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{
				OrgID: "00000000-0000-4000-8000-000000000001", Org: "acme", ProjectID: "00000000-0000-4000-8000-000000000002", Project: "shop",
				ID: env, Name: name, ClusterID: "00000000-0000-4000-8000-000000000004",
				Namespace: desiredstate.Namespace("acme", "shop", name)},
				Services: []desiredstate.Service{
					{ID: "00000000-0000-4000-8000-000000000010", Name: "api", Release: &desiredstate.Release{ID: "r1", Number: 1, Image: "registry.example.com/api@sha256:" + strings.Repeat("a", 64)},
						Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 1}}, Domains: []string{"api.example.com"},
						Variables: []desiredstate.Variable{{Name: "TOKEN", Value: "s3cret"}}},
				}}
		}
		r, err := reconcile.New(reconcile.Config{Client: sa, Binding: agentBinding, RetireGrace: time.Second})
		require.NoError(t, err)
		applied := func(r *reconcile.Reconciler, rev int, d desiredstate.Document) {
			t.Helper()
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				res, err := r.Apply(ctx, rev, "h"+string(rune('0'+rev)), d)
				require.NoError(c, err)
				require.NotEmpty(c, res.Services)
				require.Equal(c, reconcile.StateApplied, res.Services[0].State, res.Services[0].Reason)
				require.True(c, res.Settled)
			}, 60*time.Second, 200*time.Millisecond)
		}
		staging := doc("00000000-0000-4000-8000-000000000003", "staging")
		applied(r, 1, staging)
		ns := staging.Environment.Namespace
		rb, err := admin.RbacV1().RoleBindings(ns).Get(ctx, agentinstall.WorkloadRole, metav1.GetOptions{})
		require.NoError(t, err, "the agent bound its role in the namespace it created")
		require.Equal(t, agentinstall.WorkloadRole, rb.RoleRef.Name)
		sec, err := sa.CoreV1().Secrets(ns).Get(ctx, "api-r1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "s3cret", string(sec.Data["TOKEN"]))

		// A namespace made before the agent bound its role in each (the
		// cluster-wide rights of earlier manifests): bound on the next
		// revision, once.
		old, err := reconcile.New(reconcile.Config{Client: admin, RetireGrace: time.Second})
		require.NoError(t, err)
		prod := doc("00000000-0000-4000-8000-000000000005", "prod")
		applied(old, 1, prod)
		_, err = admin.RbacV1().RoleBindings(prod.Environment.Namespace).Get(ctx, agentinstall.WorkloadRole, metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err))
		prod.Services[0].Variables[0].Value = "rotated"
		prod.Services[0].Release = &desiredstate.Release{ID: "r2", Number: 2, Image: prod.Services[0].Release.Image}
		applied(r, 2, prod)
		sec, err = sa.CoreV1().Secrets(prod.Environment.Namespace).Get(ctx, "api-r2", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "rotated", string(sec.Data["TOKEN"]))

		// A binding that fails leaves the namespace to be done again: the
		// next reconcile binds.
		role, err := admin.RbacV1().ClusterRoles().Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
		require.NoError(t, err)
		full := role.DeepCopy()
		var kept []rbacv1.PolicyRule
		for _, rule := range role.Rules {
			if !slices.Contains(rule.Verbs, "bind") {
				kept = append(kept, rule)
			}
		}
		role.Rules = kept
		_, err = admin.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{})
		require.NoError(t, err)
		qa := doc("00000000-0000-4000-8000-000000000006", "qa")
		require.Eventually(t, func() bool {
			_, err := r.Apply(ctx, 1, "h1", qa)
			return err != nil && strings.Contains(err.Error(), "forbidden")
		}, 30*time.Second, 200*time.Millisecond, "without the right to bind, the namespace's reconcile fails")
		full.ResourceVersion = ""
		current, err := admin.RbacV1().ClusterRoles().Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
		require.NoError(t, err)
		current.Rules = full.Rules
		_, err = admin.RbacV1().ClusterRoles().Update(ctx, current, metav1.UpdateOptions{})
		require.NoError(t, err)
		applied(r, 1, qa)
		_, err = admin.RbacV1().RoleBindings(qa.Environment.Namespace).Get(ctx, agentinstall.WorkloadRole, metav1.GetOptions{})
		require.NoError(t, err)
	})
}

// bindFails reports an error if a RoleBinding "climb" exists in ns.
func bindFails(ctx context.Context, admin kubernetes.Interface, ns string) error {
	_, err := admin.RbacV1().RoleBindings(ns).Get(ctx, "climb", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		return errors.New("a RoleBinding climb exists in " + ns)
	}
	return err
}
