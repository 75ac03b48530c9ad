package reconcile

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// The pure parts of a rollout's detail: what a pod says, and the limits.

func TestPodReasonPrefersWhatTheContainersSay(t *testing.T) {
	t.Parallel()
	pod := &corev1.Pod{Status: corev1.PodStatus{
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "ContainersNotReady",
			Message: "containers with unready status: [web]"}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", State: corev1.ContainerState{
			Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.example/api:2"`}}}},
	}}
	require.Equal(t, `ImagePullBackOff: Back-off pulling image "registry.example/api:2"`, podReason(pod))
	require.Equal(t, "containers with unready status: [web]", conditionReason(pod))

	pod.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}
	pod.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 3}
	require.Equal(t, "CrashLoopBackOff: last exit code 3", podReason(pod))

	pod.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}
	require.Empty(t, podReason(pod), "starting up is no reason")

	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/2 nodes are available: 2 Insufficient cpu."})
	require.Equal(t, "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.", podReason(pod))
	require.False(t, podReady(pod))
}

func TestDetailIsShortValidUTF8OnOneLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b c", detailText("a\n  b\tc "))
	require.Equal(t, "bad \uFFFD byte", detailText("bad \xff byte"))
	long := detailText(strings.Repeat("é", 400)) // 800 bytes
	require.True(t, utf8.ValidString(long))
	require.Less(t, len(long), 500)
	require.True(t, strings.HasSuffix(long, "…"))
}
