package agentinstall_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

const ca = "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"

func decode(t *testing.T, manifest string) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, doc := range strings.Split(manifest, "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		require.NoError(t, err, doc)
		out = append(out, obj)
	}
	return out
}

func TestManifestDecodesIntoTheExpectedObjects(t *testing.T) {
	t.Parallel()
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", CABundle: ca, Cluster: "acme/eu-1"})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, obj := range decode(t, m) {
		kinds[obj.GetObjectKind().GroupVersionKind().Kind]++
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			require.EqualValues(t, 2, *o.Spec.Replicas, "two replicas")
			require.Len(t, o.Spec.Template.Spec.InitContainers, 1, "an init container seeds the binary")
			agent := o.Spec.Template.Spec.Containers[0]
			require.Equal(t, "/agent-bin/nebulactrl-agent", agent.Command[0], "the agent runs from the pod volume")
			require.Equal(t, agentinstall.PodBinary, agent.Command[0])
			require.Contains(t, agent.Args, "--state-dir="+agentinstall.PodStateDir, "upgrade.json lives on the binary's volume")
			seed := o.Spec.Template.Spec.InitContainers[0]
			require.Equal(t, []string{"/nebulactrl-agent", "seed", agentinstall.PodBinary}, seed.Command, "the init container copies the image's binary to the volume")
			var vol *corev1.Volume
			for i := range o.Spec.Template.Spec.Volumes {
				if o.Spec.Template.Spec.Volumes[i].Name == "agent-bin" {
					vol = &o.Spec.Template.Spec.Volumes[i]
				}
			}
			require.NotNil(t, vol)
			require.NotNil(t, vol.EmptyDir, "the binary's volume lives as long as the pod: a container restart keeps an upgrade, a recreated pod starts from the image")
			require.Contains(t, agent.Args, "--lease-name=nebulactrl-agent")
			require.Contains(t, agent.Args, "--workload-role="+agentinstall.WorkloadRole)
			require.Contains(t, agent.Args, "--ca-bundle=/etc/nebulactrl/ca/ca.pem")
			require.Contains(t, agent.Args, "--build-namespace=nebula-build")
			require.Contains(t, agent.Args, "--registry=nebula-registry.nebula-system.svc.cluster.local:5000")
			require.Contains(t, agent.Args, "--node-registry=localhost:30500")
			require.Empty(t, o.Spec.Template.Spec.Tolerations, "no test-only tolerations")
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				require.NotContains(t, r.Verbs, "*", "least privilege")
				require.NotContains(t, r.Resources, "*")
				require.NotContains(t, r.Verbs, "escalate")
			}
		case *rbacv1.ClusterRoleBinding:
			require.Equal(t, agentinstall.AgentName, o.RoleRef.Name, "the workload role is never bound cluster wide")
		case *corev1.Secret:
			require.Equal(t, "nbl_abc_def", string(o.Data["join-token"]))
			require.Len(t, o.Data, 1, "the Secret holds the token only")
		case *corev1.ConfigMap:
			require.Equal(t, ca, o.Data["ca.pem"]+"\n", "the CA bundle is no secret")
		case *admissionv1.ValidatingAdmissionPolicy:
			require.Equal(t, admissionv1.Fail, *o.Spec.FailurePolicy)
		}
	}
	require.Equal(t, map[string]int{"Namespace": 3, "ServiceAccount": 2, "ClusterRole": 2, "ClusterRoleBinding": 1, "Role": 4, "RoleBinding": 4,
		"ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2,
		"Secret": 1, "ConfigMap": 1, "StatefulSet": 1, "PodDisruptionBudget": 1,
		"Deployment": 1, "PersistentVolumeClaim": 1, "Service": 1, "DaemonSet": 1}, kinds)
}

