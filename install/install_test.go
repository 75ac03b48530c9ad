package install_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nebulactrl/nebulactrl/install"
)

func TestManifestDecodesIntoTheExpectedObjects(t *testing.T) {
	t.Parallel()
	m, err := install.Manifest(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "ghcr.io/nebulactrl/nebulactrl-agent:1.5.0", CABundle: "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n", Cluster: "acme/eu-1"})
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, doc := range strings.Split(m, "\n---\n") {
		obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		require.NoError(t, err, doc)
		kinds[gvk.Kind]++
		switch o := obj.(type) {
		case *appsv1.StatefulSet:
			require.EqualValues(t, 2, *o.Spec.Replicas, "two replicas")
			require.Len(t, o.Spec.Template.Spec.InitContainers, 1, "an init container seeds the binary")
			require.Equal(t, "/agent-bin/nebulactrl-agent", o.Spec.Template.Spec.Containers[0].Command[0], "the agent runs from the pod volume")
			require.Contains(t, o.Spec.Template.Spec.Containers[0].Args, "--lease-name=nebulactrl-agent")
			require.Empty(t, o.Spec.Template.Spec.Tolerations, "no test-only tolerations")
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				require.NotContains(t, r.Verbs, "*", "least privilege")
				require.NotContains(t, r.Resources, "*")
			}
		case *corev1.Secret:
			require.Equal(t, "nbl_abc_def", string(o.Data["join-token"]))
		}
	}
	require.Equal(t, map[string]int{"Namespace": 2, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1,
		"Secret": 1, "StatefulSet": 1, "PodDisruptionBudget": 1}, kinds)
}

func TestSystemdUnitKeepsTheTokenOutOfTheUnit(t *testing.T) {
	t.Parallel()
	unit, env, err := install.SystemdUnit(install.Options{ControlPlaneURL: "https://nebula.example.com", JoinToken: "nbl_abc_def", Image: "x"})
	require.NoError(t, err)
	require.Contains(t, unit, "Restart=always")
	require.NotContains(t, unit, "nbl_abc_def")
	require.Contains(t, env, "NEBULACTRL_JOIN_TOKEN=nbl_abc_def")
}

func TestBadOptionsAreRefused(t *testing.T) {
	t.Parallel()
	_, err := install.Manifest(install.Options{ControlPlaneURL: "ftp://x", Image: "a b"})
	require.ErrorContains(t, err, "URL")
	require.ErrorContains(t, err, "join token")
	require.ErrorContains(t, err, "image")
}
