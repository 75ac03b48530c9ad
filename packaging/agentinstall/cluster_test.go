package agentinstall_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// testStorageClass stands in for K3s's local-path: the test cluster has no
// provisioner, so the registry's claim names a class of its own
// (Options.RegistryStorageClass) and the test makes the PersistentVolume of
// that class the provisioner would have made. Without it the claim, and the
// registry's pod, would stay Pending.
const testStorageClass = "k8stest-static"

// The manifest on a real API server (RBAC, Pod Security Admission,
// ValidatingAdmissionPolicy, the scheduler, kwok's fake kubelet): the
// registry's pod passes restricted and becomes Ready on its bound volume,
// reachable through its Service and NodePort; the build namespace admits the
// builder's pod, which restricted and baseline refuse; the agent has exactly
// its Role's rights there, and its build Jobs run while one that asks for
// more than the builder needs is refused. The agent's own rights elsewhere
// are tested in the agent's package.
func TestManifestOnARealAPIServer(t *testing.T) {
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	admin := k.Client(t)
	ctx := t.Context()

	_, err := admin.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "registry-data"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: testStorageClass,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:         corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(agentinstall.DefaultRegistrySize)},
			// A PersistentVolume object only: kwok's fake kubelet mounts nothing.
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: t.TempDir()}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", WithoutToken: true,
		Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1", RegistryStorageClass: testStorageClass})
	require.NoError(t, err)
	installtest.Apply(t, admin, manifest, nil)
	// The API server's warnings (Pod Security's warn level) are kept, not
	// logged.
	adminConfig := rest.CopyConfig(k.Admin)
	adminConfig.WarningHandler = rest.NoWarnings{}
	admin, err = kubernetes.NewForConfig(adminConfig)
	require.NoError(t, err)
	saConfig := k.ServiceAccountConfig(t, agentinstall.AgentNamespace, agentinstall.AgentName)
	warned := &warnings{}
	saConfig.WarningHandler = warned
	sa, err := kubernetes.NewForConfig(saConfig)
	require.NoError(t, err)

	t.Run("the registry passes restricted and becomes Ready", func(t *testing.T) {
		dep, err := admin.AppsV1().Deployments(agentinstall.AgentNamespace).Get(ctx, agentinstall.RegistryName, metav1.GetOptions{})
		require.NoError(t, err)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "registry-dry-run", Namespace: agentinstall.AgentNamespace, Labels: dep.Spec.Template.Labels},
			Spec: dep.Spec.Template.Spec}
		_, err = admin.CoreV1().Pods(agentinstall.AgentNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "the registry's pod is admitted where restricted is enforced")

		require.Eventually(t, func() bool {
			pvc, err := admin.CoreV1().PersistentVolumeClaims(agentinstall.AgentNamespace).Get(ctx, agentinstall.RegistryName, metav1.GetOptions{})
			return err == nil && pvc.Status.Phase == corev1.ClaimBound
		}, 60*time.Second, 200*time.Millisecond, "the registry's claim is bound")
		require.Eventually(t, func() bool {
			d, err := admin.AppsV1().Deployments(agentinstall.AgentNamespace).Get(ctx, agentinstall.RegistryName, metav1.GetOptions{})
			return err == nil && d.Status.ReadyReplicas == 1
		}, 60*time.Second, 200*time.Millisecond, "the registry is Ready")

		svc, err := admin.CoreV1().Services(agentinstall.AgentNamespace).Get(ctx, agentinstall.RegistryName, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, corev1.ServiceTypeNodePort, svc.Spec.Type)
		require.EqualValues(t, agentinstall.RegistryNodePort, svc.Spec.Ports[0].NodePort, "the API server gave the Service its fixed NodePort")
		pods, err := admin.CoreV1().Pods(agentinstall.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + agentinstall.RegistryName})
		require.NoError(t, err)
		require.Len(t, pods.Items, 1)
		require.Eventually(t, func() bool {
			slices, err := admin.DiscoveryV1().EndpointSlices(agentinstall.AgentNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + agentinstall.RegistryName})
			if err != nil {
				return false
			}
			for _, s := range slices.Items {
				for _, ep := range s.Endpoints {
					if ep.Conditions.Ready != nil && *ep.Conditions.Ready && ep.Addresses[0] == pods.Items[0].Status.PodIP {
						return s.Ports[0].Port != nil && *s.Ports[0].Port == agentinstall.RegistryPort
					}
				}
			}
			return false
		}, 30*time.Second, 200*time.Millisecond, "the Service reaches the registry's pod on port 5000")
	})

	// The builder as the build package runs it: rootless BuildKit with
	// Unconfined seccomp and AppArmor, as uid 1000, no privilege, no
	// capability added.
	unconfined := func() *corev1.SecurityContext {
		uid := int64(1000)
		return &corev1.SecurityContext{RunAsUser: &uid, RunAsGroup: &uid,
			SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
			AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}}
	}
	builder := func() corev1.PodSpec {
		return corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			InitContainers: []corev1.Container{{Name: "clone", Image: "docker.io/alpine/git:2.47.2"}},
			Containers:     []corev1.Container{{Name: k8stest.BuildContainer, Image: "docker.io/moby/buildkit:v0.25.0-rootless", SecurityContext: unconfined()}},
		}
	}

	t.Run("the build namespace admits the builder, which baseline would refuse", func(t *testing.T) {
		ns, err := admin.CoreV1().Namespaces().Get(ctx, agentinstall.BuildNamespace, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "privileged", ns.Labels["pod-security.kubernetes.io/enforce"])
		dryRun := func(ns string) (*corev1.Pod, error) {
			return admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "builder", Namespace: ns}, Spec: builder()},
				metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}
		_, err = dryRun(agentinstall.BuildNamespace)
		require.NoError(t, err, "the builder runs in the build namespace")
		_, err = dryRun(agentinstall.AgentNamespace)
		require.ErrorContains(t, err, "violates PodSecurity", "restricted refuses it")
		_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "baseline",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "baseline"}}}, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = dryRun("baseline")
		require.ErrorContains(t, err, `violates PodSecurity "baseline:latest"`, "so does baseline: Unconfined seccomp and AppArmor")
		require.ErrorContains(t, err, "seccompProfile")
		require.ErrorContains(t, err, "AppArmor profile")
	})

	t.Run("the agent's rights in the build namespace, and only there", func(t *testing.T) {
		user := k8stest.ServiceAccountUser(agentinstall.AgentNamespace, agentinstall.AgentName)
		for _, tc := range []struct {
			ns, verb, group, resource, sub string
			allowed                        bool
		}{
			{agentinstall.BuildNamespace, "create", "batch", "jobs", "", true},
			{agentinstall.BuildNamespace, "delete", "batch", "jobs", "", true},
			{agentinstall.BuildNamespace, "get", "batch", "jobs", "", true},
			{agentinstall.BuildNamespace, "list", "batch", "jobs", "", true},
			{agentinstall.BuildNamespace, "watch", "batch", "jobs", "", true},
			{agentinstall.BuildNamespace, "update", "batch", "jobs", "", false},
			{agentinstall.BuildNamespace, "patch", "batch", "jobs", "", false},
			{agentinstall.BuildNamespace, "get", "", "pods", "", true},
			{agentinstall.BuildNamespace, "list", "", "pods", "", true},
			{agentinstall.BuildNamespace, "watch", "", "pods", "", true},
			{agentinstall.BuildNamespace, "create", "", "pods", "", false},
			{agentinstall.BuildNamespace, "delete", "", "pods", "", false},
			{agentinstall.BuildNamespace, "get", "", "pods", "log", true},
			{agentinstall.BuildNamespace, "create", "", "pods", "exec", false},
			{agentinstall.BuildNamespace, "create", "", "secrets", "", true},
			{agentinstall.BuildNamespace, "delete", "", "secrets", "", true},
			{agentinstall.BuildNamespace, "get", "", "secrets", "", true},
			{agentinstall.BuildNamespace, "list", "", "secrets", "", true},
			{agentinstall.BuildNamespace, "update", "", "secrets", "", false},
			{agentinstall.BuildNamespace, "watch", "", "secrets", "", false},
			{agentinstall.BuildNamespace, "list", "", "events", "", true},
			{agentinstall.BuildNamespace, "watch", "", "events", "", true},
			{agentinstall.BuildNamespace, "create", "", "events", "", false},
			{agentinstall.BuildNamespace, "create", "apps", "deployments", "", false},
			{agentinstall.BuildNamespace, "create", "rbac.authorization.k8s.io", "rolebindings", "", true}, // cluster wide, held by the policy
			{agentinstall.BuildNamespace, "create", "batch", "cronjobs", "", false},
			{"default", "create", "batch", "jobs", "", false},
			{"", "list", "batch", "jobs", "", false},
			{"", "list", "", "pods", "", false},
			{agentinstall.AgentNamespace, "create", "batch", "jobs", "", false},
			{agentinstall.AgentNamespace, "list", "", "pods", "", false},
		} {
			sar, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + agentinstall.AgentNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: tc.ns, Verb: tc.verb, Group: tc.group, Resource: tc.resource, Subresource: tc.sub}}}, metav1.CreateOptions{})
			require.NoError(t, err)
			require.Equal(t, tc.allowed, sar.Status.Allowed, "%s %s/%s/%s in %q", tc.verb, tc.group, tc.resource, tc.sub, tc.ns)
		}
		// The policy keeps the cluster-wide right to bind out of the build
		// namespace, which is not labelled as managed.
		// (It takes a moment to be enforced after it is created: wait on a
		// dry run, which changes nothing either way.)
		require.Eventually(t, func() bool {
			_, err := sa.RbacV1().RoleBindings(agentinstall.BuildNamespace).Create(ctx, &climb, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "only in namespaces labelled")
		}, 30*time.Second, 100*time.Millisecond, "the agent's policy is enforced")
		_, err := sa.RbacV1().RoleBindings(agentinstall.BuildNamespace).Create(ctx, &climb, metav1.CreateOptions{})
		require.ErrorContains(t, err, "only in namespaces labelled")

		sec, err := sa.CoreV1().Secrets(agentinstall.BuildNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-credentials"},
			StringData: map[string]string{"token": "x"}}, metav1.CreateOptions{})
		require.NoError(t, err, "a build's Secret")
		_, err = sa.CoreV1().Secrets(agentinstall.BuildNamespace).List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		require.NoError(t, sa.CoreV1().Secrets(agentinstall.BuildNamespace).Delete(ctx, sec.Name, metav1.DeleteOptions{}))
	})

	t.Run("its build Jobs run, and get nothing beyond the builder's needs", func(t *testing.T) {
		job := func(name string, change func(*corev1.PodSpec)) *batchv1.Job {
			zero := int32(0)
			spec := builder()
			if change != nil {
				change(&spec)
			}
			return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: agentinstall.BuildNamespace},
				Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{k8stest.BuildIDLabel: name},
						Annotations: map[string]string{k8stest.BuildCommitAnnotation: strings.Repeat("ab", 20)}},
					Spec: spec}}}
		}
		privileged := job("privileged", func(s *corev1.PodSpec) { yes := true; s.Containers[0].SecurityContext.Privileged = &yes })
		// The policy takes a moment to be enforced after it is created: wait
		// on a dry run, which changes nothing either way.
		require.Eventually(t, func() bool {
			_, err := sa.BatchV1().Jobs(agentinstall.BuildNamespace).Create(ctx, privileged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "not privileged")
		}, 30*time.Second, 100*time.Millisecond, "the build policy is enforced")

		for _, tc := range []struct {
			name, want string
			change     func(*corev1.PodSpec)
		}{
			{"caps", "add no capability", func(s *corev1.PodSpec) {
				s.Containers[0].SecurityContext.Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
			}},
			{"init-privileged", "not privileged", func(s *corev1.PodSpec) {
				yes := true
				s.InitContainers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
			}},
			{"host-network", "share no host namespace", func(s *corev1.PodSpec) { s.HostNetwork = true }},
			{"host-pid", "share no host namespace", func(s *corev1.PodSpec) { s.HostPID = true }},
			{"host-path", "mount no host path", func(s *corev1.PodSpec) {
				s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
				s.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "root", MountPath: "/host"}}
			}},
			{"host-port", "take no host port", func(s *corev1.PodSpec) {
				s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 1234, HostPort: 1234}}
			}},
		} {
			_, err := sa.BatchV1().Jobs(agentinstall.BuildNamespace).Create(ctx, job(tc.name, tc.change), metav1.CreateOptions{})
			require.ErrorContains(t, err, tc.want, tc.name)
		}
		// An admin is not held to it.
		_, err := admin.BatchV1().Jobs(agentinstall.BuildNamespace).Create(ctx, privileged, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err)
		// Nor may the agent make Jobs elsewhere.
		other := job("elsewhere", nil)
		other.Namespace = "default"
		_, err = sa.BatchV1().Jobs("default").Create(ctx, other, metav1.CreateOptions{})
		require.True(t, apierrors.IsForbidden(err), "%v", err)

		// The builder's Job is admitted, its pod too (the namespace is
		// privileged), and it ends as a build does on kwok.
		warned.reset()
		_, err = sa.BatchV1().Jobs(agentinstall.BuildNamespace).Create(ctx, job("b1", nil), metav1.CreateOptions{})
		require.NoError(t, err)
		require.Len(t, warned.get(), 1)
		require.Contains(t, warned.get()[0], `would violate PodSecurity "restricted:latest"`, "warn=restricted still reports what the builder asks")
		require.Contains(t, warned.get()[0], "Unconfined")
		require.NotContains(t, warned.get()[0], "privileged (", "and nothing more")
		var pod *corev1.Pod
		require.Eventually(t, func() bool {
			pods, err := sa.CoreV1().Pods(agentinstall.BuildNamespace).List(ctx, metav1.ListOptions{LabelSelector: k8stest.BuildIDLabel + "=b1"})
			if err != nil || len(pods.Items) != 1 {
				return false
			}
			pod = &pods.Items[0]
			return pod.Status.Phase == corev1.PodSucceeded
		}, 60*time.Second, 200*time.Millisecond, "the build pod is admitted and succeeds")
		require.Equal(t, k8stest.BuildSucceededMessage(strings.Repeat("ab", 20)), pod.Status.ContainerStatuses[0].State.Terminated.Message)
		require.NoError(t, sa.BatchV1().Jobs(agentinstall.BuildNamespace).Delete(ctx, "b1", metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}))
	})

	// The agent's StatefulSet still comes up beside the registry.
	require.Eventually(t, func() bool {
		sts, err := admin.AppsV1().StatefulSets(agentinstall.AgentNamespace).Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
		return err == nil && sts.Status.ReadyReplicas == 2
	}, 60*time.Second, 200*time.Millisecond, "both agent replicas run")
}

// climb is what the agent would bind in the build namespace if the policy
// let it: its workload role, to itself.
var climb = rbacv1.RoleBinding{
	ObjectMeta: metav1.ObjectMeta{Name: "climb"},
	RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: agentinstall.WorkloadRole},
	Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: agentinstall.AgentNamespace, Name: agentinstall.AgentName}},
}

func ptr[T any](v T) *T { return &v }

// warnings collects the API server's warnings.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

func (w *warnings) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = nil
}

func (w *warnings) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}
