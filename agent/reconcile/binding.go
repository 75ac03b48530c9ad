package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Binding is how the agent gets its rights in the namespaces it manages, and
// only there: the install manifest grants it no right on workloads cluster
// wide, but a ClusterRole (the workload role) that it may bind, and it binds
// it to its own ServiceAccount with a RoleBinding in each environment's
// namespace as it creates it.
type Binding struct {
	// ClusterRole is the workload role; the RoleBinding has its name.
	ClusterRole string
	// Namespace and ServiceAccount name the agent's own ServiceAccount.
	Namespace, ServiceAccount string
}

// Validate reports every problem of the binding at once.
func (b Binding) Validate() error {
	var errs []error
	for what, v := range map[string]string{"ClusterRole": b.ClusterRole, "ServiceAccount": b.ServiceAccount} {
		if msgs := validation.IsDNS1123Subdomain(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("reconcile: Binding.%s %q: %v", what, v, msgs))
		}
	}
	if msgs := validation.IsDNS1123Label(b.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("reconcile: Binding.Namespace %q: %v", b.Namespace, msgs))
	}
	return errors.Join(errs...)
}

// bindWait bounds the wait for a new RoleBinding to take effect: RBAC
// authorises from a cache that learns of it a moment after it is created.
const bindWait = 10 * time.Second

// bind creates the RoleBinding of the workload role in ns, unless it exists,
// and waits until the agent may read Secrets there. It reports whether it
// created the binding.
func (r *Reconciler) bind(ctx context.Context, ns string) (bool, error) {
	b := r.binding
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: b.ClusterRole, Namespace: ns, Labels: map[string]string{labelManagedBy: managedByValue}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.ClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: b.Namespace, Name: b.ServiceAccount}},
	}
	_, err := r.client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{FieldManager: r.fieldManager})
	created := err == nil
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("reconcile: binding ClusterRole %s in namespace %s: %w", b.ClusterRole, ns, err)
	}
	wctx, cancel := context.WithTimeout(ctx, bindWait)
	defer cancel()
	for {
		review, err := r.client.AuthorizationV1().SelfSubjectAccessReviews().Create(wctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "list", Resource: "secrets"}},
		}, metav1.CreateOptions{})
		if err == nil && review.Status.Allowed {
			return created, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return created, ctx.Err()
			}
			// Transient: the next reconcile looks again.
			return created, fmt.Errorf("reconcile: the RoleBinding %s in namespace %s has not taken effect after %v: %w", b.ClusterRole, ns, bindWait, context.DeadlineExceeded)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
