package k8stest_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/wait"
)

func TestMain(m *testing.M) { k8stest.Main(m) }

func TestDeploymentBecomesReadyAndItsCreateIsAudited(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	since := time.Now()

	createDeployment(t, cs, ns, "web", 2)
	waitDeploymentReady(t, cs, ns, "web", 2, 60*time.Second)

	var created bool
	for _, ev := range c.WritesBy(t, k8stest.AdminUser, since) {
		require.Equal(t, k8stest.AdminUser, ev.User)
		require.False(t, ev.Time.Before(since.Truncate(time.Microsecond)), "event %+v is older than since", ev)
		if ev.Verb == "create" && ev.Resource == "deployments" && ev.Namespace == ns && ev.Name == "web" {
			require.Equal(t, 201, ev.Code)
			created = true
		}
	}
	require.True(t, created, "the admin's Deployment create is in the audit log")

	// The ReplicaSet and its pods are the controllers' writes, not the admin's.
	later := time.Now()
	for _, ev := range c.WritesBy(t, k8stest.AdminUser, later) {
		require.NotEqual(t, "deployments", ev.Resource, "a write before since must not be returned: %+v", ev)
	}
	var rsCreated bool
	for _, ev := range c.WritesBy(t, k8stest.ControllerManagerUser, since) {
		if ev.Verb == "create" && ev.Resource == "replicasets" && ev.Namespace == ns {
			rsCreated = true
		}
	}
	require.True(t, rsCreated, "the controller manager, under its own user, created the ReplicaSet")
}

func TestServiceEndpointSliceListsPodAddresses(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	createDeployment(t, cs, ns, "api", 2)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "api"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "api"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}},
		},
	}
	_, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	require.NoError(t, err)

	var addrs []string
	require.Eventually(t, func() bool {
		slices, err := cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=api",
		})
		if err != nil {
			return false
		}
		addrs = nil
		for _, s := range slices.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && *ep.Conditions.Ready {
					addrs = append(addrs, ep.Addresses...)
				}
			}
		}
		return len(addrs) == 2
	}, 60*time.Second, 200*time.Millisecond, "EndpointSlice of Service api lists 2 ready addresses")
	require.NotEqual(t, addrs[0], addrs[1], "each pod has its own IP")
}

func TestServiceAccountIsSubjectToRBAC(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	sa, err := kubernetes.NewForConfig(c.ServiceAccountConfig(t, ns, "reader"))
	require.NoError(t, err)
	_, err = sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "a ServiceAccount with no RBAC rules is forbidden to list pods, got %v", err)

	_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "pod-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The authorizer sees new bindings through an informer: allow it a moment.
	require.Eventually(t, func() bool {
		_, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "after the RoleBinding the ServiceAccount can list pods")

	// Still nothing beyond the Role.
	_, err = sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	require.True(t, apierrors.IsForbidden(err), "listing secrets stays forbidden, got %v", err)
}

func TestPodLogsComeFromTheConfiguredFile(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "app.log")
	require.NoError(t, os.WriteFile(logFile, []byte(
		"2026-11-30T00:00:00.000000000Z stdout F first line\n"+
			"2026-11-30T00:00:01.000000000Z stderr F second line\n"), 0o644))
	c := k8stest.Start(t, k8stest.Options{
		Nodes: 1,
		Logs:  []k8stest.LogFile{{Container: "app", Path: logFile}},
	})
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logger"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx"}}},
	}
	_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "logger", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	}, 60*time.Second, 200*time.Millisecond, "pod logger runs")

	rc, err := cs.CoreV1().Pods(ns).GetLogs("logger", &corev1.PodLogOptions{Container: "app"}).Stream(ctx)
	require.NoError(t, err)
	defer rc.Close()
	got, err := io.ReadAll(rc)
	require.NoError(t, err)
	require.Equal(t, "first line\nsecond line\n", string(got))
}

func TestMissingBinariesFailTheTest(t *testing.T) {
	t.Setenv(k8stest.EnvDir, t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		k8stest.Start(rec, k8stest.Options{})
	}()
	<-done
	require.Contains(t, rec.msg, "go tool task k8s", "the failure says how to build the binaries")
}

