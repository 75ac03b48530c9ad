// Package reconcile owns the agent's reconcile core: it converges one
// environment's namespace on a desired-state document with server-side
// apply, and prunes what the document no longer has.
//
// Every object it makes carries the managed-by label and a spec-hash
// annotation, the SHA-256 of the apply configuration it was made from. A
// reconcile reads the namespace and one LIST per kind, and writes only the
// objects whose hash differs: an unchanged environment costs no write, even
// for a Reconciler that has just taken over leadership, because everything
// it needs to know lives in the cluster, not in memory. The namespace's
// applied-revision and applied-hash annotations are written last, so a new
// leader never believes more is applied than is.
//
// A held service is never touched: neither applied nor pruned.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/desiredstate"
)

// DefaultFieldManager is the server-side apply field manager when Config
// leaves it empty. Every replica of the agent must use the same one, or a
// new leader would fight the old one's fields.
const DefaultFieldManager = "nebulactrl-agent"

// Outcome states.
const (
	StateApplied = "applied"
	StateHeld    = "held"
	StateFailed  = "failed"
)

// Config configures a Reconciler.
type Config struct {
	// Client talks to the cluster. Required.
	Client kubernetes.Interface
	// FieldManager owns the fields the agent applies; DefaultFieldManager
	// when empty.
	FieldManager string
	// Logger receives what the reconcile did; discarded when nil.
	Logger *slog.Logger
}

// Validate reports every problem of the configuration at once.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("reconcile: Config.Client is required"))
	}
	if len(c.FieldManager) > 128 {
		// The API server's limit for a field manager name.
		errs = append(errs, fmt.Errorf("reconcile: Config.FieldManager %q is longer than 128 characters", c.FieldManager))
	}
	return errors.Join(errs...)
}

// Reconciler converges namespaces on desired-state documents. It keeps no
// state between calls: all it knows is read from the cluster, which is what
// makes a fresh Reconciler on a new leader as cheap as the old one.
type Reconciler struct {
	client       kubernetes.Interface
	fieldManager string
	log          *slog.Logger
	// mu serialises Apply: two overlapping reconciles of one environment
	// could prune what the other just applied.
	mu sync.Mutex
}

