package install_test

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

	"github.com/nebulactrl/nebulactrl/install"
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
	m, err := install.Manifest(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", CABundle: ca, Cluster: "acme/eu-1"})
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
			require.Equal(t, install.PodBinary, agent.Command[0])
			require.Contains(t, agent.Args, "--state-dir="+install.PodStateDir, "upgrade.json lives on the binary's volume")
			seed := o.Spec.Template.Spec.InitContainers[0]
			require.Equal(t, []string{"/nebulactrl-agent", "seed", install.PodBinary}, seed.Command, "the init container copies the image's binary to the volume")
			var vol *corev1.Volume
			for i := range o.Spec.Template.Spec.Volumes {
				if o.Spec.Template.Spec.Volumes[i].Name == "agent-bin" {
					vol = &o.Spec.Template.Spec.Volumes[i]
				}
			}
			require.NotNil(t, vol)
			require.NotNil(t, vol.EmptyDir, "the binary's volume lives as long as the pod: a container restart keeps an upgrade, a recreated pod starts from the image")
			require.Contains(t, agent.Args, "--lease-name=nebulactrl-agent")
			require.Contains(t, agent.Args, "--workload-role="+install.WorkloadRole)
			require.Contains(t, agent.Args, "--ca-bundle=/etc/nebulactrl/ca/ca.pem")
			require.Empty(t, o.Spec.Template.Spec.Tolerations, "no test-only tolerations")
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				require.NotContains(t, r.Verbs, "*", "least privilege")
				require.NotContains(t, r.Resources, "*")
				require.NotContains(t, r.Verbs, "escalate")
			}
		case *rbacv1.ClusterRoleBinding:
			require.Equal(t, install.AgentName, o.RoleRef.Name, "the workload role is never bound cluster wide")
		case *corev1.Secret:
			require.Equal(t, "nbl_abc_def", string(o.Data["join-token"]))
			require.Len(t, o.Data, 1, "the Secret holds the token only")
		case *corev1.ConfigMap:
			require.Equal(t, ca, o.Data["ca.pem"]+"\n", "the CA bundle is no secret")
		case *admissionv1.ValidatingAdmissionPolicy:
			require.Equal(t, admissionv1.Fail, *o.Spec.FailurePolicy)
		}
	}
	require.Equal(t, map[string]int{"Namespace": 2, "ServiceAccount": 1, "ClusterRole": 2, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
		"ValidatingAdmissionPolicy": 1, "ValidatingAdmissionPolicyBinding": 1,
		"Secret": 1, "ConfigMap": 1, "StatefulSet": 1, "PodDisruptionBudget": 1}, kinds)
}

// What Pod Security Admission's "restricted" asks, and what it does not ask
// but the agent's pods do anyway: read-only root filesystems, bounded
// resources, probes. The API server's own check is in the agent's tests.
func TestManifestPodsAreLockedDown(t *testing.T) {
	t.Parallel()
	m, err := install.Manifest(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	for _, obj := range decode(t, m) {
		switch o := obj.(type) {
		case *corev1.Namespace:
			if o.Name == install.AgentNamespace {
				require.Equal(t, "restricted", o.Labels["pod-security.kubernetes.io/enforce"], "the agent's namespace enforces restricted")
			}
		case *appsv1.StatefulSet:
			spec := o.Spec.Template.Spec
			require.True(t, *spec.SecurityContext.RunAsNonRoot)
			require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				sc := c.SecurityContext
				require.NotNil(t, sc, c.Name)
				require.False(t, *sc.AllowPrivilegeEscalation, c.Name)
				require.True(t, *sc.ReadOnlyRootFilesystem, c.Name)
				require.True(t, *sc.RunAsNonRoot, c.Name)
				require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, c.Name)
				require.Empty(t, sc.Capabilities.Add, c.Name)
				require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type, c.Name)
				require.False(t, c.Resources.Requests.Cpu().IsZero(), c.Name)
				require.False(t, c.Resources.Requests.Memory().IsZero(), c.Name)
				require.False(t, c.Resources.Limits.Memory().IsZero(), c.Name)
				require.False(t, c.Resources.Limits.Cpu().IsZero(), c.Name)
				require.NotContains(t, c.Image, ":latest")
			}
			agent := spec.Containers[0]
			require.NotNil(t, agent.LivenessProbe)
			require.NotNil(t, agent.ReadinessProbe)
			require.Equal(t, []string{"/agent-bin/nebulactrl-agent", "health", "--file=" + install.HealthFile}, agent.LivenessProbe.Exec.Command)
			require.Contains(t, agent.ReadinessProbe.Exec.Command, "--connected")
			require.Contains(t, agent.Args, "--health-file="+install.HealthFile)
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
				if strings.HasPrefix(install.HealthFile, vm.MountPath+"/") {
					health = writable[vm.Name]
				}
			}
			require.True(t, health, "the health file is on a writable volume")
		}
	}
}

