package reconcile

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// namespaceInfo is what the reconcile needs of the live namespace.
type namespaceInfo struct {
	Annotations       map[string]string
	DeletionTimestamp *metav1.Time
}

// appliedAnnotations reads the applied revision and hash of a namespace; 0
// and "" for a namespace that does not exist or has never been applied.
func appliedAnnotations(ns *namespaceInfo) (int, string, error) {
	if ns == nil {
		return 0, "", nil
	}
	v, ok := ns.Annotations[annotationAppliedRevision]
	if !ok {
		return 0, "", nil
	}
	rev, err := strconv.Atoi(v)
	if err != nil || rev < 0 {
		return 0, "", fmt.Errorf("reconcile: annotation %s=%q is not a revision number", annotationAppliedRevision, v)
	}
	return rev, ns.Annotations[annotationAppliedHash], nil
}

// namespaceConfig is the apply configuration of the environment's namespace.
// Its spec hash covers the labels (and the Binding, when there is one) only,
// so that the applied-revision annotations, which change with every
// revision, do not make the namespace look changed.
//
// Every apply of the namespace carries the applied annotations: server-side
// apply removes fields the manager applied before and now leaves out, so an
// apply without them would erase the record of what is applied. rev and hash
// are those to write; rev "" writes none (a namespace never applied).
func namespaceConfig(env desiredstate.Environment, b *Binding, rev, hash string) (*corev1ac.NamespaceApplyConfiguration, string, error) {
	cfg := corev1ac.Namespace(env.Namespace).WithLabels(envLabels(env))
	var h string
	var err error
	if b == nil {
		h, err = specHash(cfg)
	} else {
		// A namespace made before the agent bound its role in each one is
		// applied once more, with the binding.
		h, err = specHash(struct {
			Namespace *corev1ac.NamespaceApplyConfiguration
			Binding   Binding
		}{cfg, *b})
	}
	if err != nil {
		return nil, "", fmt.Errorf("reconcile: namespace %s: %w", env.Namespace, err)
	}
	return cfg.WithAnnotations(namespaceAnnotations(h, rev, hash)), h, nil
}

func namespaceAnnotations(specHash, rev, hash string) map[string]string {
	ann := map[string]string{}
	if specHash != "" {
		ann[annotationSpecHash] = specHash
	}
	if rev != "" {
		ann[annotationAppliedRevision] = rev
		ann[annotationAppliedHash] = hash
	}
	return ann
}

// ensureNamespace applies the namespace before anything goes in it, unless
// it already has the wanted labels. It keeps the applied annotations it
// finds: the revision being applied is not applied yet.
//
// With a Binding, the agent's rights in the namespace are bound before the
// spec hash is written: a namespace is not taken as done until they are, so
// a binding that failed is tried again by the next reconcile.
func (r *Reconciler) ensureNamespace(ctx context.Context, env desiredstate.Environment, live *namespaceInfo, w *writes) error {
	var rev, hash string
	if live != nil {
		rev, hash = live.Annotations[annotationAppliedRevision], live.Annotations[annotationAppliedHash]
	}
	cfg, h, err := namespaceConfig(env, r.binding, rev, hash)
	if err != nil {
		return err
	}
	if live != nil && live.Annotations[annotationSpecHash] == h {
		return nil
	}
	if r.binding != nil {
		if live == nil {
			pre := corev1ac.Namespace(env.Namespace).WithLabels(envLabels(env)).WithAnnotations(namespaceAnnotations("", rev, hash))
			if err := r.apply(ctx, pre); err != nil {
				return err
			}
			w.applied++
		}
		created, err := r.bind(ctx, env.Namespace)
		if err != nil {
			return err
		}
		if created {
			w.applied++
		}
	}
	if err := r.apply(ctx, cfg); err != nil {
		return err
	}
	w.applied++
	return nil
}

// applyNamespace records rev and hash as applied: the reconcile's last write.
func (r *Reconciler) applyNamespace(ctx context.Context, env desiredstate.Environment, rev, hash string) error {
	cfg, _, err := namespaceConfig(env, r.binding, rev, hash)
	if err != nil {
		return err
	}
	return r.apply(ctx, cfg)
}

func (r *Reconciler) apply(ctx context.Context, cfg *corev1ac.NamespaceApplyConfiguration) error {
	_, err := r.client.CoreV1().Namespaces().Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: r.fieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("reconcile: applying namespace %s: %w", *cfg.Name, err)
	}
	return nil
}