// New returns a Reconciler for cfg.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{client: cfg.Client, fieldManager: cfg.FieldManager, log: cfg.Logger}
	if r.fieldManager == "" {
		r.fieldManager = DefaultFieldManager
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Outcome is what became of one service of the document.
type Outcome struct {
	Service string
	// State is StateApplied, StateHeld or StateFailed.
	State string
	// Reason is the held reason, or why the service failed (for a
	// Kubernetes error, its message, such as a Forbidden); empty when
	// applied.
	Reason string
}

// Result is what one Apply did.
type Result struct {
	// Environment is the document's environment id.
	Environment string
	Revision    int
	// Ignored is set when the revision is not newer than the one applied:
	// nothing was read beyond the namespace and nothing was written.
	Ignored bool
	// Services has one outcome per service of the document, sorted by name.
	Services []Outcome
}

// Apply converges doc.Environment.Namespace on doc, as revision revision
// whose document hash is hash.
//
// A revision not newer than the namespace's applied revision is ignored.
// Otherwise every service that is not held is applied and its stale objects
// pruned, objects of services the document no longer has are pruned, and the
// namespace is annotated with revision and hash, even when some services
// failed: their outcomes say so, and the next revision retries them. The
// error is for what stops the whole environment: an invalid document, or a
// namespace that cannot be read or applied. Failures to prune objects of
// removed services are logged; they are retried with the next revision.
func (r *Reconciler) Apply(ctx context.Context, revision int, hash string, doc desiredstate.Document) (Result, error) {
	env := doc.Environment
	ns := env.Namespace
	res := Result{Environment: env.ID, Revision: revision}
	if revision <= 0 {
		return res, fmt.Errorf("reconcile: revision %d of environment %s: revisions start at 1", revision, env.ID)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return res, fmt.Errorf("reconcile: environment %s: namespace %q: %s", env.ID, ns, strings.Join(errs, "; "))
	}
	if err := doc.Validate(); err != nil {
		return res, fmt.Errorf("reconcile: revision %d of environment %s: %w", revision, env.ID, err)
	}

	r.mu.Lock()
	defer r.mu.Unlock()

	live, err := r.getNamespace(ctx, ns)
	if err != nil {
		return res, err
	}
	applied, _, err := appliedAnnotations(live)
	if err != nil {
		// Only a hand edit makes the annotation unreadable. Applying is
		// always safe (the document is the whole state), so go on rather
		// than stall the environment until someone notices.
		r.log.WarnContext(ctx, "reconcile: ignoring an unreadable applied revision", "namespace", ns, "err", err)
		applied = 0
	}
	if revision <= applied {
		res.Ignored = true
		r.log.DebugContext(ctx, "reconcile: revision ignored", "namespace", ns, "revision", revision, "applied", applied)
		return res, nil
	}
	if live != nil && live.DeletionTimestamp != nil {
		return res, fmt.Errorf("reconcile: namespace %s is being deleted", ns)
	}

	w := &writes{}
	if err := r.ensureNamespace(ctx, env, live, w); err != nil {
		return res, err
	}

	st := r.readLive(ctx, ns)
	res.Services = r.reconcileServices(ctx, ns, doc, st, w)
	r.pruneRemoved(ctx, ns, doc, st, w)

	// A cancelled reconcile has outcomes that mean nothing; recording the
	// revision would make the next leader skip a half-applied document.
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("reconcile: revision %d of %s: %w", revision, ns, err)
	}
	// revision > applied here, so the record always moves: the only
	// unchanged record is the ignored case above.
	if err := r.applyNamespace(ctx, env, strconv.Itoa(revision), hash); err != nil {
		return res, err
	}
	w.applied++
	r.log.InfoContext(ctx, "reconcile: revision applied", "namespace", ns, "revision", revision,
		"applies", w.applied, "deletes", w.deleted, "failed", countFailed(res.Services))
	return res, nil
}

// AppliedRevision returns the revision and document hash last applied to
// namespace, from its annotations; 0 and "" when there are none or the
// namespace does not exist.
func (r *Reconciler) AppliedRevision(ctx context.Context, namespace string) (int, string, error) {
	ns, err := r.getNamespace(ctx, namespace)
	if err != nil {
		return 0, "", err
	}
	return appliedAnnotations(ns)
}

// writes counts the write calls of one Apply, for the log line that says
// what a reconcile cost.
type writes struct{ applied, deleted int }

// reconcileServices applies every service of the document that is not held,
// in name order, and returns their outcomes.
func (r *Reconciler) reconcileServices(ctx context.Context, ns string, doc desiredstate.Document, st liveState, w *writes) []Outcome {
	services := slices.Clone(doc.Services)
	slices.SortFunc(services, func(a, b desiredstate.Service) int { return strings.Compare(a.Name, b.Name) })

	// Two services whose object names coincide (service "a" with process
	// "b-c" and service "a-b" with process "c") would overwrite each
	// other on every reconcile; the second one fails instead.
	owner := map[kind]map[string]string{}
	out := make([]Outcome, 0, len(services))
	for _, s := range services {
		if s.Held {
			out = append(out, Outcome{Service: s.Name, State: StateHeld, Reason: s.HeldReason})
			continue
		}
		err := r.reconcileService(ctx, ns, doc.Environment, s, st, owner, w)
		if err != nil {
			r.log.WarnContext(ctx, "reconcile: service failed", "namespace", ns, "service", s.Name, "err", err)
			out = append(out, Outcome{Service: s.Name, State: StateFailed, Reason: reason(err)})
			continue
		}
		out = append(out, Outcome{Service: s.Name, State: StateApplied})
	}
	return out
}

