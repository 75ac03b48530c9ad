package build_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/agent/build"
	"github.com/nebulactrl/nebulactrl/transport"
)

func spec() transport.BuildSpec {
	return transport.BuildSpec{
		ID:             "0f8fad5b-d9cb-469f-a165-70867728950e",
		Service:        "api",
		Repository:     "https://git.example.com/acme/shop.git",
		Branch:         "main",
		Commit:         "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
		Dockerfile:     "build/Dockerfile",
		Context:        "app",
		Image:          "acme/shop/api",
		TimeoutSeconds: 900,
	}
}

func container(t *testing.T, cs []corev1.Container, name string) corev1.Container {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func env(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func TestJobLabelsDeadlinesAndPod(t *testing.T) {
	s := spec()
	job, secret := build.Job(s, build.Config{})
	require.Nil(t, secret, "a build without a credential has no Secret")

	require.Equal(t, "build-"+s.ID, job.Name)
	require.Equal(t, build.DefaultNamespace, job.Namespace)
	for _, l := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		require.Equal(t, s.ID, l[build.BuildIDLabel])
		require.Equal(t, "api", l[build.ServiceLabel])
		require.Equal(t, "nebulactrl", l["app.kubernetes.io/managed-by"])
	}
	require.Equal(t, s.Commit, job.Annotations[build.CommitAnnotation])
	require.Equal(t, s.Image, job.Annotations[build.ImageAnnotation])

	require.EqualValues(t, 0, *job.Spec.BackoffLimit)
	require.EqualValues(t, 900, *job.Spec.ActiveDeadlineSeconds)
	require.Nil(t, job.Spec.TTLSecondsAfterFinished, "the runner deletes finished Jobs, not a TTL")

	pod := job.Spec.Template.Spec
	require.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
	require.False(t, *pod.AutomountServiceAccountToken)
	require.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.Empty(t, pod.ServiceAccountName)
	require.False(t, pod.HostNetwork || pod.HostPID || pod.HostIPC)
	for _, v := range pod.Volumes {
		require.NotNil(t, v.EmptyDir, "volume %s: only emptyDirs, no host paths", v.Name)
		require.NotNil(t, v.EmptyDir.SizeLimit, "volume %s is bounded", v.Name)
	}

	clone := container(t, pod.InitContainers, build.CloneContainer)
	require.Equal(t, build.DefaultCloneImage, clone.Image)
	require.Equal(t, []string{"/bin/sh", "-c", build.CloneScript}, clone.Command)
	sc := clone.SecurityContext
	require.NotZero(t, *sc.RunAsUser)
	require.True(t, *sc.RunAsNonRoot)
	require.True(t, *sc.ReadOnlyRootFilesystem)
	require.False(t, *sc.AllowPrivilegeEscalation)
	require.False(t, *sc.Privileged)
	require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	require.Empty(t, sc.Capabilities.Add)
	require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	for name, want := range map[string]string{"GIT_REPOSITORY": s.Repository, "GIT_BRANCH": "main", "GIT_COMMIT": s.Commit} {
		e, ok := env(clone, name)
		require.True(t, ok, name)
		require.Equal(t, want, e.Value, name)
	}

	b := container(t, pod.Containers, build.BuildContainer)
	require.Equal(t, build.DefaultBuilderImage, b.Image)
	require.Equal(t, []string{"/bin/sh", "-c", build.BuildScript}, b.Command)
	bsc := b.SecurityContext
	require.EqualValues(t, 1000, *bsc.RunAsUser)
	require.EqualValues(t, 1000, *bsc.RunAsGroup)
	require.True(t, *bsc.RunAsNonRoot)
	require.False(t, *bsc.Privileged)
	require.Nil(t, bsc.Capabilities, "no capability added")
	require.Equal(t, corev1.SeccompProfileTypeUnconfined, bsc.SeccompProfile.Type)
	require.Equal(t, corev1.AppArmorProfileTypeUnconfined, bsc.AppArmorProfile.Type)
	require.Equal(t, "privileged", build.PodSecurityLevel, "baseline forbids Unconfined seccomp and AppArmor")
	for name, want := range map[string]string{
		"BUILDKITD_FLAGS":  "--oci-worker-no-process-sandbox",
		"BUILDKIT_HOST":    "",
		"PUSH_REGISTRY":    build.DefaultPushRegistry,
		"IMAGE":            s.Image,
		"BUILD_DOCKERFILE": "build/Dockerfile",
		"BUILD_CONTEXT":    "app",
		"BUILDKITD_TOML":   build.BuildkitdConfig(build.DefaultPushRegistry),
	} {
		e, ok := env(b, name)
		require.True(t, ok, name)
		require.Equal(t, want, e.Value, name)
	}
	require.Contains(t, build.BuildkitdConfig("r.example:5000"), "[registry.\"r.example:5000\"]\n  http = true")
	for _, c := range []corev1.Container{clone, b} {
		require.False(t, c.Resources.Limits.Cpu().IsZero(), "%s: cpu limit", c.Name)
		require.False(t, c.Resources.Limits.Memory().IsZero(), "%s: memory limit", c.Name)
		require.False(t, c.Resources.Requests.Memory().IsZero(), "%s: memory request", c.Name)
	}
	for _, m := range b.VolumeMounts {
		if m.MountPath == "/workspace" {
			require.True(t, m.ReadOnly, "the build reads the checkout only")
		}
	}
}

func TestJobKeepsTheCredentialInItsSecret(t *testing.T) {
	for _, cred := range []transport.GitCredential{
		{Username: "deploy-user", Token: "ghp_tokenvalue0123456789"},
		{SSHKey: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n-----END OPENSSH PRIVATE KEY-----"},
	} {
		s := spec()
		s.Credential = &cred
		job, secret := build.Job(s, build.Config{Namespace: "builds"})
		require.NotNil(t, secret)
		require.Equal(t, job.Name, secret.Name)
		require.Equal(t, "builds", secret.Namespace)
		require.Equal(t, s.ID, secret.Labels[build.BuildIDLabel], "Set finds Secrets by label")

		var secrets []string
		for _, v := range []string{cred.Username, cred.Token, cred.SSHKey} {
			if v != "" {
				secrets = append(secrets, v)
			}
		}
		var inSecret []string
		for _, v := range secret.Data {
			inSecret = append(inSecret, string(v))
		}
		require.ElementsMatch(t, secrets, inSecret)

		// Nothing of the credential in the Job: not in commands, arguments,
		// environment values or annotations.
		pod := job.Spec.Template.Spec
		refs := 0
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			for _, e := range c.Env {
				for _, v := range secrets {
					require.NotContains(t, e.Value, v, "%s env %s", c.Name, e.Name)
				}
				if e.ValueFrom != nil {
					require.Equal(t, secret.Name, e.ValueFrom.SecretKeyRef.Name)
					require.Contains(t, secret.Data, e.ValueFrom.SecretKeyRef.Key)
					require.Equal(t, build.CloneContainer, c.Name, "only the clone reads the credential")
					refs++
				}
			}
			for _, a := range append(c.Command, c.Args...) {
				for _, v := range secrets {
					require.NotContains(t, a, v)
				}
			}
		}
		require.Equal(t, len(secrets), refs)
		for _, v := range job.Annotations {
			for _, sv := range secrets {
				require.NotContains(t, v, sv)
			}
		}
	}
}

func TestJobNamesAreValidAndDistinct(t *testing.T) {
	ids := []string{"0f8fad5b-d9cb-469f-a165-70867728950e", "Build_ID.with.dots", "b", "AAAAAAAA-1", "aaaaaaaa-1",
		strings.Repeat("x", 63), strings.Repeat("x", 62) + "y"}
	seen := map[string]string{}
	for _, id := range ids {
		n := build.JobName(id)
		require.Empty(t, validation.IsDNS1123Label(n), "%q gives %q", id, n)
		require.LessOrEqual(t, len(n), 56, "room for the pods' suffix")
		require.True(t, strings.HasPrefix(n, "build-"))
		_, dup := seen[n]
		require.False(t, dup, "%q and %q give the same name %q", id, seen[n], n)
		seen[n] = id
	}
	require.Equal(t, build.JobName("x"), build.JobName("x"), "deterministic")
}

func TestJobTimeoutDefaults(t *testing.T) {
	s := spec()
	s.TimeoutSeconds = 0
	job, _ := build.Job(s, build.Config{})
	require.EqualValues(t, build.DefaultTimeout, *job.Spec.ActiveDeadlineSeconds, "a build is always bounded")
}

func TestConfigValidateJoinsProblems(t *testing.T) {
	err := build.Config{Namespace: "Not A Namespace", PushRegistry: "reg/istry", NodeRegistry: "host:port"}.Validate()
	require.Error(t, err)
	for _, want := range []string{"Client is required", "Report is required", "Logs is required", "Namespace", "PushRegistry", "NodeRegistry"} {
		require.ErrorContains(t, err, want)
	}
	_, err = build.New(build.Config{})
	require.Error(t, err)

	// A client that is never used: Validate does no I/O.
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	require.NoError(t, err)
	ok := build.Config{Client: cs, Report: func(transport.BuildReport) {}, Logs: func(transport.BuildLogs) {}}
	require.NoError(t, ok.Validate())
}