func TestAProcessThatExitsFailsStartWithItsLog(t *testing.T) {
	bins, err := k8stest.BinDir()
	require.NoError(t, err)
	// The real binaries, except an etcd that fails the way a broken one would.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		require.NoError(t, os.Symlink(filepath.Join(bins, "bin", name), filepath.Join(dir, "bin", name)))
	}
	require.NoError(t, os.Symlink(filepath.Join(bins, "kwok-stages.yaml"), filepath.Join(dir, "kwok-stages.yaml")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin", "etcd"),
		[]byte("#!/bin/sh\necho 'etcd: data dir is on fire' >&2\nexit 3\n"), 0o755))
	t.Setenv(k8stest.EnvDir, dir)

	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		k8stest.Start(rec, k8stest.Options{})
	}()
	<-done
	require.Contains(t, rec.msg, "etcd exited")
	require.Contains(t, rec.msg, "data dir is on fire", "the error carries the tail of the failing process's log")
}

// fatalRecorder captures a Fatalf instead of failing the real test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	// Like testing.T: stop the goroutine that called Fatalf.
	runtime.Goexit()
}

func createDeployment(t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "web",
					Image: "nginx",
					Ports: []corev1.ContainerPort{{ContainerPort: 80}},
				}}},
			},
		},
	}
	_, err := cs.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	require.NoError(t, err)
}

func waitDeploymentReady(t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32, timeout time.Duration) {
	t.Helper()
	var last string
	ok := wait.Until(timeout, func() bool {
		d, err := cs.AppsV1().Deployments(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false
		}
		last = fmt.Sprintf("%d/%d ready", d.Status.ReadyReplicas, replicas)
		return d.Status.ReadyReplicas == replicas
	})
	if !ok {
		t.Fatalf("Deployment %s/%s not ready within %v: %s", ns, name, timeout, last)
	}
}

// Pods of a SlowReady image run at once and turn Ready SlowReadyDelay later;
// those of a NeverReady image run and never turn Ready, with a readiness
// Warning event; any other image is Ready at once.
func TestSlowAndNeverReadyImages(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	for name, image := range map[string]string{
		"fast":  "registry.example/fast:1",
		"slow":  "registry.example/" + k8stest.SlowReady + ":1",
		"never": "registry.example/app@sha256:" + k8stest.NeverReady,
	} {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod := func(name string) (running, ready bool, ip string) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		return p.Status.Phase == corev1.PodRunning, ready, p.Status.PodIP
	}
	require.Eventually(t, func() bool { _, ready, _ := pod("fast"); return ready }, 30*time.Second, 100*time.Millisecond, "an ordinary image is Ready at once")
	var runningAt, readyAt time.Time
	for deadline := time.Now().Add(30 * time.Second); readyAt.IsZero(); time.Sleep(100 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "a slow-ready pod runs, then becomes Ready, within 30 s")
		running, ready, ip := pod("slow")
		require.False(t, ready && runningAt.IsZero(), "a slow-ready pod is not Ready before it runs")
		if running && ip != "" && runningAt.IsZero() {
			runningAt = time.Now()
		}
		if ready {
			readyAt = time.Now()
		}
	}
	readyAfter := readyAt.Sub(runningAt)
	t.Logf("slow-ready: Ready %v after Running", readyAfter.Round(time.Millisecond))
	require.Greater(t, readyAfter, k8stest.SlowReadyDelay-time.Second, "not Ready before the delay")

	running, ready, ip := pod("never")
	require.True(t, running, "a never-ready pod runs")
	require.NotEmpty(t, ip)
	require.False(t, ready, "a never-ready pod is not Ready, even after the slow one is")
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "never", metav1.GetOptions{})
	require.NoError(t, err)
	require.False(t, p.Status.ContainerStatuses[0].Ready)
	require.Eventually(t, func() bool {
		evs, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=never,type=Warning"})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Reason == "Unhealthy" && strings.HasPrefix(e.Message, "Readiness probe failed") {
				return true
			}
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "a never-ready pod has a readiness Warning event")
}

// The EndpointWatch fails a test when a Service's EndpointSlice lists a pod
// that is not ready, as the EndpointSlice controller does (ready: false) for
// a selected pod that runs without being ready.
func TestEndpointWatchCatchesAnUnreadyEndpoint(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	rec := &errorRecorder{TB: t}
	ew := c.WatchEndpoints(rec, ns, "web")
	for name, image := range map[string]string{"ready": "registry.example/web:1", "unready": "registry.example/web-" + k8stest.NeverReady + ":1"} {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image, Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(80)}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(rec.errors()) > 0 }, 30*time.Second, 100*time.Millisecond,
		"the watch reports the unready pod")
	require.Contains(t, rec.errors()[0], "lists pod unready")
	require.Contains(t, rec.errors()[0], "with ready false")
	require.Eventually(t, func() bool { return fmt.Sprint(ew.Pods()) == "[ready]" }, 30*time.Second, 100*time.Millisecond,
		"Pods lists the ready one")
}

// errorRecorder captures Errorf instead of failing the real test.
type errorRecorder struct {
	testing.TB
	mu   sync.Mutex
	msgs []string
}