func TestManifestWithoutTheToken(t *testing.T) {
	t.Parallel()
	m, err := install.Manifest(install.Options{ControlPlaneURL: "https://nebula.example.com", WithoutToken: true, Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", CABundle: ca, Cluster: "acme/eu-1"})
	require.NoError(t, err)
	for _, obj := range decode(t, m) {
		_, secret := obj.(*corev1.Secret)
		require.False(t, secret, "no Secret: the manifest can live in Git")
		if sts, ok := obj.(*appsv1.StatefulSet); ok {
			require.Contains(t, sts.Spec.Template.Spec.Containers[0].Args, "--join-token-file=/etc/nebulactrl/join/join-token", "the Secret made separately is read")
		}
	}
	require.Contains(t, m, install.JoinSecretCommand("TOKEN"), "the manifest says how to make the Secret")
	require.Equal(t, "kubectl -n nebula-system create secret generic nebulactrl-agent-join --from-literal=join-token=nbl_x", install.JoinSecretCommand("nbl_x"))
	_, err = install.Manifest(install.Options{ControlPlaneURL: "https://nebula.example.com", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"})
	require.ErrorContains(t, err, "no join token", "a token, or WithoutToken")
}

func TestTheImageIsTheControlPlanesVersion(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", install.DefaultImage("1.5.0"))
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", install.DefaultImage("v1.5.0"))
	require.Equal(t, "ghcr.io/nebulactrl/nebulactrl-agent:2.0.0-rc.1", install.DefaultImage("2.0.0-rc.1"))
	for _, v := range []string{"", "dev", "test", "latest", "abc1234"} {
		require.Empty(t, install.DefaultImage(v), "%q is not a release: no image", v)
	}
	for img, want := range map[string]string{
		"ghcr.io/nebulactrl/nebulactrl-agent:latest": "latest",
		"ghcr.io/nebulactrl/nebulactrl-agent":        "explicit tag or digest",
		"":                                           "not an image reference",
		"a b:1":                                      "not an image reference",
	} {
		require.ErrorContains(t, install.CheckImage(img), want, img)
	}
	require.NoError(t, install.CheckImage("registry.example.com:5000/agent@sha256:"+strings.Repeat("a", 64)))
	require.NoError(t, install.CheckImage("registry.example.com:5000/agent:1.5.0"))
}

func TestPlainHTTPOnlyOnLoopbackUnlessInsecure(t *testing.T) {
	t.Parallel()
	o := install.Options{ControlPlaneURL: "http://nebula.example.com", JoinToken: "nbl_x", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"}
	_, err := install.Manifest(o)
	require.ErrorContains(t, err, "plain HTTP to a host that is not loopback")
	require.ErrorContains(t, err, "in clear")
	_, _, err = install.SystemdUnit(o)
	require.ErrorContains(t, err, "not loopback")
	o.InsecurePlainHTTP = true
	m, err := install.Manifest(o)
	require.NoError(t, err)
	require.Contains(t, m, "--insecure-plain-http-remote")
	unit, _, err := install.SystemdUnit(o)
	require.NoError(t, err)
	require.Contains(t, unit, "--insecure-plain-http-remote")

	o = install.Options{ControlPlaneURL: "http://127.0.0.1:8080", JoinToken: "nbl_x", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0"}
	m, err = install.Manifest(o)
	require.NoError(t, err)
	require.Contains(t, m, "- --insecure-plain-http\n")
	require.NotContains(t, m, "remote")
}

func TestSystemdUnitKeepsTheTokenOutOfTheUnit(t *testing.T) {
	t.Parallel()
	unit, env, err := install.SystemdUnit(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def"})
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
	unit, _, err := install.SystemdUnit(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", CABundle: ca})
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
	require.Equal(t, install.HostBinary, exec0)
	require.Contains(t, strings.Fields(one("ReadWritePaths")), filepath.Dir(exec0), "the agent can replace its binary")
	require.Equal(t, install.HostStateDir, "/var/lib/"+one("StateDirectory"), "and write its state directory")
	require.Contains(t, one("ExecStart"), "--state-dir "+install.HostStateDir)
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

func TestBadOptionsAreRefused(t *testing.T) {
	t.Parallel()
	_, err := install.Manifest(install.Options{ControlPlaneURL: "ftp://x", Image: "a b"})
	require.ErrorContains(t, err, "URL")
	require.ErrorContains(t, err, "join token")
	require.ErrorContains(t, err, "image")
}
