package reconcile

import (
	"bytes"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
)

// liveObject is what the agent needs to know of a managed object in the
// cluster: who it belongs to and whether it already has the content wanted.
type liveObject struct {
	name    string
	uid     types.UID
	service string // the nebulactrl.io/service label; "" when it has none
	release string // the nebulactrl.io/release label; "" when it has none
	hash    string // the spec-hash annotation
	// switchedAt is the switched-at annotation of a Service, or of the
	// Secret of a release of a service without a Service: when traffic (or,
	// without a port, the service's work) moved to the release.
	switchedAt string
	data       map[string][]byte
	// selector is a Service's selector.
	selector map[string]string
	// status is a Deployment's.
	status deploymentStatus
}

// deploymentStatus is what the reconcile needs to know whether a
// Deployment's pods are all ready with its current spec.
type deploymentStatus struct {
	generation, observed int64
	replicas             int32 // spec.replicas; 1 when unset, as the API server defaults it
	ready, updated       int32
}

// settled reports whether the Deployment runs want pods of its current spec,
// all of them ready.
func (d deploymentStatus) settled(want int32) bool {
	return d.observed >= d.generation && d.replicas == want && d.updated == want && d.ready == want
}

// liveState is the managed objects of one namespace by kind and name. A kind
// that could not be listed has an error instead: the agent then neither
// applies nor prunes objects of that kind, because it cannot tell what is
// there.
type liveState struct {
	objects map[kind]map[string]liveObject
	errs    map[kind]error
}

// listPage is the page size of the LISTs: big enough that an environment
// takes one request per kind, small enough to bound the agent's memory.
const listPage = 500

// readLive lists the managed objects of every kind in ns. These are the
// reconcile's only reads besides the namespace: one LIST per kind, so an
// unchanged environment costs four reads and no write.
func (r *Reconciler) readLive(ctx context.Context, ns string) liveState {
	st := liveState{objects: map[kind]map[string]liveObject{}, errs: map[kind]error{}}
	for _, k := range kinds {
		objs, err := r.list(ctx, ns, k)
		if err != nil {
			st.errs[k] = err
			continue
		}
		st.objects[k] = objs
	}
	return st
}

// list lists the managed objects of kind k in ns, page by page.
func (r *Reconciler) list(ctx context.Context, ns string, k kind) (map[string]liveObject, error) {
	out := map[string]liveObject{}
	opts := metav1.ListOptions{LabelSelector: managedSelector, Limit: listPage}
	for {
		var (
			meta      []metav1.ObjectMeta
			datas     []map[string][]byte
			selectors []map[string]string
			statuses  []deploymentStatus
			cont      string
		)
		switch k {
		case kindSecret:
			l, err := r.client.CoreV1().Secrets(ns).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("listing Secrets in %s: %w", ns, err)
			}
			for _, o := range l.Items {
				meta, datas = append(meta, o.ObjectMeta), append(datas, o.Data)
			}
			cont = l.Continue
		case kindDeployment:
			l, err := r.client.AppsV1().Deployments(ns).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("listing Deployments in %s: %w", ns, err)
			}
			for _, o := range l.Items {
				meta, datas = append(meta, o.ObjectMeta), append(datas, nil)
				st := deploymentStatus{generation: o.Generation, observed: o.Status.ObservedGeneration, replicas: 1,
					ready: o.Status.ReadyReplicas, updated: o.Status.UpdatedReplicas}
				if o.Spec.Replicas != nil {
					st.replicas = *o.Spec.Replicas
				}
				statuses = append(statuses, st)
			}
			cont = l.Continue
		case kindService:
			l, err := r.client.CoreV1().Services(ns).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("listing Services in %s: %w", ns, err)
			}
			for _, o := range l.Items {
				meta, datas = append(meta, o.ObjectMeta), append(datas, nil)
				selectors = append(selectors, o.Spec.Selector)
			}
			cont = l.Continue
		case kindIngress:
			l, err := r.client.NetworkingV1().Ingresses(ns).List(ctx, opts)
			if err != nil {
				return nil, fmt.Errorf("listing Ingresses in %s: %w", ns, err)
			}
			for _, o := range l.Items {
				meta, datas = append(meta, o.ObjectMeta), append(datas, nil)
			}
			cont = l.Continue
		default:
			return nil, fmt.Errorf("listing %s: unknown kind", k)
		}
		for i, m := range meta {
			o := liveObject{
				name:       m.Name,
				uid:        m.UID,
				service:    m.Labels[labelService],
				release:    m.Labels[labelRelease],
				hash:       m.Annotations[annotationSpecHash],
				switchedAt: m.Annotations[annotationSwitchedAt],
				data:       datas[i],
			}
			if selectors != nil {
				o.selector = selectors[i]
			}
			if statuses != nil {
				o.status = statuses[i]
			}
			out[m.Name] = o
		}
		if cont == "" {
			return out, nil
		}
		opts.Continue = cont
	}
}

