// Package installtest applies the install manifest to a test cluster, object
// by object as kubectl apply would create them, so that the tests of every
// package apply it the same way and a new kind of object in the manifest is
// handled in one place.
package installtest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// Objects decodes the manifest's documents, in order.
func Objects(manifest string) ([]runtime.Object, error) {
	var out []runtime.Object
	for i, doc := range strings.Split(manifest, "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d of the manifest: %w", i, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

// Create creates one object of the manifest; a kind the manifest does not
// hold is an error.
func Create(ctx context.Context, cs kubernetes.Interface, obj runtime.Object) error {
	var err error
	opts := metav1.CreateOptions{}
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = cs.CoreV1().Namespaces().Create(ctx, o, opts)
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *corev1.Secret:
		_, err = cs.CoreV1().Secrets(o.Namespace).Create(ctx, o, opts)
	case *corev1.ConfigMap:
		_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *corev1.Service:
		_, err = cs.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	case *corev1.PersistentVolumeClaim:
		_, err = cs.CoreV1().PersistentVolumeClaims(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.Role:
		_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.RoleBinding:
		_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, opts)
	case *appsv1.StatefulSet:
		_, err = cs.AppsV1().StatefulSets(o.Namespace).Create(ctx, o, opts)
	case *appsv1.Deployment:
		_, err = cs.AppsV1().Deployments(o.Namespace).Create(ctx, o, opts)
	case *appsv1.DaemonSet:
		_, err = cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
	case *policyv1.PodDisruptionBudget:
		_, err = cs.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, opts)
	case *admissionv1.ValidatingAdmissionPolicy:
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, opts)
	case *admissionv1.ValidatingAdmissionPolicyBinding:
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, opts)
	default:
		return fmt.Errorf("the manifest holds an unexpected %T", obj)
	}
	if err != nil {
		return fmt.Errorf("creating %T: %w", obj, err)
	}
	return nil
}

// Apply creates every object of the manifest, skipping those skip says to
// (nil: none), and fails the test at the first error.
func Apply(t testing.TB, cs kubernetes.Interface, manifest string, skip func(runtime.Object) bool) {
	t.Helper()
	objs, err := Objects(manifest)
	if err != nil {
		t.Fatalf("installtest: %v", err)
	}
	for _, obj := range objs {
		if skip != nil && skip(obj) {
			continue
		}
		if err := Create(t.Context(), cs, obj); err != nil {
			t.Fatalf("installtest: %v", err)
		}
	}
}

// NoAgentPod is a skip for Apply: the agent's StatefulSet, for the tests
// that run the agent in process (as the manifest's service account) rather
// than as its pod.
func NoAgentPod(obj runtime.Object) bool {
	_, agentPod := obj.(*appsv1.StatefulSet)
	return agentPod
}
