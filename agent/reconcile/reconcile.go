// Package reconcile owns the agent's reconcile core: it converges one
// environment's namespace on a desired-state document with server-side
// apply, rolls each service's new release out in stages, and prunes what the
// document no longer has.
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
// A new release rolls out in stages (see Rollout): its Secret and
// Deployments are applied next to the serving release's; the Service's
// selector, which names a release, moves to it only once every pod of it is
// ready; the old release is deleted a grace period after that switch. The
// switch time is kept in the cluster (the switched-at annotation of the
// Service, or of the release's Secret for a service without a port), so a
// fresh Reconciler continues a rollout where the last one left it. A rollout
// progresses only when Apply runs: the caller calls it again, with the same
// revision, until the Result is Settled.
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
	"time"

	corev1 "k8s.io/api/core/v1"
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

// DefaultRetireGrace is how long an old release keeps running after traffic
// moved to the new one, when Config leaves RetireGrace zero: long enough for
// the requests it is serving to finish.
const DefaultRetireGrace = 15 * time.Second

// Outcome states.
const (
	StateApplied = "applied"
	StateHeld    = "held"
	StateFailed  = "failed"
	// StateRetrying is a service that met a transient error (see
	// IsTransient): nothing is decided about it yet, and the revision is not
	// recorded as applied until a later Apply gets through.
	StateRetrying = "retrying"
)

// Config configures a Reconciler.
type Config struct {
	// Client talks to the cluster. Required.
	Client kubernetes.Interface
	// FieldManager owns the fields the agent applies; DefaultFieldManager
	// when empty.
	FieldManager string
	// RetireGrace is how long an old release keeps running after the switch
	// to the new one; DefaultRetireGrace when zero.
	RetireGrace time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives what the reconcile did; discarded when nil.
	Logger *slog.Logger
	// Binding, when set, is bound in every namespace the Reconciler
	// creates, before anything else goes in it (see Binding).
	Binding *Binding
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
	if c.RetireGrace < 0 {
		errs = append(errs, fmt.Errorf("reconcile: Config.RetireGrace %v is negative", c.RetireGrace))
	}
	if c.Binding != nil {
		errs = append(errs, c.Binding.Validate())
	}
	return errors.Join(errs...)
}

// Reconciler converges namespaces on desired-state documents. It keeps no
// state between calls: all it knows is read from the cluster, which is what
// makes a fresh Reconciler on a new leader as cheap as the old one.
type Reconciler struct {
	client       kubernetes.Interface
	fieldManager string
	grace        time.Duration
	now          func() time.Time
	log          *slog.Logger
	binding      *Binding
	// mu serialises Apply: two overlapping reconciles of one environment
	// could prune what the other just applied.
	mu sync.Mutex
}