// What Pod Security Admission's "restricted" asks, and what it does not ask
// but the agent's and the registry's pods do anyway: read-only root
// filesystems, bounded resources, probes. The API server's own check is in
// cluster_test.go and in the agent's tests.
func TestManifestPodsAreLockedDown(t *testing.T) {
	t.Parallel()
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	for _, obj := range decode(t, m) {
		switch o := obj.(type) {
		case *corev1.Namespace:
			if o.Name == agentinstall.AgentNamespace {
				require.Equal(t, "restricted", o.Labels["pod-security.kubernetes.io/enforce"], "the agent's namespace enforces restricted")
			}
		case *appsv1.Deployment:
			require.Equal(t, agentinstall.RegistryName, o.Name)
			require.Equal(t, agentinstall.AgentNamespace, o.Namespace, "the registry runs under restricted")
			spec := o.Spec.Template.Spec
			lockedDown(t, spec)
			registry := spec.Containers[0]
			for _, p := range []*corev1.Probe{registry.ReadinessProbe, registry.LivenessProbe} {
				require.NotNil(t, p)
				require.Equal(t, "/v2/", p.HTTPGet.Path)
				require.Equal(t, "registry", p.HTTPGet.Port.String())
			}
			require.False(t, *spec.AutomountServiceAccountToken, "the registry has no business with the API")
			writable := map[string]string{}
			for _, v := range spec.Volumes {
				switch {
				case v.EmptyDir != nil:
					writable[v.Name] = "emptyDir"
				case v.PersistentVolumeClaim != nil:
					writable[v.Name] = "pvc"
				default:
					t.Fatalf("volume %s: only an emptyDir and the claim", v.Name)
				}
			}
			mounts := map[string]string{}
			for _, vm := range registry.VolumeMounts {
				mounts[vm.MountPath] = writable[vm.Name]
			}
			require.Equal(t, map[string]string{"/var/lib/registry": "pvc", "/tmp": "emptyDir"}, mounts,
				"the root filesystem is read-only: the data and /tmp are volumes")
		case *appsv1.StatefulSet:
			spec := o.Spec.Template.Spec
			lockedDown(t, spec)
			agent := spec.Containers[0]
			require.NotNil(t, agent.LivenessProbe)

			require.NotNil(t, agent.ReadinessProbe)
			require.Equal(t, []string{"/agent-bin/nebulactrl-agent", "health", "--file=" + agentinstall.HealthFile}, agent.LivenessProbe.Exec.Command)
			require.Contains(t, agent.ReadinessProbe.Exec.Command, "--connected")
			require.Contains(t, agent.Args, "--health-file="+agentinstall.HealthFile)
			require.Empty(t, agent.Ports, "no inbound port")
			writable := map[string]bool{}
			for _, v := range spec.Volumes {
				require.True(t, v.EmptyDir != nil || v.Secret != nil || v.ConfigMap != nil, "volume %s: only the kinds restricted allows", v.Name)
				if v.EmptyDir != nil {
					writable[v.Name] = true
				}
				if v.Secret != nil {
					require.True(t, *v.Secret.Optional, "the pods start before the join token's Secret exists, and after it is deleted")
				}
			}
			health := false
			for _, vm := range agent.VolumeMounts {
				if strings.HasPrefix(agentinstall.HealthFile, vm.MountPath+"/") {
					health = writable[vm.Name]
				}
			}
			require.True(t, health, "the health file is on a writable volume")
		}
	}
}

