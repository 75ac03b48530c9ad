package build

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	batchlisters "k8s.io/client-go/listers/batch/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/nebulactrl/nebulactrl/transport"
)

// resyncEvery re-examines every build Job and pod now and then, although
// the watches deliver every change: a missed report is then sent late
// rather than never.
const resyncEvery = time.Minute

// Runner starts and stops the build Jobs of a cluster (Set) and reports what
// becomes of them (Run).
type Runner struct {
	cfg Config

	mu sync.Mutex
	// reported is the last state reported per build, so that each state is
	// reported once per Runner; a new Runner (an agent restart) reports the
	// current state again, which the control plane takes idempotently.
	reported map[string]string
	// invalid holds the builds of the set refused by checkSpec (reported
	// failed once, no Job).
	invalid map[string]bool
	// streams follow the build pods' containers, per build, by pod UID and
	// container.
	streams map[string]map[string]*stream
	jobs    batchlisters.JobLister // nil until Run has synced
	pods    corelisters.PodLister
}

// New returns a Runner; it does nothing until Set and Run are called.
func New(cfg Config) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Runner{cfg: cfg.withDefaults(), reported: map[string]string{}, invalid: map[string]bool{},
		streams: map[string]map[string]*stream{}}, nil
}

// Set makes the builds running in the namespace the given set: it creates
// the Secret (the credential) and the Job of each build that has no Job, and
// deletes the Job (with background propagation: its pod goes with it) and
// the Secret of every build not in the set (cancelled, superseded, timed
// out), finished or not. A build whose spec is unusable gets no Job and is
// reported failed. Set reads the API server, not Run's cache, so it works
// before Run has synced.
func (r *Runner) Set(ctx context.Context, builds []transport.BuildSpec) error {
	ns := r.cfg.Namespace
	want := map[string]transport.BuildSpec{}
	var refused []transport.BuildReport
	r.mu.Lock()
	invalid := map[string]bool{}
	for _, b := range builds {
		if err := checkSpec(b); err != nil {
			if !r.invalid[b.ID] {
				refused = append(refused, transport.BuildReport{BuildID: b.ID, State: transport.BuildFailed,
					Reason: transport.Storable("invalid build: "+strings.ReplaceAll(err.Error(), "\n", "; "), transport.MaxMessage), Time: r.cfg.Now()})
			}
			invalid[b.ID] = true
			continue
		}
		want[b.ID] = b
	}
	r.invalid = invalid
	r.mu.Unlock()
	for _, rep := range refused {
		r.cfg.Logger.Warn("refusing a build", "build", rep.BuildID, "reason", rep.Reason)
		r.cfg.Report(rep)
	}

	var errs []error
	jobs, err := r.cfg.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Errorf("listing the build Jobs in %s: %w", ns, err)
	}
	background := metav1.DeletePropagationBackground
	have := map[string]bool{}
	for _, j := range jobs.Items {
		id := j.Labels[BuildIDLabel]
		if _, ok := want[id]; ok {
			have[id] = true
			continue
		}
		if j.DeletionTimestamp != nil {
			continue
		}
		r.cfg.Logger.Info("stopping a build that left the set", "build", id, "job", j.Name)
		err := r.cfg.Client.BatchV1().Jobs(ns).Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: &background})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting build Job %s/%s: %w", ns, j.Name, err))
		}
	}
	// Secrets go by their own label, so that one whose Job was never made
	// (a failed create) goes as well.
	secrets, err := r.cfg.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing the build Secrets in %s: %w", ns, err))
	} else {
		for _, s := range secrets.Items {
			if _, ok := want[s.Labels[BuildIDLabel]]; ok || s.DeletionTimestamp != nil {
				continue
			}
			err := r.cfg.Client.CoreV1().Secrets(ns).Delete(ctx, s.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting build Secret %s/%s: %w", ns, s.Name, err))
			}
		}
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		if !have[id] {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if err := r.create(ctx, want[id]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// create makes a build's Secret, then its Job.
func (r *Runner) create(ctx context.Context, spec transport.BuildSpec) error {
	job, secret := Job(spec, r.cfg)
	ns := r.cfg.Namespace
	if secret != nil {
		_, err := r.cfg.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Left by a Set whose Job create failed: the credential sent
			// now is the one to use. Replaced rather than updated: the
			// agent's Role in the build namespace has no update on Secrets.
			err = r.cfg.Client.CoreV1().Secrets(ns).Delete(ctx, secret.Name, metav1.DeleteOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				_, err = r.cfg.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("creating the Secret of build %s: %w", spec.ID, err)
		}
	}
	_, err := r.cfg.Client.BatchV1().Jobs(ns).Create(ctx, job, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the Job of build %s: %w", spec.ID, err)
	}
	if err == nil {
		r.cfg.Logger.Info("started a build", "build", spec.ID, "service", spec.Service, "job", job.Name)
	}
	return nil
}

// Run watches the namespace's build Jobs and pods until ctx ends, reports
// each build's states (running; then succeeded or failed, once) and streams
// its pods' output. It returns ctx's error, or an error if the watches
// could not start. Call it once per Runner.
func (r *Runner) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.cfg.Client, resyncEvery,
		informers.WithNamespace(r.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	jobInf, podInf := factory.Batch().V1().Jobs(), factory.Core().V1().Pods()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if m, ok := obj.(metav1.Object); ok {
			if id := m.GetLabels()[BuildIDLabel]; id != "" {
				queue.Add(id)
			}
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue}
	if _, err := jobInf.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watching the build Jobs: %w", err)
	}
	if _, err := podInf.Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watching the build pods: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			queue.ShutDown()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("listing the build %v in %s did not complete", typ, r.cfg.Namespace)
		}
	}
	r.mu.Lock()
	r.jobs, r.pods = jobInf.Lister(), podInf.Lister()
	r.mu.Unlock()

	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		id, quit := queue.Get()
		if quit {
			break
		}
		r.process(ctx, id)
		queue.Done(id)
	}
	r.mu.Lock()
	for _, byKey := range r.streams {
		for _, s := range byKey {
			s.cancel()
		}
	}
	r.streams = map[string]map[string]*stream{}
	r.jobs, r.pods = nil, nil
	r.mu.Unlock()
	return ctx.Err()
}

