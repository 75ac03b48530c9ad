package build_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
	"github.com/nebulactrl/nebulactrl/transport"
)

// recorder keeps what a Runner reports, checking each message as the
// control plane's frame check would.
type recorder struct {
	t       *testing.T
	mu      sync.Mutex
	reports []transport.BuildReport
	logs    []transport.BuildLogs
}

func (r *recorder) report(rep transport.BuildReport) {
	if err := rep.Validate(); err != nil {
		r.t.Errorf("the runner sent an invalid build report %+v: %v", rep, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reports = append(r.reports, rep)
}

func (r *recorder) log(l transport.BuildLogs) {
	if err := l.Validate(); err != nil {
		r.t.Errorf("the runner sent invalid build logs %+v: %v", l, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, l)
}

// of returns the reports of a build, in order.
func (r *recorder) of(id string) []transport.BuildReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []transport.BuildReport
	for _, rep := range r.reports {
		if rep.BuildID == id {
			out = append(out, rep)
		}
	}
	return out
}

// last returns the last report of a build in the given state.
func (r *recorder) last(id, state string) (transport.BuildReport, bool) {
	reps := r.of(id)
	for i := len(reps) - 1; i >= 0; i-- {
		if reps[i].State == state {
			return reps[i], true
		}
	}
	return transport.BuildReport{}, false
}

func (r *recorder) count(id, state string) int {
	n := 0
	for _, rep := range r.of(id) {
		if rep.State == state {
			n++
		}
	}
	return n
}

// buildNamespace creates the build namespace as the installer does.
func buildNamespace(t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: build.DefaultNamespace,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": build.PodSecurityLevel}}}
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
	return ns.Name
}

// startRunner runs a Runner until the test ends.
func startRunner(t *testing.T, cfg build.Config) *build.Runner {
	t.Helper()
	r, err := build.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(15 * time.Second):
			t.Error("Run did not return within 15 s of its context's end")
		}
	})
	return r
}

func buildSpec(id, commit string) transport.BuildSpec {
	return transport.BuildSpec{ID: id, Service: "shop", Repository: "https://git.example.com/acme/shop.git", Branch: "main", Commit: commit,
		Dockerfile: "Dockerfile", Image: "acme/shop", TimeoutSeconds: 600, Credential: &transport.GitCredential{Token: "t0ken-" + id[:8]}}
}

// waitPod waits for the Job controller to make a build's pod.
func waitPod(t *testing.T, cs kubernetes.Interface, ns, id string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	require.Eventually(t, func() bool {
		l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: build.BuildIDLabel + "=" + id})
		if err != nil || len(l.Items) == 0 {
			return false
		}
		pod = &l.Items[0]
		return true
	}, 30*time.Second, 100*time.Millisecond, "the Job controller makes the pod of build %s", id)
	return pod
}

// setPodStatus plays the kubelet: it writes the status a kubelet would
// write for the build pod's containers. kwok plays no part: the test keeps
// the build pods off its node (see TestRunnerAgainstAPIServer).
func setPodStatus(t *testing.T, cs kubernetes.Interface, pod *corev1.Pod, phase corev1.PodPhase, clone, builder corev1.ContainerState) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		p.Status.Phase = phase
		p.Status.StartTime = &now
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "clone", Image: p.Spec.InitContainers[0].Image, State: clone}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "build", Image: p.Spec.Containers[0].Image, State: builder,
			Started: ptr(builder.Running != nil)}}
		_, err = cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
}

func ptr[T any](v T) *T { return &v }

func terminated(code int32, reason, msg string) corev1.ContainerState {
	now := metav1.Now()
	return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg, StartedAt: now, FinishedAt: now}}
}

func running() corev1.ContainerState {
	return corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
}