// New returns a Reconciler for cfg.
func New(cfg Config) (*Reconciler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reconciler{client: cfg.Client, fieldManager: cfg.FieldManager, grace: cfg.RetireGrace, now: cfg.Now, log: cfg.Logger, binding: cfg.Binding}
	if r.fieldManager == "" {
		r.fieldManager = DefaultFieldManager
	}
	if r.grace == 0 {
		r.grace = DefaultRetireGrace
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Outcome is what became of one service of the document.
type Outcome struct {
	Service string
	// State is StateApplied, StateHeld, StateFailed or StateRetrying.
	// Applied means the release's objects are applied: its rollout (see
	// Rollout) may still be under way.
	State string
	// Reason is the held reason, or why the service failed or is retried
	// (for a Kubernetes error, its message, such as a Forbidden); empty when
	// applied.
	Reason string
}

// Result is what one Apply did.
type Result struct {
	// Environment is the document's environment id.
	Environment string
	Revision    int
	// Ignored is set when the revision is older than the one applied, or is
	// the applied one with another document hash: nothing was read beyond
	// the namespace and nothing was written.
	Ignored bool
	// Recorded is set when this call recorded Revision as applied on the
	// namespace: it was newer than the applied one and no service met a
	// transient error.
	Recorded bool
	// Services has one outcome per service of the document, sorted by name;
	// empty when Ignored.
	Services []Outcome
	// Rollouts has the rollout of every service that is neither held nor
	// failed before its release's objects were applied, sorted by service.
	Rollouts []Rollout
	// Settled is set when there is nothing left to do for this revision:
	// every rollout succeeded (or its service failed for good) and nothing
	// needs retrying. Until then the caller calls Apply again with the same
	// revision, which continues the rollouts.
	Settled bool
	// pruneRetry is set when pruning a removed service met a transient
	// error.
	pruneRetry bool
}

// Retry reports whether something met a transient error: the caller should
// call Apply again after a backoff.
func (r Result) Retry() bool {
	if r.pruneRetry {
		return true
	}
	for _, o := range r.Services {
		if o.State == StateRetrying {
			return true
		}
	}
	return false
}

// Apply converges doc.Environment.Namespace on doc, as revision revision
// whose document hash is hash.
//
// A revision older than the namespace's applied revision is ignored, as is
// the applied revision with another hash. The applied revision with its own
// hash continues the rollouts it started (the progress passes). A newer
// revision is applied: every service that is not held has its release's
// objects applied and its rollout moved as far as the cluster allows,
// objects of services the document no longer has are pruned, and the
// namespace is annotated with revision and hash, even when some services
// failed for good: their outcomes say so, and the next revision retries
// them. When a service met a transient error the revision is not recorded:
// the caller retries it.
//
// The error is for what stops the whole environment: an invalid document,
// or a namespace that cannot be read or applied (IsTransient tells whether
// retrying may help).
func (r *Reconciler) Apply(ctx context.Context, revision int, hash string, doc desiredstate.Document) (Result, error) {
	return r.reconcile(ctx, revision, hash, doc, false)
}

// Rewind is Apply for a revision older than the namespace's applied one, or
// the same number with another document: the control plane that sent it was
// restored from a backup taken before those were applied, and what it knows
// is the state to return to. It is applied, not ignored, and recorded as the
// applied revision; the same revision with its own hash is a progress pass,
// as for Apply.
func (r *Reconciler) Rewind(ctx context.Context, revision int, hash string, doc desiredstate.Document) (Result, error) {
	return r.reconcile(ctx, revision, hash, doc, true)
}

func (r *Reconciler) reconcile(ctx context.Context, revision int, hash string, doc desiredstate.Document, rewind bool) (Result, error) {
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
	applied, appliedHash, err := appliedAnnotations(live)
	if err != nil {
		// Only a hand edit makes the annotation unreadable. Applying is
		// always safe (the document is the whole state), so go on rather
		// than stall the environment until someone notices.
		r.log.WarnContext(ctx, "reconcile: ignoring an unreadable applied revision", "namespace", ns, "err", err)
		applied = 0
	}
	if !rewind && (revision < applied || revision == applied && hash != appliedHash) {
		res.Ignored = true
		r.log.DebugContext(ctx, "reconcile: revision ignored", "namespace", ns, "revision", revision, "applied", applied)
		return res, nil
	}
	progress := revision == applied && hash == appliedHash
	if rewind && !progress {
		r.log.WarnContext(ctx, "reconcile: rewinding to the control plane's revision", "namespace", ns, "revision", revision,
			"applied", applied)
	}
	if live != nil && live.DeletionTimestamp != nil {
		return res, fmt.Errorf("reconcile: namespace %s is being deleted", ns)
	}

	w := &writes{}
	if err := r.ensureNamespace(ctx, env, live, w); err != nil {
		return res, err
	}

	p := &pass{ns: ns, env: env, st: r.readLive(ctx, ns), owner: map[kind]map[string]string{}, w: w, now: r.now().UTC()}
	res.Services, res.Rollouts = r.reconcileServices(ctx, p, doc)
	res.pruneRetry = r.pruneRemoved(ctx, p, doc)

	// A cancelled reconcile has outcomes that mean nothing; recording the
	// revision would make the next leader skip a half-applied document.
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("reconcile: revision %d of %s: %w", revision, ns, err)
	}
	res.Settled = !res.Retry()
	for _, ro := range res.Rollouts {
		if ro.Stage != StageSucceeded && !ro.failed {
			res.Settled = false
		}
	}
	if !progress && !res.Retry() {
		if err := r.applyNamespace(ctx, env, strconv.Itoa(revision), hash); err != nil {
			return res, err
		}
		w.applied++
		res.Recorded = true
	}
	if w.applied+w.deleted > 0 || res.Recorded {
		r.log.InfoContext(ctx, "reconcile: pass", "namespace", ns, "revision", revision, "recorded", res.Recorded,
			"settled", res.Settled, "applies", w.applied, "deletes", w.deleted, "failed", countState(res.Services, StateFailed),
			"retrying", countState(res.Services, StateRetrying))
	}
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

// pass is one Apply's view of the namespace and what it did so far.
type pass struct {
	ns  string
	env desiredstate.Environment
	st  liveState
	// owner maps each planned object name to its service: two services
	// whose object names coincide (service "a" with process "b-c" and
	// service "a-b" with process "c") would overwrite each other on every
	// reconcile; the second one fails instead.
	owner map[kind]map[string]string
	w     *writes
	now   time.Time
	// events are the namespace's Warning events about pods, read at most
	// once a pass, when a rollout waits for pods that are not ready.
	events     []corev1.Event
	eventsRead bool
}

// reconcileServices reconciles every service of the document that is not
// held, in name order, and returns their outcomes and rollouts.
func (r *Reconciler) reconcileServices(ctx context.Context, p *pass, doc desiredstate.Document) ([]Outcome, []Rollout) {
	services := slices.Clone(doc.Services)
	slices.SortFunc(services, func(a, b desiredstate.Service) int { return strings.Compare(a.Name, b.Name) })

	out := make([]Outcome, 0, len(services))
	var rollouts []Rollout
	for _, s := range services {
		if s.Held {
			out = append(out, Outcome{Service: s.Name, State: StateHeld, Reason: s.HeldReason})
			continue
		}
		ro, err := r.reconcileService(ctx, p, s)
		switch {
		case err != nil && IsTransient(err):
			r.log.WarnContext(ctx, "reconcile: service meets a transient error, retried", "namespace", p.ns, "service", s.Name, "err", err)
			out = append(out, Outcome{Service: s.Name, State: StateRetrying, Reason: reason(err)})
		case err != nil:
			r.log.WarnContext(ctx, "reconcile: service failed", "namespace", p.ns, "service", s.Name, "err", err)
			out = append(out, Outcome{Service: s.Name, State: StateFailed, Reason: reason(err)})
			if ro != nil {
				ro.failed = true
				ro.Detail = detailText(reason(err))
			}
		default:
			out = append(out, Outcome{Service: s.Name, State: StateApplied})
		}
		if ro != nil {
			rollouts = append(rollouts, *ro)
		}
	}
	return out, rollouts
}

// pruneRemoved deletes the objects of services the document no longer has,
// and reports whether it met a transient error. Objects without a service label are
// not the agent's to judge and are left alone, as is everything of a held
// service (it is in the document).
func (r *Reconciler) pruneRemoved(ctx context.Context, p *pass, doc desiredstate.Document) (retry bool) {
	known := map[string]bool{}
	for _, s := range doc.Services {
		known[labelValue(s.Name)] = true
	}
	for _, k := range slices.Backward(kinds) {
		if err := p.st.errs[k]; err != nil {
			r.log.WarnContext(ctx, "reconcile: cannot prune removed services' objects", "namespace", p.ns, "kind", k, "err", err)
			retry = retry || IsTransient(err)
			continue
		}
		for _, cur := range sortedObjects(p.st.objects[k]) {
			if cur.service == "" || known[cur.service] {
				continue
			}
			if err := r.deleteObject(ctx, p.ns, k, cur); err != nil {
				r.log.WarnContext(ctx, "reconcile: pruning a removed service", "namespace", p.ns, "service", cur.service, "err", err)
				retry = retry || IsTransient(err)
				continue
			}
			p.w.deleted++
		}
	}
	return retry
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

func countState(out []Outcome, state string) int {
	n := 0
	for _, o := range out {
		if o.State == state {
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