// The mesh's node agents: one per node (every node, tainted or not), on the
// host's network, root with NET_ADMIN alone of its capabilities, the key
// directory on the host, in a namespace of their own that alone (with the
// build namespace) enforces "privileged".
func TestManifestRunsTheMeshOnEveryNode(t *testing.T) {
	t.Parallel()
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	var ds *appsv1.DaemonSet
	privileged := []string{}
	for _, obj := range decode(t, m) {
		switch o := obj.(type) {
		case *appsv1.DaemonSet:
			ds = o
		case *corev1.Namespace:
			if o.Labels["pod-security.kubernetes.io/enforce"] == "privileged" {
				privileged = append(privileged, o.Name)
			}
		}
	}
	require.ElementsMatch(t, []string{agentinstall.BuildNamespace, agentinstall.MeshNamespace}, privileged)
	require.NotNil(t, ds)
	require.Equal(t, agentinstall.MeshNamespace, ds.Namespace)
	spec := ds.Spec.Template.Spec
	require.True(t, spec.HostNetwork)
	require.Equal(t, agentinstall.MeshName, spec.ServiceAccountName)
	require.Equal(t, []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, spec.Tolerations, "every node")
	c := spec.Containers[0]
	require.Equal(t, []string{"/nebulactrl-agent", "mesh"}, c.Command)
	require.Equal(t, "spec.nodeName", c.Env[0].ValueFrom.FieldRef.FieldPath)
	sc := c.SecurityContext
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Equal(t, []corev1.Capability{"NET_ADMIN"}, sc.Capabilities.Add)
	require.Nil(t, sc.Privileged)
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.Empty(t, c.Ports, "no port but WireGuard's UDP one, which the host network gives")
	hostPaths := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = true
		}
	}
	require.Equal(t, map[string]bool{agentinstall.MeshKeyDir: true, "/dev/net/tun": true}, hostPaths)
	require.False(t, c.Resources.Limits.Memory().IsZero())
	require.NoError(t, agentinstall.CheckImage(c.Image))
}

// lockedDown checks a pod of the manifest against what restricted asks, and
// more: read-only root filesystems, bounded resources, pinned images.
func lockedDown(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	require.True(t, *spec.SecurityContext.RunAsNonRoot)
	require.NotZero(t, *spec.SecurityContext.RunAsUser, "not root")
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
	require.False(t, spec.HostNetwork || spec.HostPID || spec.HostIPC)
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		require.NotNil(t, sc, c.Name)
		require.False(t, *sc.AllowPrivilegeEscalation, c.Name)
		require.True(t, *sc.ReadOnlyRootFilesystem, c.Name)
		require.True(t, *sc.RunAsNonRoot, c.Name)
		require.Nil(t, sc.Privileged, c.Name)
		require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
		require.Empty(t, sc.Capabilities.Add, c.Name)
		require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type, c.Name)
		require.False(t, c.Resources.Requests.Cpu().IsZero(), c.Name)
		require.False(t, c.Resources.Requests.Memory().IsZero(), c.Name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), c.Name)
		require.False(t, c.Resources.Limits.Cpu().IsZero(), c.Name)
		require.NoError(t, agentinstall.CheckImage(c.Image), c.Name)
		for _, p := range c.Ports {
			require.Zero(t, p.HostPort, c.Name)
		}
	}
}

func TestManifestWithoutTheToken(t *testing.T) {
	t.Parallel()
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", WithoutToken: true, Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", CABundle: ca, Cluster: "acme/eu-1"})
	require.NoError(t, err)
	for _, obj := range decode(t, m) {
		_, secret := obj.(*corev1.Secret)
		require.False(t, secret, "no Secret: the manifest can live in Git")
		if sts, ok := obj.(*appsv1.StatefulSet); ok {
			require.Contains(t, sts.Spec.Template.Spec.Containers[0].Args, "--join-token-file=/etc/nebulactrl/join/join-token", "the Secret made separately is read")
		}
	}
	require.Contains(t, m, agentinstall.JoinSecretCommand("TOKEN"), "the manifest says how to make the Secret")
	require.Equal(t, "kubectl -n nebula-system create secret generic nebulactrl-agent-join --from-literal=join-token=nbl_x", agentinstall.JoinSecretCommand("nbl_x"))
	_, err = agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"})
	require.ErrorContains(t, err, "no join token", "a token, or WithoutToken")
}

