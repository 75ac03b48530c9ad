package installtest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

func manifest(t *testing.T) string {
	t.Helper()
	m, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: "https://cp.example.com", JoinToken: "join-token",
		Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	require.NoError(t, err)
	return m
}

// The product's manifest decodes, object by object, every kind known to
// Create; NoAgentPod picks out exactly the agent's StatefulSet.
func TestObjectsOfTheManifest(t *testing.T) {
	t.Parallel()
	objs, err := installtest.Objects(manifest(t))
	require.NoError(t, err)
	require.NotEmpty(t, objs)
	_, first := objs[0].(*corev1.Namespace)
	require.True(t, first, "the namespace comes first, as kubectl would need it")
	skipped := 0
	for _, obj := range objs {
		if installtest.NoAgentPod(obj) {
			skipped++
		}
	}
	require.Equal(t, 1, skipped, "one StatefulSet, the agent's")

	_, err = installtest.Objects("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\nnot: [yaml")
	require.ErrorContains(t, err, "document 1 of the manifest")
	err = installtest.Create(context.Background(), nil, &corev1.Pod{})
	require.ErrorContains(t, err, "unexpected *v1.Pod", "a kind the manifest does not hold is refused")
}

// Apply creates the manifest on a real API server, less what skip skips.
func TestApplyOnACluster(t *testing.T) {
	t.Parallel()
	k := k8stest.Start(t, k8stest.Options{Nodes: 1})
	cs := k.Client(t)
	installtest.Apply(t, cs, manifest(t), installtest.NoAgentPod)

	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Get(ctx, agentinstall.AgentNamespace, metav1.GetOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ServiceAccounts(agentinstall.AgentNamespace).Get(ctx, agentinstall.AgentName, metav1.GetOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoles().Get(ctx, agentinstall.WorkloadRole, metav1.GetOptions{})
	require.NoError(t, err)
	sets, err := cs.AppsV1().StatefulSets(agentinstall.AgentNamespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, sets.Items, "the agent's pod was skipped")

	// Each object was created, not merely listed: creating one again is a
	// conflict the API server reports.
	objs, err := installtest.Objects(manifest(t))
	require.NoError(t, err)
	err = installtest.Create(ctx, cs, objs[0])
	require.True(t, apierrors.IsAlreadyExists(err), fmt.Sprint(err))
}
