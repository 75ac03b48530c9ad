package build

import (
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/transport"
)

// TestDecide covers the outcomes a kubelet and the Job controller can
// produce that the API server test does not stage: kills, deadlines, pods
// that never start.
func TestDecide(t *testing.T) {
	const id, commit = "b-1", "1f7b2c3d4e5f60718293a4b5c6d7e8f901234567"
	job := func(conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{BuildIDLabel: id},
			Annotations: map[string]string{ImageAnnotation: "acme/api", CommitAnnotation: ""}},
			Status: batchv1.JobStatus{Conditions: conds}}
	}
	deadline := batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded",
		Message: "Job was active longer than specified deadline"}
	term := func(code int32, reason, msg string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: msg}}
	}
	pod := func(clone, build *corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{}
		if clone != nil {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: CloneContainer, State: *clone}}
		}
		if build != nil {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: BuildContainer, State: *build}}
		}
		return p
	}
	cloned := term(0, "Completed", `{"commit":"`+commit+`"}`)
	runningState := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	pulling := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"moby/buildkit\""}}

	for _, tc := range []struct {
		name     string
		job      *batchv1.Job
		pod      *corev1.Pod
		want     transport.BuildReport
		tailFrom string
	}{
		{name: "no pod yet", job: job(), want: transport.BuildReport{}},
		{name: "cloning", job: job(), pod: pod(&runningState, nil), want: transport.BuildReport{}},
		{name: "building", job: job(), pod: pod(&cloned, &runningState),
			want: transport.BuildReport{State: transport.BuildRunning, Commit: commit}},
		{name: "pushed", job: job(), pod: pod(&cloned, ptr(term(0, "Completed", `{"digest":"sha256:ab","commit":"`+commit+`"}`))),
			want: transport.BuildReport{State: transport.BuildSucceeded, Commit: commit, Image: "localhost:30500/acme/api", Digest: "sha256:ab"}},
		{name: "exit 0 without a digest", job: job(), pod: pod(&cloned, ptr(term(0, "Completed", ""))),
			want: transport.BuildReport{State: transport.BuildFailed, Commit: commit,
				Reason: "the build container ended without an image digest in its termination message"}, tailFrom: BuildContainer},
		{name: "RUN failed", job: job(), pod: pod(&cloned, ptr(term(3, "Error", `{"exitCode":3,"reason":"error: exit code: 3"}`))),
			want: transport.BuildReport{State: transport.BuildFailed, Commit: commit, ExitCode: 3, Reason: "error: exit code: 3"}, tailFrom: BuildContainer},
		{name: "out of memory", job: job(), pod: pod(&cloned, ptr(term(137, "OOMKilled", ""))),
			want: transport.BuildReport{State: transport.BuildFailed, Commit: commit, ExitCode: 137,
				Reason: "the build container ended with exit code 137 (OOMKilled)"}, tailFrom: BuildContainer},
		{name: "killed at the deadline", job: job(deadline), pod: pod(&cloned, ptr(term(143, "Error", ""))),
			want: transport.BuildReport{State: transport.BuildFailed, Commit: commit, ExitCode: 143,
				Reason: "DeadlineExceeded: Job was active longer than specified deadline; the build container ended with exit code 143 (Error)"}, tailFrom: BuildContainer},
		{name: "clone failed", job: job(), pod: pod(ptr(term(1, "Error", `{"exitCode":1,"reason":"clone: git fetch: fatal: Authentication failed"}`)), nil),
			want: transport.BuildReport{State: transport.BuildFailed, ExitCode: 1, Reason: "clone: git fetch: fatal: Authentication failed"}, tailFrom: CloneContainer},
		{name: "a message the script did not write", job: job(), pod: pod(ptr(term(2, "Error", "cut short {")), nil),
			want: transport.BuildReport{State: transport.BuildFailed, ExitCode: 2, Reason: "cut short {"}, tailFrom: CloneContainer},
		{name: "deadline while the image does not pull", job: job(deadline), pod: pod(&cloned, &pulling),
			want: transport.BuildReport{State: transport.BuildFailed, Commit: commit,
				Reason: `DeadlineExceeded: Job was active longer than specified deadline; the build container was waiting: ImagePullBackOff: Back-off pulling image "moby/buildkit"`},
			tailFrom: BuildContainer},
		{name: "deadline and the pod gone", job: job(deadline), want: transport.BuildReport{State: transport.BuildFailed,
			Reason: "DeadlineExceeded: Job was active longer than specified deadline"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, tailFrom := decide(tc.job, tc.pod, "localhost:30500")
			if tc.want.State != "" {
				tc.want.BuildID = id
			} else {
				tc.want = transport.BuildReport{BuildID: id}
			}
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.tailFrom, tailFrom)
			if got.State != "" {
				require.NoError(t, got.Validate())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestCheckSpec(t *testing.T) {
	good := transport.BuildSpec{ID: "0f8fad5b-d9cb-469f-a165-70867728950e", Service: "api", Repository: "git@github.com:acme/shop.git",
		Branch: "feature/x", Dockerfile: "Dockerfile", Image: "acme/shop/api", TimeoutSeconds: 60}
	require.NoError(t, checkSpec(good))
	for _, repo := range []string{"https://github.com/acme/shop.git", "ssh://git@github.com/acme/shop.git", "file:///srv/shop.git"} {
		s := good
		s.Repository = repo
		require.NoError(t, checkSpec(s), repo)
	}
	for name, mutate := range map[string]func(*transport.BuildSpec){
		"password in the URL": func(s *transport.BuildSpec) { s.Repository = "https://user:secret@github.com/acme/shop.git" },
		"option as URL":       func(s *transport.BuildSpec) { s.Repository = "--upload-pack=touch /x" },
		"ext transport":       func(s *transport.BuildSpec) { s.Repository = "ext::sh" },
		"short commit":        func(s *transport.BuildSpec) { s.Commit = "abc123" },
		"no branch or commit": func(s *transport.BuildSpec) { s.Branch = "" },
		"branch as option":    func(s *transport.BuildSpec) { s.Branch = "-x" },
		"branch with ..":      func(s *transport.BuildSpec) { s.Branch = "a..b" },
		"image upper case":    func(s *transport.BuildSpec) { s.Image = "Acme/Shop" },
		"image with a tag":    func(s *transport.BuildSpec) { s.Image = "acme/shop:1" },
		"dockerfile escapes":  func(s *transport.BuildSpec) { s.Dockerfile = "../Dockerfile" },
		"context escapes":     func(s *transport.BuildSpec) { s.Context = "app/../../x" },
		"id not a label":      func(s *transport.BuildSpec) { s.ID = "a b" },
		"negative timeout":    func(s *transport.BuildSpec) { s.TimeoutSeconds = -1 },
		"empty credential":    func(s *transport.BuildSpec) { s.Credential = &transport.GitCredential{Username: "u"} },
	} {
		s := good
		mutate(&s)
		require.Error(t, checkSpec(s), name)
	}
}