// applyObject server-side applies one object with the agent's field
// manager, forcing ownership: the agent is the only writer of what it
// manages, and a conflict with a hand edit should end in the document's
// favour rather than in a stuck environment.
//
// switchedAt, when not empty, is written as the switched-at annotation of a
// Secret or Service. Every apply of an object that has one must carry it:
// server-side apply removes the fields its manager applied before and now
// leaves out.
func (r *Reconciler) applyObject(ctx context.Context, o desired, switchedAt string) error {
	opts := metav1.ApplyOptions{FieldManager: r.fieldManager, Force: true}
	var err error
	switch cfg := o.cfg.(type) {
	case *corev1ac.SecretApplyConfiguration:
		if switchedAt != "" {
			cfg.WithAnnotations(map[string]string{annotationSwitchedAt: switchedAt})
		}
		_, err = r.client.CoreV1().Secrets(*cfg.Namespace).Apply(ctx, cfg, opts)
	case *appsv1ac.DeploymentApplyConfiguration:
		_, err = r.client.AppsV1().Deployments(*cfg.Namespace).Apply(ctx, cfg, opts)
	case *corev1ac.ServiceApplyConfiguration:
		if switchedAt != "" {
			cfg.WithAnnotations(map[string]string{annotationSwitchedAt: switchedAt})
		}
		_, err = r.client.CoreV1().Services(*cfg.Namespace).Apply(ctx, cfg, opts)
	case *networkingv1ac.IngressApplyConfiguration:
		_, err = r.client.NetworkingV1().Ingresses(*cfg.Namespace).Apply(ctx, cfg, opts)
	default:
		return fmt.Errorf("applying %s %s: unsupported apply configuration %T", o.kind, o.name, o.cfg)
	}
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", o.kind, o.name, err)
	}
	return nil
}

// deleteObject deletes one managed object. The UID precondition makes sure
// the object deleted is the one that was listed, not a namesake created
// since; Background propagation lets the garbage collector remove a
// Deployment's ReplicaSets and pods without holding up the reconcile.
func (r *Reconciler) deleteObject(ctx context.Context, ns string, k kind, o liveObject) error {
	propagation := metav1.DeletePropagationBackground
	uid := o.uid
	opts := metav1.DeleteOptions{PropagationPolicy: &propagation, Preconditions: &metav1.Preconditions{UID: &uid}}
	var err error
	switch k {
	case kindSecret:
		err = r.client.CoreV1().Secrets(ns).Delete(ctx, o.name, opts)
	case kindDeployment:
		err = r.client.AppsV1().Deployments(ns).Delete(ctx, o.name, opts)
	case kindService:
		err = r.client.CoreV1().Services(ns).Delete(ctx, o.name, opts)
	case kindIngress:
		err = r.client.NetworkingV1().Ingresses(ns).Delete(ctx, o.name, opts)
	default:
		return fmt.Errorf("deleting %s %s: unknown kind", k, o.name)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting %s %s: %w", k, o.name, err)
	}
	return nil
}

// sameData reports whether two Secrets hold the same keys and values; an
// empty Secret reads back with nil data, so nil and empty are equal.
func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}
