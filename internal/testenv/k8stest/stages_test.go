package k8stest

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"text/template"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// The fast pod-ready Stage gains its requirements, the other Stages are kept
// as they are, and the slow and build Stages follow.
func TestPodStagesKeepTheFastReadyStageOffSlowImagesAndBuildPods(t *testing.T) {
	t.Parallel()
	fast := "---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: node-initialize\nspec:\n  selector:\n    matchExpressions:\n    - key: '.status.phase'\n      operator: 'DoesNotExist'\n" +
		"---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: pod-ready\nspec:\n  selector:\n    matchExpressions:\n    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n  next:\n    statusTemplate: |\n      phase: Running\n"
	got, err := podStages(fast)
	require.NoError(t, err)
	docs := strings.Split(got, "\n---\n")
	require.Len(t, docs, 6, "node-initialize, pod-ready, pod-running-unready, pod-slow-ready, pod-build-succeeded, pod-build-failed")
	require.NotContains(t, docs[0], "slow-ready", "other Stages are untouched")
	require.NotContains(t, docs[0], BuildIDLabel)
	require.Contains(t, docs[1], "    matchExpressions:\n"+notSlowImage+notBuildPod+"    - key: '.metadata.deletionTimestamp'")
	require.Contains(t, docs[2], "name: pod-running-unready")
	require.Contains(t, docs[3], "name: pod-slow-ready")
	require.Contains(t, docs[3], "durationMilliseconds: 5000")
	require.Contains(t, docs[4], "name: pod-build-succeeded")
	require.Contains(t, docs[5], "name: pod-build-failed")

	_, err = podStages("---\nkind: Stage\nmetadata:\n  name: node-initialize\n")
	require.ErrorContains(t, err, "no pod-ready Stage")
}

// stage is the part of a kwok Stage the tests read.
type stage struct {
	Metadata struct{ Name string }
	Spec     struct {
		Selector struct {
			MatchExpressions []struct {
				Key      string
				Operator string
				Values   []string
			} `json:"matchExpressions"`
		}
		Delay struct {
			DurationMilliseconds int64 `json:"durationMilliseconds"`
		}
		Next struct {
			StatusTemplate string `json:"statusTemplate"`
		} `json:"next"`
	}
}

func buildStage(t *testing.T, name string) stage {
	t.Helper()
	for _, doc := range strings.Split(buildStages, "\n---\n") {
		var s stage
		require.NoError(t, yaml.Unmarshal([]byte(doc), &s))
		if s.Metadata.Name == name {
			return s
		}
	}
	t.Fatalf("build-stages.yaml has no Stage %s", name)
	return stage{}
}

// render runs a Stage's status template as kwok does (a Go template over the
// object's JSON; kwok's Quote, sprig's dict, and node IPs stubbed) and
// decodes the status it makes.
func render(t *testing.T, s stage, pod *corev1.Pod) corev1.PodStatus {
	t.Helper()
	funcs := template.FuncMap{
		// As kwok's gotpl.Quote: JSON for a string.
		"Quote": func(v any) string {
			b, err := json.Marshal(v)
			require.NoError(t, err)
			return string(b)
		},
		"Now":         func() string { return "2026-12-01T00:00:00Z" },
		"dict":        func() map[string]any { return map[string]any{} },
		"NodeIPsWith": func(string) []string { return []string{"127.0.0.1"} },
	}
	tmpl, err := template.New(s.Metadata.Name).Funcs(funcs).Parse(s.Spec.Next.StatusTemplate)
	require.NoError(t, err)
	raw, err := json.Marshal(pod)
	require.NoError(t, err)
	var obj map[string]any
	require.NoError(t, json.Unmarshal(raw, &obj))
	var b strings.Builder
	require.NoError(t, tmpl.Execute(&b, obj))
	j, err := yaml.ToJSON([]byte(b.String()))
	require.NoError(t, err, b.String())
	// Strict: a misspelt field would be dropped by the API server.
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var status corev1.PodStatus
	require.NoError(t, dec.Decode(&status), b.String())
	return status
}