// reconcileService applies one service's objects, then prunes those of its
// objects the document no longer has (old releases, removed domains). It
// prunes only after everything applied: a service that failed keeps running
// what it ran.
func (r *Reconciler) reconcileService(ctx context.Context, ns string, env desiredstate.Environment, s desiredstate.Service,
	st liveState, owner map[kind]map[string]string, w *writes) error {
	plan, err := planService(ns, env, s)
	if err != nil {
		return err
	}
	for _, o := range plan.objects {
		if other, ok := owner[o.kind][o.name]; ok {
			return fmt.Errorf("%s %s is also the name of an object of service %s", o.kind, o.name, other)
		}
		if owner[o.kind] == nil {
			owner[o.kind] = map[string]string{}
		}
		owner[o.kind][o.name] = s.Name
	}

	// A kind that could not be listed fails the service before anything
	// of it is written, rather than half-way through.
	for _, o := range plan.objects {
		if err := st.errs[o.kind]; err != nil {
			return err
		}
	}
	for _, o := range plan.objects {
		cur, exists := st.objects[o.kind][o.name]
		if exists && cur.service != plan.label {
			return fmt.Errorf("%s %s already exists and belongs to service %q", o.kind, o.name, cur.service)
		}
		if exists && cur.hash == o.hash {
			continue
		}
		if o.kind == kindSecret && exists && !sameData(cur.data, o.data) {
			// The Secret is immutable and its name carries the release
			// number: other content under the same name means two
			// different releases claim one number.
			return fmt.Errorf("Secret %s already exists with other content; a changed variable needs a new release number", o.name)
		}
		if err := r.applyObject(ctx, o); err != nil {
			return err
		}
		w.applied++
	}

	for _, k := range slices.Backward(kinds) {
		if st.errs[k] != nil {
			// Not listed, so nothing is known to be stale; the apply
			// above already failed if the service needed this kind.
			continue
		}
		want := plan.names(k)
		for _, cur := range sortedObjects(st.objects[k]) {
			if cur.service != plan.label || want[cur.name] {
				continue
			}
			if err := r.deleteObject(ctx, ns, k, cur); err != nil {
				return err
			}
			w.deleted++
		}
	}
	return nil
}

// pruneRemoved deletes the objects of services the document no longer has.
// Objects without a service label are not the agent's to judge and are left
// alone, as is everything of a held service (it is in the document).
func (r *Reconciler) pruneRemoved(ctx context.Context, ns string, doc desiredstate.Document, st liveState, w *writes) {
	known := map[string]bool{}
	for _, s := range doc.Services {
		known[labelValue(s.Name)] = true
	}
	for _, k := range slices.Backward(kinds) {
		if err := st.errs[k]; err != nil {
			r.log.WarnContext(ctx, "reconcile: cannot prune removed services' objects", "namespace", ns, "kind", k, "err", err)
			continue
		}
		for _, cur := range sortedObjects(st.objects[k]) {
			if cur.service == "" || known[cur.service] {
				continue
			}
			if err := r.deleteObject(ctx, ns, k, cur); err != nil {
				r.log.WarnContext(ctx, "reconcile: pruning a removed service", "namespace", ns, "service", cur.service, "err", err)
				continue
			}
			w.deleted++
		}
	}
}

// sortedObjects returns m's objects by name, so deletes happen in the same
// order on every run and in every log.
func sortedObjects(m map[string]liveObject) []liveObject {
	out := make([]liveObject, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b liveObject) int { return strings.Compare(a.name, b.name) })
	return out
}

// reason is an Outcome's Reason for err: the Kubernetes error's own message
// when there is one (it names the object and the refusal, as in "... is
// forbidden: User ... cannot patch resource ingresses"), otherwise err's.
func reason(err error) string {
	if status, ok := errors.AsType[*apierrors.StatusError](err); ok {
		return status.Error()
	}
	return err.Error()
}

func countFailed(out []Outcome) int {
	n := 0
	for _, o := range out {
		if o.State == StateFailed {
			n++
		}
	}
	return n
}

// getNamespace returns the namespace, or nil when it does not exist.
func (r *Reconciler) getNamespace(ctx context.Context, name string) (*namespaceInfo, error) {
	ns, err := r.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile: reading namespace %s: %w", name, err)
	}
	return &namespaceInfo{Annotations: ns.Annotations, DeletionTimestamp: ns.DeletionTimestamp}, nil
}