func TestTheImageIsTheControlPlanesVersion(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", agentinstall.DefaultImage("1.5.0"))
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", agentinstall.DefaultImage("v1.5.0"))
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:2.0.0-rc.1", agentinstall.DefaultImage("2.0.0-rc.1"))
	for _, v := range []string{"", "dev", "test", "latest", "abc1234"} {
		require.Empty(t, agentinstall.DefaultImage(v), "%q is not a release: no image", v)
	}
	for img, want := range map[string]string{
		"ghcr.io/nebulactrl/nebulactrl-agent:latest": "latest",
		"ghcr.io/nebulactrl/nebulactrl-agent":        "explicit tag or digest",
		"":                                           "not an image reference",
		"a b:1":                                      "not an image reference",
	} {
		require.ErrorContains(t, agentinstall.CheckImage(img), want, img)
	}
	require.NoError(t, agentinstall.CheckImage("registry.example.com:5000/agent@sha256:"+strings.Repeat("a", 64)))
	require.NoError(t, agentinstall.CheckImage("registry.example.com:5000/agent:1.5.0"))
}

func TestPlainHTTPOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	t.Parallel()
	o := agentinstall.Options{ControlPlaneURL: "http://nebula.example.com", JoinToken: "nbl_x", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"}
	_, err := agentinstall.Manifest(o)
	require.ErrorContains(t, err, "plain HTTP to a host that is not loopback")
	require.ErrorContains(t, err, "in clear")
	_, _, err = agentinstall.SystemdUnit(o)
	require.ErrorContains(t, err, "not loopback")
	o.InsecurePlainHTTP = true
	m, err := agentinstall.Manifest(o)
	require.NoError(t, err)
	require.Contains(t, m, "--insecure-plain-http-remote")
	unit, _, err := agentinstall.SystemdUnit(o)
	require.NoError(t, err)
	require.Contains(t, unit, "--insecure-plain-http-remote")

	o = agentinstall.Options{ControlPlaneURL: "http://127.0.0.1:8080", JoinToken: "nbl_x", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"}
	m, err = agentinstall.Manifest(o)
	require.NoError(t, err)
	require.Contains(t, m, "- --insecure-plain-http\n")
	require.NotContains(t, m, "remote")
}

func TestSystemdUnitKeepsTheTokenOutOfTheUnit(t *testing.T) {
	t.Parallel()
	unit, env, err := agentinstall.SystemdUnit(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def"})
	require.NoError(t, err)
	require.Contains(t, unit, "Restart=always")
	require.NotContains(t, unit, "nbl_abc_def")
	require.Contains(t, env, "NEBULACTRL_JOIN_TOKEN=nbl_abc_def")
}

// The host unit is hardened while the agent can still replace its own
// binary: checked directive by directive, and by systemd-analyze security
// where it is installed (the project's dependencies do not install systemd).
func TestSystemdUnitIsHardened(t *testing.T) {
	t.Parallel()
	unit, _, err := agentinstall.SystemdUnit(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", CABundle: ca})
	require.NoError(t, err)
	directives := map[string][]string{}
	for _, l := range strings.Split(unit, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	one := func(k string) string {
		require.Len(t, directives[k], 1, k)
		return directives[k][0]
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
		"ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes", "ProtectControlGroups": "yes",
		"RestrictNamespaces": "yes", "RestrictSUIDSGID": "yes", "LockPersonality": "yes", "MemoryDenyWriteExecute": "yes",
		"SystemCallArchitectures": "native", "CapabilityBoundingSet": "", "UMask": "0077", "StateDirectory": "nebulactrl-agent",
		// Restarted always, without a start limit: a crash-looping upgrade
		// is rolled back by the agent at its fourth start.
		"Restart": "always", "StartLimitIntervalSec": "0",
	} {
		require.Equal(t, want, one(k), k)
	}
	// What the agent must still write: its state and its own binary, which
	// is alone in its directory.
	exec0 := strings.Fields(one("ExecStart"))[0]
	require.Equal(t, agentinstall.HostBinary, exec0)
	require.Contains(t, strings.Fields(one("ReadWritePaths")), filepath.Dir(exec0), "the agent can replace its binary")
	require.Equal(t, agentinstall.HostStateDir, "/var/lib/"+one("StateDirectory"), "and write its state directory")
	require.Contains(t, one("ExecStart"), "--state-dir "+agentinstall.HostStateDir)
	require.NotEqual(t, "/usr/local/bin", filepath.Dir(exec0), "not a directory of other programs")

	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze is not installed: the unit was checked directive by directive only")
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nebulactrl-agent.service")
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, "security", "--offline=yes", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`Overall exposure level for nebulactrl-agent\.service: ([0-9.]+)`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	score, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	t.Logf("systemd-analyze security: exposure %.1f", score)
	require.LessOrEqual(t, score, 5.0, "%s", out)
}

// The mesh's node agent on a host: its unit keeps CAP_NET_ADMIN alone, the
// one device /dev/net/tun, writes its key directory and UAPI socket's
// directory only, and runs as the node it is on (%H, K3s's default node
// name); systemd-analyze security rates it (where it is installed).
func TestMeshUnitIsHardened(t *testing.T) {
	t.Parallel()
	unit, err := agentinstall.MeshUnit(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def"})
	require.NoError(t, err)
	directives := map[string][]string{}
	for _, l := range strings.Split(unit, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "DevicePolicy": "closed",
		"DeviceAllow": "/dev/net/tun rw", "CapabilityBoundingSet": "CAP_NET_ADMIN", "AmbientCapabilities": "CAP_NET_ADMIN",
		"StateDirectory": "nebulactrl-mesh", "ReadWritePaths": "/run/wireguard", "RuntimeDirectory": "wireguard", "UMask": "0077",
		"Restart": "always", "RestrictNamespaces": "yes", "MemoryDenyWriteExecute": "yes",
	} {
		require.Equal(t, []string{want}, directives[k], k)
	}
	require.Equal(t, agentinstall.MeshKeyDir, "/var/lib/"+directives["StateDirectory"][0])
	require.Equal(t, agentinstall.HostBinary+" mesh --node-name %H --kubeconfig /etc/rancher/k3s/k3s.yaml --key-dir "+agentinstall.MeshKeyDir, directives["ExecStart"][0])

	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Logf("systemd-analyze is not installed: the unit was checked directive by directive only")
		return
	}
	path := filepath.Join(t.TempDir(), "nebulactrl-mesh.service")
	require.NoError(t, os.WriteFile(path, []byte(unit), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, "security", "--offline=yes", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`Overall exposure level for nebulactrl-mesh\.service: ([0-9.]+)`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	score, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	t.Logf("systemd-analyze security: exposure %.1f", score)
	require.LessOrEqual(t, score, 5.0, "%s", out)
}

func TestBadOptionsAreRefused(t *testing.T) {
	t.Parallel()
	_, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "ftp://x", Image: "a b"})
	require.ErrorContains(t, err, "URL")
	require.ErrorContains(t, err, "join token")
	require.ErrorContains(t, err, "image")
}

// The build namespace, the agent's rights there, the registry and where
// builds push and nodes pull.
func TestManifestInstallsTheRegistryAndTheBuildNamespace(t *testing.T) {
	t.Parallel()
	require.Equal(t, "nebula-registry.nebula-system.svc.cluster.local:5000", agentinstall.RegistryPushAddress)
	require.Equal(t, "localhost:30500", agentinstall.RegistryNodeAddress)
	require.Equal(t, 30500, agentinstall.RegistryNodePort)
	require.Equal(t, "docker.io/library/registry:2.8.3", agentinstall.RegistryImage)
	require.NoError(t, agentinstall.CheckImage(agentinstall.RegistryImage))

	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	agentSA := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: agentinstall.AgentName, Namespace: agentinstall.AgentNamespace}
	var deployment *appsv1.Deployment
	var service *corev1.Service
	var claim *corev1.PersistentVolumeClaim
	var buildRole *rbacv1.Role
	var buildBinding *rbacv1.RoleBinding
	var buildPolicy *admissionv1.ValidatingAdmissionPolicy
	var buildPolicyBinding *admissionv1.ValidatingAdmissionPolicyBinding
	for _, obj := range decode(t, m) {
		switch o := obj.(type) {
		case *corev1.Namespace:
			if o.Name == agentinstall.BuildNamespace {
				require.Equal(t, map[string]string{
					"app.kubernetes.io/part-of":                  "nebulactrl",
					"pod-security.kubernetes.io/enforce":         "privileged",
					"pod-security.kubernetes.io/enforce-version": "latest",
					"pod-security.kubernetes.io/warn":            "restricted",
					"pod-security.kubernetes.io/audit":           "restricted",
				}, o.Labels, "the builder's Unconfined seccomp and AppArmor need privileged; the rest is still warned about")
				require.NotContains(t, o.Labels, agentinstall.ManagedByLabel, "not an environment's namespace: the agent neither changes it nor binds its workload role there")
			}
		case *rbacv1.Role:
			switch o.Namespace {
			case agentinstall.BuildNamespace:
				buildRole = o
			case agentinstall.MeshNamespace:
				require.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
					Verbs: o.Rules[0].Verbs}}, o.Rules, "in the mesh's namespace, ConfigMaps only")
				require.NotContains(t, o.Rules[0].Verbs, "delete")
			default:
				require.Equal(t, agentinstall.AgentNamespace, o.Namespace)
			}
		case *rbacv1.RoleBinding:
			if o.Namespace == agentinstall.BuildNamespace {
				buildBinding = o
			}
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				require.NotContains(t, r.APIGroups, "batch", "no Jobs cluster wide")
				require.NotContains(t, r.Resources, "jobs")
			}
		case *corev1.PersistentVolumeClaim:
			claim = o
		case *appsv1.Deployment:
			deployment = o
		case *corev1.Service:
			service = o
		case *admissionv1.ValidatingAdmissionPolicy:
			if o.Name == agentinstall.AgentName+"-builds" {
				buildPolicy = o
			}
		case *admissionv1.ValidatingAdmissionPolicyBinding:
			if o.Name == agentinstall.AgentName+"-builds" {
				buildPolicyBinding = o
			}
		}
	}

	require.NotNil(t, buildRole, "a Role in the build namespace")
	require.Equal(t, agentinstall.BuildRole, buildRole.Name)
	require.Equal(t, []rbacv1.PolicyRule{
		{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "delete", "get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "delete", "get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}, buildRole.Rules, "exactly these rights, no more")
	require.NotNil(t, buildBinding)
	require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: agentinstall.BuildRole}, buildBinding.RoleRef)
	require.Equal(t, []rbacv1.Subject{agentSA}, buildBinding.Subjects)

	require.NotNil(t, buildPolicy, "a policy on the agent's build Jobs")
	require.Equal(t, admissionv1.Fail, *buildPolicy.Spec.FailurePolicy)
	require.Equal(t, "request.userInfo.username == 'system:serviceaccount:nebula-system:nebulactrl-agent'", buildPolicy.Spec.MatchConditions[0].Expression)
	require.Equal(t, []string{"jobs"}, buildPolicy.Spec.MatchConstraints.ResourceRules[0].Resources)
	require.NotNil(t, buildPolicyBinding)
	require.Equal(t, buildPolicy.Name, buildPolicyBinding.Spec.PolicyName)
	require.Equal(t, []admissionv1.ValidationAction{admissionv1.Deny}, buildPolicyBinding.Spec.ValidationActions)

	require.NotNil(t, claim)
	require.Equal(t, agentinstall.RegistryName, claim.Name)
	require.Equal(t, agentinstall.AgentNamespace, claim.Namespace)
	require.Equal(t, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, claim.Spec.AccessModes)
	require.Equal(t, "10Gi", claim.Spec.Resources.Requests.Storage().String())
	require.Nil(t, claim.Spec.StorageClassName, "the cluster's default StorageClass (K3s: local-path) provisions it")

	require.NotNil(t, deployment)
	require.Equal(t, agentinstall.RegistryName, deployment.Name)
	require.Equal(t, agentinstall.AgentNamespace, deployment.Namespace)
	require.EqualValues(t, 1, *deployment.Spec.Replicas)
	require.Equal(t, appsv1.RecreateDeploymentStrategyType, deployment.Spec.Strategy.Type, "one writer on the volume")
	pod := deployment.Spec.Template
	require.Len(t, pod.Spec.Containers, 1)
	registry := pod.Spec.Containers[0]
	require.Equal(t, agentinstall.RegistryImage, registry.Image)
	env := map[string]string{}
	for _, e := range registry.Env {
		env[e.Name] = e.Value
	}
	require.Equal(t, "true", env["REGISTRY_STORAGE_DELETE_ENABLED"])
	require.Equal(t, ":5000", env["REGISTRY_HTTP_ADDR"])
	require.Equal(t, []corev1.ContainerPort{{Name: "registry", ContainerPort: 5000, Protocol: ""}}, registry.Ports)
	var data *corev1.Volume
	for i, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			data = &pod.Spec.Volumes[i]
		}
	}
	require.NotNil(t, data)
	require.Equal(t, agentinstall.RegistryName, data.PersistentVolumeClaim.ClaimName)

	require.NotNil(t, service)
	require.Equal(t, agentinstall.RegistryName, service.Name, "the push address names it")
	require.Equal(t, agentinstall.AgentNamespace, service.Namespace)
	require.Equal(t, corev1.ServiceTypeNodePort, service.Spec.Type)
	require.Len(t, service.Spec.Ports, 1)
	require.EqualValues(t, 5000, service.Spec.Ports[0].Port)
	require.EqualValues(t, agentinstall.RegistryNodePort, service.Spec.Ports[0].NodePort)
	require.Equal(t, "registry", service.Spec.Ports[0].TargetPort.String())
	for k, v := range service.Spec.Selector {
		require.Equal(t, v, pod.Labels[k], "the Service selects the registry's pod")
	}
	require.Equal(t, deployment.Spec.Selector.MatchLabels, service.Spec.Selector)

	// A host agent has no cluster registry: its unit is as it was.
	unit, _, err := agentinstall.SystemdUnit(agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def"})
	require.NoError(t, err)
	require.NotContains(t, unit, "registry")
	require.NotContains(t, unit, "build")
}