func jobGone(t *testing.T, cs kubernetes.Interface, ns, name string) bool {
	_, err := cs.BatchV1().Jobs(ns).Get(context.Background(), name, metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// TestRunnerAgainstAPIServer drives a Runner against a real API server, Job
// controller and garbage collector, with the install manifest applied: the
// Runner is the agent's ServiceAccount, under its Role in the build namespace
// and the policy on its build Jobs. kwok runs no containers, and its Stages
// end build pods on their own: the test taints the node so that the build
// pods stay unscheduled, and writes their status itself, standing in for the
// kubelet.
func TestRunnerAgainstAPIServer(t *testing.T) {
	c := k8stest.Start(t, k8stest.Options{Nodes: 1})
	cs := c.Client(t)
	ctx := context.Background()
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", WithoutToken: true,
		Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	// The workloads are not needed here: their namespaces, RBAC and policies are.
	installtest.Apply(t, cs, manifest, func(obj runtime.Object) bool {
		switch obj.(type) {
		case *appsv1.Deployment, *appsv1.StatefulSet, *corev1.PersistentVolumeClaim:
			return true
		}
		return false
	})
	ns := build.DefaultNamespace
	require.Equal(t, agentinstall.BuildNamespace, ns)
	buildNS, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, build.PodSecurityLevel, buildNS.Labels["pod-security.kubernetes.io/enforce"], "the installer enforces the level the builder needs")
	require.Equal(t, agentinstall.RegistryPushAddress, build.DefaultPushRegistry)
	require.Equal(t, agentinstall.RegistryNodeAddress, build.DefaultNodeRegistry)
	agentConfig := c.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName)
	agentConfig.WarningHandler = rest.NoWarnings{} // Pod Security's warn level (restricted) on every Job
	agent, err := kubernetes.NewForConfig(agentConfig)
	require.NoError(t, err)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "nebulactrl.io/test-no-builds", Effect: corev1.TaintEffectNoSchedule})
		_, err := cs.CoreV1().Nodes().Update(ctx, &n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}

	t.Run("the build pod needs the privileged Pod Security level", func(t *testing.T) {
		job, _ := build.Job(buildSpec("11111111-2222-4333-8444-555555555555", ""), build.Config{})
		for _, level := range []string{"restricted", "baseline", build.PodSecurityLevel} {
			name := "psa-" + level
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}, metav1.CreateOptions{})
			require.NoError(t, err)
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "build", Namespace: name}, Spec: job.Spec.Template.Spec}
			_, err = cs.CoreV1().Pods(name).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if level == build.PodSecurityLevel {
				require.NoError(t, err, "the admission of %s admits the build pod", level)
				continue
			}
			require.Error(t, err, "%s refuses the build pod", level)
			require.Contains(t, err.Error(), `seccompProfile (container "build" must not set securityContext.seccompProfile.type to "Unconfined")`)
			require.Contains(t, err.Error(), `forbidden AppArmor profile (container "build" must not set AppArmor profile type to "Unconfined")`)
			if level == "baseline" {
				require.NotContains(t, err.Error(), "clone", "the clone container meets baseline")
			}
		}
	})

	rec := &recorder{t: t}
	cfg := build.Config{Client: agent, PushRegistry: agentinstall.RegistryPushAddress, NodeRegistry: agentinstall.RegistryNodeAddress,
		Report: rec.report, Logs: rec.log}
	r := startRunner(t, cfg)

	a := buildSpec("3f1d3c1e-7c5b-4a7e-9a41-0c2f4f6c9b01", "")
	b := buildSpec("8e2b0c55-1f7d-4f2a-b3b4-5a6c7d8e9f02", "4b825dc642cb6eb9a060e54bf8d69288fbee4904")
	// A Secret left by an earlier Set whose Job create failed: replaced by
	// the credential sent now.
	_, stale := build.Job(a, cfg)
	stale.Data["token"] = []byte("stale")
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, stale, metav1.CreateOptions{})
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, r.Set(ctx, []transport.BuildSpec{a, b}))
	t.Logf("Set of two builds: %v", time.Since(began).Round(time.Millisecond))
	jobs, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=nebulactrl"})
	require.NoError(t, err)
	var names []string
	for _, j := range jobs.Items {
		names = append(names, j.Name)
	}
	require.ElementsMatch(t, []string{build.JobName(a.ID), build.JobName(b.ID)}, names)
	for _, s := range []transport.BuildSpec{a, b} {
		sec, err := cs.CoreV1().Secrets(ns).Get(ctx, build.JobName(s.ID), metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, s.Credential.Token, string(sec.Data["token"]))
	}
	require.Eventually(t, func() bool { return r.Running() == 2 }, 10*time.Second, 50*time.Millisecond, "two builds run")
	require.NoError(t, r.Set(ctx, []transport.BuildSpec{a, b}), "the same set again changes nothing")

	// b leaves the set (cancelled): its Job, pod and Secret go; a's stay.
	podB := waitPod(t, cs, ns, b.ID)
	require.NoError(t, r.Set(ctx, []transport.BuildSpec{a}))
	require.True(t, jobGone(t, cs, ns, build.JobName(b.ID)), "b's Job is deleted")
	_, err = cs.CoreV1().Secrets(ns).Get(ctx, build.JobName(b.ID), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "b's Secret is deleted: %v", err)
	require.Eventually(t, func() bool {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, podB.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 100*time.Millisecond, "the garbage collector deletes b's pod (background propagation)")
	require.False(t, jobGone(t, cs, ns, build.JobName(a.ID)))
	require.Eventually(t, func() bool { return r.Running() == 1 }, 10*time.Second, 50*time.Millisecond)
	require.Empty(t, rec.of(b.ID), "a cancelled build is not reported")

	// a runs: the clone reports the branch head it fetched.
	const head = "1f7b2c3d4e5f60718293a4b5c6d7e8f901234567"
	const digest = "sha256:a6adb9aba25429cf3d33b5d4fe1c240b5f76c945200e3d2bfd6638a911164b2e"
	podA := waitPod(t, cs, ns, a.ID)
	setPodStatus(t, cs, podA, corev1.PodRunning, terminated(0, "Completed", `{"commit":"`+head+`"}`), running())
	require.Eventually(t, func() bool { _, ok := rec.last(a.ID, transport.BuildRunning); return ok }, 10*time.Second, 50*time.Millisecond, "a is reported running")
	rep, _ := rec.last(a.ID, transport.BuildRunning)
	require.Equal(t, head, rep.Commit, "the running report names the commit the clone fetched")
	require.False(t, rep.Time.IsZero())

	setPodStatus(t, cs, podA, corev1.PodSucceeded, terminated(0, "Completed", `{"commit":"`+head+`"}`),
		terminated(0, "Completed", `{"digest":"`+digest+`","commit":"`+head+`"}`))
	require.Eventually(t, func() bool { _, ok := rec.last(a.ID, transport.BuildSucceeded); return ok }, 10*time.Second, 50*time.Millisecond, "a is reported succeeded")
	rep, _ = rec.last(a.ID, transport.BuildSucceeded)
	require.Equal(t, transport.BuildReport{BuildID: a.ID, State: transport.BuildSucceeded, Commit: head,
		Image: agentinstall.RegistryNodeAddress + "/acme/shop", Digest: digest, Time: rep.Time}, rep)
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, 50*time.Millisecond, "nothing runs")
	require.Eventually(t, func() bool {
		j, err := cs.BatchV1().Jobs(ns).Get(ctx, build.JobName(a.ID), metav1.GetOptions{})
		return err == nil && j.Status.Succeeded == 1
	}, 30*time.Second, 100*time.Millisecond, "the Job controller completes a's Job")

	// f fails its RUN; t times out; x is unusable. a stays in the set: a
	// finished Job stays until its build leaves the set.
	f := buildSpec("c0ffee00-1111-4222-8333-444455556666", "")
	timeout := buildSpec("deadbeef-aaaa-4bbb-8ccc-dddddddddddd", "")
	timeout.TimeoutSeconds = 2
	invalid := buildSpec("0badc0de-0000-4000-8000-000000000000", "abc123")
	invalid.Dockerfile = "../../etc/passwd"
	require.NoError(t, r.Set(ctx, []transport.BuildSpec{a, f, timeout, invalid}))
	require.Eventually(t, func() bool { return rec.count(invalid.ID, transport.BuildFailed) == 1 }, 5*time.Second, 50*time.Millisecond)
	rep, _ = rec.last(invalid.ID, transport.BuildFailed)
	require.Contains(t, rep.Reason, "invalid build")
	require.Contains(t, rep.Reason, "leaves the repository")
	require.Contains(t, rep.Reason, "not a full lower-case commit id")
	require.True(t, jobGone(t, cs, ns, build.JobName(invalid.ID)), "an unusable build gets no Job")
	require.False(t, jobGone(t, cs, ns, build.JobName(a.ID)), "a's finished Job stays")

	podF := waitPod(t, cs, ns, f.ID)
	const reason = `error: failed to solve: process "/bin/sh -c echo boom; exit 3" did not complete successfully: exit code: 3`
	setPodStatus(t, cs, podF, corev1.PodFailed, terminated(0, "Completed", `{"commit":"`+head+`"}`),
		terminated(3, "Error", `{"exitCode":3,"reason":"error: failed to solve: process \"/bin/sh -c echo boom; exit 3\" did not complete successfully: exit code: 3"}`))
	require.Eventually(t, func() bool { _, ok := rec.last(f.ID, transport.BuildFailed); return ok }, 20*time.Second, 50*time.Millisecond, "f is reported failed")
	rep, _ = rec.last(f.ID, transport.BuildFailed)
	require.Equal(t, 3, rep.ExitCode)
	require.Equal(t, reason, rep.Reason)
	require.Equal(t, head, rep.Commit)

	require.Eventually(t, func() bool { _, ok := rec.last(timeout.ID, transport.BuildFailed); return ok }, 30*time.Second, 100*time.Millisecond,
		"the Job controller stops the build at its deadline, and the runner reports it")
	rep, _ = rec.last(timeout.ID, transport.BuildFailed)
	require.Contains(t, rep.Reason, "DeadlineExceeded")
	require.Eventually(t, func() bool { return r.Running() == 0 }, 10*time.Second, 50*time.Millisecond)

	// Each state once, whatever the watches deliver again.
	require.NoError(t, r.Set(ctx, []transport.BuildSpec{a, f, timeout, invalid}))
	time.Sleep(2 * time.Second)
	require.Equal(t, 1, rec.count(a.ID, transport.BuildRunning))
	require.Equal(t, 1, rec.count(a.ID, transport.BuildSucceeded))
	require.Equal(t, 1, rec.count(f.ID, transport.BuildFailed))
	require.Equal(t, 1, rec.count(timeout.ID, transport.BuildFailed))
	require.Equal(t, 1, rec.count(invalid.ID, transport.BuildFailed))

	// A new Runner (an agent restart) reports the finished builds again
	// from their Jobs, which the control plane takes idempotently.
	rec2 := &recorder{t: t}
	cfg2 := cfg
	cfg2.Report, cfg2.Logs = rec2.report, rec2.log
	startRunner(t, cfg2)
	require.Eventually(t, func() bool {
		_, okA := rec2.last(a.ID, transport.BuildSucceeded)
		_, okF := rec2.last(f.ID, transport.BuildFailed)
		return okA && okF
	}, 20*time.Second, 100*time.Millisecond, "the restarted runner re-reports a and f")
	again, _ := rec2.last(a.ID, transport.BuildSucceeded)
	require.Equal(t, digest, again.Digest)

	// The set empties: every Job and Secret goes.
	require.NoError(t, r.Set(ctx, nil))
	left, err := cs.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, j := range left.Items {
		require.NotNil(t, j.DeletionTimestamp, "job %s is deleted or going", j.Name)
	}
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: build.BuildIDLabel})
	require.NoError(t, err)
	require.Empty(t, secrets.Items)
}