func buildPod(labels, annotations map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "build", Labels: labels, Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:       "node-0",
			InitContainers: []corev1.Container{{Name: "clone", Image: "alpine/git:2.47.2"}},
			Containers:     []corev1.Container{{Name: BuildContainer, Image: "moby/buildkit:v0.25.0-rootless"}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// Build pods end 1 s after they are scheduled, with the build container's
// termination saying what the builder would: the digest and the pod's
// commit, or BuildKit's error for a failing build.
func TestBuildStages(t *testing.T) {
	t.Parallel()
	ok, fail := buildStage(t, "pod-build-succeeded"), buildStage(t, "pod-build-failed")
	for _, s := range []stage{ok, fail} {
		require.EqualValues(t, BuildDelay.Milliseconds(), s.Spec.Delay.DurationMilliseconds, s.Metadata.Name)
		keys := map[string]string{}
		for _, e := range s.Spec.Selector.MatchExpressions {
			keys[e.Key] = e.Operator + strings.Join(e.Values, ",")
		}
		require.Equal(t, "Exists", keys[`.metadata.labels["`+BuildIDLabel+`"]`], s.Metadata.Name)
		require.Equal(t, "InPending", keys[".status.phase"], s.Metadata.Name)
		require.Equal(t, "DoesNotExist", keys[".metadata.deletionTimestamp"], s.Metadata.Name)
		failKey := keys[`.metadata.labels["`+BuildFailLabel+`"]`]
		if s.Metadata.Name == "pod-build-failed" {
			require.Equal(t, "Intrue", failKey)
		} else {
			require.Equal(t, "NotIntrue", failKey, "the two Stages never both match")
		}
	}

	commit := strings.Repeat("c0ffee", 6) + "c0ff"
	st := render(t, ok, buildPod(map[string]string{BuildIDLabel: "b1"}, map[string]string{BuildCommitAnnotation: commit}))
	require.Equal(t, corev1.PodSucceeded, st.Phase)
	require.Len(t, st.ContainerStatuses, 1)
	term := st.ContainerStatuses[0].State.Terminated
	require.NotNil(t, term)
	require.EqualValues(t, 0, term.ExitCode)
	require.Equal(t, `{"digest":"`+BuildDigest+`","commit":"`+commit+`"}`, term.Message)
	require.Equal(t, BuildSucceededMessage(commit), term.Message)
	require.Len(t, st.InitContainerStatuses, 1)
	require.Equal(t, "Completed", st.InitContainerStatuses[0].State.Terminated.Reason)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, BuildDigest)

	// Without the annotation (or any), the commit is empty; a commit that
	// needs escaping stays valid JSON.
	st = render(t, ok, buildPod(map[string]string{BuildIDLabel: "b1"}, nil))
	require.Equal(t, BuildSucceededMessage(""), st.ContainerStatuses[0].State.Terminated.Message)
	st = render(t, ok, buildPod(map[string]string{BuildIDLabel: "b1"}, map[string]string{BuildCommitAnnotation: `a"b\c<`}))
	var msg struct{ Digest, Commit string }
	require.NoError(t, json.Unmarshal([]byte(st.ContainerStatuses[0].State.Terminated.Message), &msg))
	require.Equal(t, `a"b\c<`, msg.Commit)
	require.Equal(t, BuildSucceededMessage(`a"b\c<`), st.ContainerStatuses[0].State.Terminated.Message)

	st = render(t, fail, buildPod(map[string]string{BuildIDLabel: "b2", BuildFailLabel: "true"}, nil))
	require.Equal(t, corev1.PodFailed, st.Phase)
	term = st.ContainerStatuses[0].State.Terminated
	require.EqualValues(t, BuildFailExitCode, term.ExitCode)
	require.Equal(t, BuildFailMessage, term.Message)
	var failure struct {
		ExitCode int
		Reason   string
	}
	require.NoError(t, json.Unmarshal([]byte(term.Message), &failure))
	require.Equal(t, 3, failure.ExitCode)
	require.Equal(t, `process "/bin/sh -c exit 3" did not complete successfully: exit code: 3`, failure.Reason)
}