// Running is the number of builds whose Job has not finished, as far as
// Run's watch has seen (0 before Run has synced): what an upgrading agent
// waits for.
func (r *Runner) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.jobs == nil {
		return 0
	}
	jobs, err := r.jobs.List(labels.Everything())
	if err != nil {
		return 0
	}
	n := 0
	for _, j := range jobs {
		if !jobFinished(j) && !terminal(r.reported[j.Labels[BuildIDLabel]]) {
			n++
		}
	}
	return n
}

// process looks at one build as Run's cache has it now: it follows the
// output of its containers that have started, and reports what changed.
func (r *Runner) process(ctx context.Context, id string) {
	r.mu.Lock()
	jobs, pods := r.jobs, r.pods
	r.mu.Unlock()
	if jobs == nil {
		return
	}
	byID := labels.SelectorFromSet(labels.Set{BuildIDLabel: id})
	js, _ := jobs.List(byID)
	ps, _ := pods.List(byID)
	var job *batchv1.Job
	for _, j := range js {
		if job == nil || j.CreationTimestamp.After(job.CreationTimestamp.Time) {
			job = j
		}
	}
	if job == nil {
		// Deleted (left the set): nothing more to report or follow.
		r.forget(id)
		return
	}
	// With backoffLimit 0 a Job has one pod; the newest one, should the
	// Job controller ever replace it.
	var pod *corev1.Pod
	for _, p := range ps {
		if metav1.IsControlledBy(p, job) && (pod == nil || p.CreationTimestamp.After(pod.CreationTimestamp.Time)) {
			pod = p
		}
	}
	r.follow(ctx, id, ps)

	rep, tailFrom := decide(job, pod, r.cfg.NodeRegistry)
	if rep.State == "" {
		return
	}
	r.mu.Lock()
	last := r.reported[id]
	if last == rep.State || terminal(last) {
		r.mu.Unlock()
		return
	}
	r.reported[id] = rep.State
	var st *stream
	if pod != nil && tailFrom != "" {
		st = r.streams[id][streamKey(pod, tailFrom)]
	}
	r.mu.Unlock()

	if rep.State != transport.BuildFailed {
		rep.Time = r.cfg.Now()
		r.cfg.Logger.Info("build "+rep.State, "build", id, "commit", rep.Commit, "digest", rep.Digest)
		r.cfg.Report(rep)
		return
	}
	// A failure carries the tail of the failed container's output, which
	// its stream may still be delivering: wait for that, a bounded time,
	// away from the queue.
	go func() {
		if st != nil {
			rep.LogTail = st.tailAfterEnd(ctx, tailWait)
		}
		rep.Time = r.cfg.Now()
		r.cfg.Logger.Info("build failed", "build", id, "exitCode", rep.ExitCode, "reason", rep.Reason)
		r.cfg.Report(rep)
	}()
}

// forget drops what the Runner keeps of a build that is gone.
func (r *Runner) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reported, id)
	for _, s := range r.streams[id] {
		s.cancel()
	}
	delete(r.streams, id)
}