func TestRegistryOptions(t *testing.T) {
	t.Parallel()
	o := agentinstall.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0",
		RegistryImage: "registry.example.com/mirror/registry:2.8.3", RegistrySize: "50Gi", RegistryStorageClass: "fast-ssd"}
	m, err := agentinstall.Manifest(o)
	require.NoError(t, err)
	for _, obj := range decode(t, m) {
		switch o := obj.(type) {
		case *corev1.PersistentVolumeClaim:
			require.Equal(t, "50Gi", o.Spec.Resources.Requests.Storage().String())
			require.Equal(t, "fast-ssd", *o.Spec.StorageClassName)
		case *appsv1.Deployment:
			require.Equal(t, "registry.example.com/mirror/registry:2.8.3", o.Spec.Template.Spec.Containers[0].Image)
		}
	}
	require.Contains(t, m, "here of StorageClass fast-ssd.")

	for _, tc := range []struct {
		change func(*agentinstall.Options)
		want   string
	}{
		{func(o *agentinstall.Options) { o.RegistryImage = "docker.io/library/registry:latest" }, "registry: image"},
		{func(o *agentinstall.Options) { o.RegistryImage = "registry" }, "registry: image"},
		{func(o *agentinstall.Options) { o.RegistrySize = "lots" }, "not a storage size"},
		{func(o *agentinstall.Options) { o.RegistrySize = "0Gi" }, "not a storage size"},
		{func(o *agentinstall.Options) { o.RegistrySize = "10Gi\nkind: x" }, "not a storage size"},
		{func(o *agentinstall.Options) { o.RegistryStorageClass = "Fast SSD" }, "not a StorageClass name"},
	} {
		bad := o
		tc.change(&bad)
		_, err := agentinstall.Manifest(bad)
		require.ErrorContains(t, err, tc.want)
	}
	// A host unit has no registry to check.
	bad := o
	bad.RegistrySize = "lots"
	_, _, err = agentinstall.SystemdUnit(bad)
	require.NoError(t, err)
}