func (r *errorRecorder) Helper() {}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *errorRecorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// Pods of a build Job (label BuildIDLabel) end BuildDelay after they are
// scheduled: Succeeded with the build container's termination message naming
// BuildDigest and the pod's commit, or, labelled BuildFailLabel=true, Failed
// with exit code 3; their Jobs complete or fail. A Job's pod without the
// label still runs and completes through kwok's fast Stages.
func TestBuildPodsEndWithTheBuildersMessage(t *testing.T) {
	c := k8stest.Shared(t)
	cs := c.Client(t)
	ns := c.Namespace(t)
	ctx := t.Context()
	commit := "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
	job := func(name string, labels map[string]string) {
		t.Helper()
		zero := int32(0)
		_, err := cs.BatchV1().Jobs(ns).Create(ctx, &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: batchv1.JobSpec{
				BackoffLimit: &zero,
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{k8stest.BuildCommitAnnotation: commit}},
					Spec: corev1.PodSpec{
						RestartPolicy:  corev1.RestartPolicyNever,
						InitContainers: []corev1.Container{{Name: "clone", Image: "alpine/git:2.47.2"}},
						Containers:     []corev1.Container{{Name: k8stest.BuildContainer, Image: "moby/buildkit:v0.25.0-rootless"}},
					},
				},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	created := time.Now()
	job("ok", map[string]string{k8stest.BuildIDLabel: "b-ok"})
	job("fails", map[string]string{k8stest.BuildIDLabel: "b-fail", k8stest.BuildFailLabel: "true"})
	job("plain", nil)

	// ended returns the Job's pod once it is Succeeded or Failed, failing
	// the test if it was ever Running, which would mean kwok's fast Stages
	// took it.
	ended := func(jobName string) *corev1.Pod {
		t.Helper()
		var pod *corev1.Pod
		for deadline := time.Now().Add(30 * time.Second); pod == nil; time.Sleep(50 * time.Millisecond) {
			require.True(t, time.Now().Before(deadline), "the pod of Job %s ends within 30 s", jobName)
			pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + jobName})
			require.NoError(t, err)
			for i, p := range pods.Items {
				require.NotEqual(t, corev1.PodRunning, p.Status.Phase, "a build pod never gets the fast Stages")
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					pod = &pods.Items[i]
				}
			}
		}
		return pod
	}
	terminated := func(p *corev1.Pod) *corev1.ContainerStateTerminated {
		t.Helper()
		require.Len(t, p.Status.ContainerStatuses, 1)
		require.Equal(t, k8stest.BuildContainer, p.Status.ContainerStatuses[0].Name)
		term := p.Status.ContainerStatuses[0].State.Terminated
		require.NotNil(t, term, "the build container is terminated")
		return term
	}

	ok := ended("ok")
	require.GreaterOrEqual(t, time.Since(created), k8stest.BuildDelay, "a build takes its time")
	require.Equal(t, corev1.PodSucceeded, ok.Status.Phase)
	term := terminated(ok)
	require.EqualValues(t, 0, term.ExitCode)
	require.Equal(t, `{"digest":"`+k8stest.BuildDigest+`","commit":"`+commit+`"}`, term.Message)
	require.Equal(t, k8stest.BuildSucceededMessage(commit), term.Message)
	require.Len(t, ok.Status.InitContainerStatuses, 1)
	require.EqualValues(t, 0, ok.Status.InitContainerStatuses[0].State.Terminated.ExitCode, "the clone completed")
	require.NotNil(t, ok.Status.StartTime)

	failed := ended("fails")
	require.Equal(t, corev1.PodFailed, failed.Status.Phase)
	term = terminated(failed)
	require.EqualValues(t, k8stest.BuildFailExitCode, term.ExitCode)
	require.Equal(t, `{"exitCode":3,"reason":"process \"/bin/sh -c exit 3\" did not complete successfully: exit code: 3"}`, term.Message)
	require.Equal(t, k8stest.BuildFailMessage, term.Message)

	// The Jobs see what their pods did.
	jobDone := func(name string, want batchv1.JobConditionType) {
		t.Helper()
		require.Eventually(t, func() bool {
			j, err := cs.BatchV1().Jobs(ns).Get(ctx, name, metav1.GetOptions{})
			require.NoError(t, err)
			for _, cond := range j.Status.Conditions {
				if cond.Type == want && cond.Status == corev1.ConditionTrue {
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "Job %s is %s", name, want)
	}
	jobDone("ok", batchv1.JobComplete)
	jobDone("fails", batchv1.JobFailed)
	jobDone("plain", batchv1.JobComplete)
}