// TestRunnerStreamsBuildOutput follows a build pod's containers through the
// real pods/log API, which kwok serves from a file per container. Whatever
// kwok's Stages make of the pod (they end it at once), the output is there
// to read: the test asserts only the output, not the build's outcome.
func TestRunnerStreamsBuildOutput(t *testing.T) {
	dir := t.TempDir()
	cloneLog, buildLog := filepath.Join(dir, "clone.log"), filepath.Join(dir, "build.log")
	require.NoError(t, os.WriteFile(cloneLog, []byte("2026-11-30T00:00:00.000000000Z stderr F clone: checked out 1f7b2c3d\n"), 0o644))
	require.NoError(t, os.WriteFile(buildLog, []byte(
		"2026-11-30T00:00:01.000000000Z stdout F #7 [2/3] RUN echo hi > /hi.txt\n"+
			"2026-11-30T00:00:02.000000000Z stdout F #7 DONE 0.4s\n"+
			"2026-11-30T00:00:03.000000000Z stdout F odd bytes: \xff\x00 end\n"), 0o644))
	c := k8stest.Start(t, k8stest.Options{Nodes: 1, Logs: []k8stest.LogFile{
		{Namespace: build.DefaultNamespace, Container: build.CloneContainer, Path: cloneLog},
		{Namespace: build.DefaultNamespace, Container: build.BuildContainer, Path: buildLog},
	}})
	cs := c.Client(t)
	buildNamespace(t, cs)
	rec := &recorder{t: t}
	r := startRunner(t, build.Config{Client: cs, Report: rec.report, Logs: rec.log})
	s := buildSpec("5ca1ab1e-0000-4000-8000-00000000beef", "")
	require.NoError(t, r.Set(context.Background(), []transport.BuildSpec{s}))

	lines := func(container string) []transport.LogLine {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var out []transport.LogLine
		for _, l := range rec.logs {
			if l.BuildID == s.ID && l.Container == container {
				out = append(out, l.Lines...)
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(lines(build.BuildContainer)) >= 3 && len(lines(build.CloneContainer)) >= 1 },
		30*time.Second, 100*time.Millisecond, "both containers' output arrives")
	got := lines(build.BuildContainer)
	require.Equal(t, "#7 [2/3] RUN echo hi > /hi.txt", got[0].Text)
	require.Equal(t, time.Date(2026, 11, 30, 0, 0, 1, 0, time.UTC), got[0].Time.UTC(), "the kubelet's timestamp, not the agent's clock")
	require.Equal(t, "odd bytes: \uFFFD\uFFFD end", got[2].Text, "made storable")
	require.Equal(t, "clone: checked out 1f7b2c3d", lines(build.CloneContainer)[0].Text)
	var job *batchv1.Job
	job, err := cs.BatchV1().Jobs(build.DefaultNamespace).Get(context.Background(), build.JobName(s.ID), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, s.ID, job.Labels[build.BuildIDLabel])
}
