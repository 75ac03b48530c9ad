package k8stest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fast pod-ready Stage gains one requirement, the other Stages are kept
// as they are, and the slow Stages follow.
func TestPodStagesKeepTheFastReadyStageOffSlowImages(t *testing.T) {
	t.Parallel()
	fast := "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: node-initialize\nspec:\n  selector:\n    matchExpressions:\n    - key: '.status.phase'\n      operator: 'DoesNotExist'\n" +
		"---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-ready\nspec:\n  selector:\n    matchExpressions:\n    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n  next:\n    statusTemplate: |\n      phase: Running\n"
	got, err := podStages(fast)
	require.NoError(t, err)
	docs := strings.Split(got, "\n---\n")
	require.Len(t, docs, 4, "node-initialize, pod-ready, pod-running-unready, pod-slow-ready")
	require.NotContains(t, docs[0], "slow-ready", "other Stages are untouched")
	require.Contains(t, docs[1], "    matchExpressions:\n"+notSlowImage+"    - key: '.metadata.deletionTimestamp'")
	require.Contains(t, docs[2], "name: pod-running-unready")
	require.Contains(t, docs[3], "name: pod-slow-ready")
	require.Contains(t, docs[3], "durationMilliseconds: 5000")

	_, err = podStages("---\nkind: Stage\nmetadata:\n  name: node-initialize\n")
	require.ErrorContains(t, err, "no pod-ready Stage")
}