// decide says what to report of a build from its Job and its pod (nil when
// it has none yet, or none any more): a report with an empty State when
// there is nothing to report, and the container whose output tail belongs
// to a failure. It is pure: what was reported already is the caller's.
func decide(job *batchv1.Job, pod *corev1.Pod, nodeRegistry string) (transport.BuildReport, string) {
	rep := transport.BuildReport{BuildID: job.Labels[BuildIDLabel], Commit: job.Annotations[CommitAnnotation]}
	var clone, build *corev1.ContainerStatus
	if pod != nil {
		clone = containerStatus(pod.Status.InitContainerStatuses, CloneContainer)
		build = containerStatus(pod.Status.ContainerStatuses, BuildContainer)
	}
	deadline := jobCondition(job, "DeadlineExceeded")
	if clone != nil && clone.State.Terminated != nil {
		t := clone.State.Terminated
		res := parseResult(t.Message)
		if res.Commit != "" {
			rep.Commit = res.Commit
		}
		if t.ExitCode != 0 {
			return failure(rep, CloneContainer, t, res, deadline), CloneContainer
		}
	}
	if build != nil {
		if t := build.State.Terminated; t != nil {
			res := parseResult(t.Message)
			if res.Commit != "" {
				rep.Commit = res.Commit
			}
			if t.ExitCode == 0 && res.Digest != "" {
				rep.State = transport.BuildSucceeded
				rep.Image = nodeRegistry + "/" + job.Annotations[ImageAnnotation]
				rep.Digest = res.Digest
				return rep, ""
			}
			if t.ExitCode == 0 && res.Reason == "" {
				res.Reason = "the build container ended without an image digest in its termination message"
			}
			return failure(rep, BuildContainer, t, res, deadline), BuildContainer
		}
		if build.State.Running != nil {
			rep.State = transport.BuildRunning
			return rep, ""
		}
	}
	if failed := jobCondition(job, ""); failed != nil {
		// The Job failed before or without its containers' saying why:
		// the deadline, or its pod gone. What its pod waits for (an image
		// that cannot be pulled) says more than the Job.
		rep.State = transport.BuildFailed
		rep.Reason = failed.Reason + ": " + failed.Message
		if w := waiting(pod); w != "" {
			rep.Reason += "; " + w
		}
		rep.Reason = transport.Storable(rep.Reason, transport.MaxMessage)
		tailFrom := ""
		if build != nil {
			tailFrom = BuildContainer
		} else if clone != nil {
			tailFrom = CloneContainer
		}
		return rep, tailFrom
	}
	return rep, ""
}

// failure is the failed report of a container that ended with a non-zero
// status (or without a digest): the script's exit code and reason when it
// wrote them, else what the kubelet says (OOMKilled, a signal).
func failure(rep transport.BuildReport, container string, t *corev1.ContainerStateTerminated, res result, deadline *batchv1.JobCondition) transport.BuildReport {
	rep.State = transport.BuildFailed
	rep.ExitCode = res.ExitCode
	if rep.ExitCode <= 0 {
		rep.ExitCode = int(max(t.ExitCode, 0))
	}
	rep.Reason = res.Reason
	if rep.Reason == "" {
		rep.Reason = fmt.Sprintf("the %s container ended with exit code %d", container, t.ExitCode)
		if t.Reason != "" {
			rep.Reason += " (" + t.Reason + ")"
		}
		if deadline != nil {
			// Killed at the deadline: that is the news.
			rep.Reason = deadline.Reason + ": " + deadline.Message + "; " + rep.Reason
		}
	}
	rep.Reason = transport.Storable(rep.Reason, transport.MaxMessage)
	return rep
}

// jobCondition returns the Job's true failure condition (FailureTarget is
// set when the outcome is decided, before the pods are stopped; Failed
// after), of the given reason when it is not empty.
func jobCondition(job *batchv1.Job, reason string) *batchv1.JobCondition {
	for i, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue &&
			(reason == "" || c.Reason == reason) {
			return &job.Status.Conditions[i]
		}
	}
	return nil
}

// jobFinished says whether a Job's outcome is decided.
func jobFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobFailed, batchv1.JobSuccessCriteriaMet, batchv1.JobFailureTarget:
			if c.Status == corev1.ConditionTrue {
				return true
			}
		}
	}
	return false
}

// waiting says what a pod's containers are waiting for, if anything.
func waiting(pod *corev1.Pod) string {
	if pod == nil {
		return ""
	}
	var out string
	for _, s := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		if w := s.State.Waiting; w != nil && w.Reason != "" && w.Reason != "PodInitializing" {
			if out != "" {
				out += "; "
			}
			out += "the " + s.Name + " container was waiting: " + w.Reason
			if w.Message != "" {
				out += ": " + w.Message
			}
		}
	}
	return out
}

func containerStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := range statuses {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

func terminal(state string) bool {
	return state == transport.BuildSucceeded || state == transport.BuildFailed
}
