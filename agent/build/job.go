package build

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nebulactrl/nebulactrl/transport"
)

// The containers of a build pod.
const (
	CloneContainer = "clone"
	BuildContainer = "build"
)

// DefaultTimeout bounds a build whose spec gives no TimeoutSeconds.
const DefaultTimeout = 3600

// Keys of a build's Secret.
const (
	secretUsername   = "username"
	secretToken      = "token"
	secretSSHKey     = "ssh-key"
	secretKnownHosts = "known-hosts"
)

// Where the containers keep things. The clone's home is memory-backed: it
// holds the SSH key and the askpass helper, which then never reach the
// node's disk.
const (
	workspaceDir = "/workspace"
	cloneHome    = "/tmp"
	// buildkitState is where rootless buildkitd keeps its state in the
	// image (the image declares it a VOLUME; an emptyDir makes it work on
	// nodes whose container storage is nosuid, as upstream's example notes).
	buildkitState   = "/home/user/.local/share/buildkit"
	terminationPath = "/dev/termination-log"
	// The users: 65534 (nobody) has a passwd entry in the alpine/git image,
	// without which ssh refuses to run; 1000 is the rootless BuildKit
	// image's user, the one its /etc/subuid maps.
	cloneUser   = 65534
	builderUser = 1000
)

// Resources of the containers: bounded, so that a build cannot take a node.
// The clone needs little; BuildKit's own footprint is small (about 65 MB
// after a small build) but the build's RUN steps (compilers, package
// managers) run inside the build container and share its limit.
var (
	cloneResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	buildResources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi")},
	}
	// Size limits of the emptyDirs: the checkout, the clone's home (in
	// memory, counted in the clone's memory) and BuildKit's state (layers
	// and cache of one build). They bound the build's disk, which is almost
	// all in them; the containers request no ephemeral-storage, which a node
	// that does not report it (kwok's) could never schedule.
	workspaceLimit = resource.MustParse("4Gi")
	homeLimit      = resource.MustParse("16Mi")
	buildkitLimit  = resource.MustParse("20Gi")
)

// JobName is the name of a build's Job and Secret: "build-" and the build id
// when that is a short DNS label (a UUID is), else its first 8 characters
// made DNS-safe and a hash of the whole id. The Job's pods are named after
// it with a suffix, and the Job controller labels them with it, so it stays
// well under 63 characters.
func JobName(id string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, id)
	if safe == id && len(id) <= 50 && id != "" && !strings.HasSuffix(id, "-") {
		return "build-" + id
	}
	if len(safe) > 8 {
		safe = safe[:8]
	}
	sum := sha256.Sum256([]byte(id))
	return "build-" + strings.Trim(safe, "-") + "-" + hex.EncodeToString(sum[:6])
}

// Job returns the Job of a build and, when the build has a credential, the
// Secret holding it (nil otherwise), both named JobName(spec.ID), in
// cfg.Namespace; empty fields of cfg take their defaults. The spec is taken
// as it is: Runner.Set checks it first (checkSpec).
func Job(spec transport.BuildSpec, cfg Config) (*batchv1.Job, *corev1.Secret) {
	cfg = cfg.withDefaults()
	name := JobName(spec.ID)
	labels := map[string]string{ManagedByLabel: ManagedBy, BuildIDLabel: spec.ID}
	if spec.Service != "" {
		labels[ServiceLabel] = spec.Service
	}
	meta := func() metav1.ObjectMeta {
		l := make(map[string]string, len(labels))
		for k, v := range labels {
			l[k] = v
		}
		return metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: l}
	}

	var secret *corev1.Secret
	cloneEnv := []corev1.EnvVar{
		{Name: "WORKSPACE", Value: workspaceDir},
		{Name: "HOME", Value: cloneHome},
		{Name: "TERMINATION_LOG", Value: terminationPath},
		{Name: "GIT_REPOSITORY", Value: spec.Repository},
		{Name: "GIT_BRANCH", Value: spec.Branch},
		{Name: "GIT_COMMIT", Value: spec.Commit},
		// Never wait for a person at a prompt; read no system-wide config.
		{Name: "GIT_TERMINAL_PROMPT", Value: "0"},
		{Name: "GIT_CONFIG_NOSYSTEM", Value: "1"},
		// The protocols checkSpec accepts, and no remote helper.
		{Name: "GIT_ALLOW_PROTOCOL", Value: "https:http:ssh:git:file"},
	}
	if c := spec.Credential; c != nil {
		secret = &corev1.Secret{ObjectMeta: meta(), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
		// The values reach the clone as references to the Secret: the Job
		// and pod specs (which many may read) hold only the key names.
		for _, kv := range []struct{ env, key, value string }{
			{"GIT_USERNAME", secretUsername, c.Username},
			{"GIT_TOKEN", secretToken, c.Token},
			{"GIT_SSH_KEY", secretSSHKey, c.SSHKey},
			{"GIT_KNOWN_HOSTS", secretKnownHosts, c.KnownHosts},
		} {
			if kv.value == "" {
				continue
			}
			secret.Data[kv.key] = []byte(kv.value)
			cloneEnv = append(cloneEnv, corev1.EnvVar{Name: kv.env, ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: kv.key},
			}})
		}
	}

	buildEnv := []corev1.EnvVar{
		{Name: "WORKSPACE", Value: workspaceDir},
		{Name: "TERMINATION_LOG", Value: terminationPath},
		{Name: "BUILD_CONTEXT", Value: contextDir(spec.Context)},
		{Name: "BUILD_DOCKERFILE", Value: dockerfilePath(spec.Dockerfile)},
		{Name: "PUSH_REGISTRY", Value: cfg.PushRegistry},
		{Name: "IMAGE", Value: spec.Image},
		// The build's RUN steps run as processes of buildkitd, not in a
		// sandbox of their own: a nested PID namespace and a fresh /proc
		// need more than an unprivileged container is allowed.
		{Name: "BUILDKITD_FLAGS", Value: "--oci-worker-no-process-sandbox"},
		{Name: "BUILDKITD_TOML", Value: BuildkitdConfig(cfg.PushRegistry)},
		// The image points BUILDKIT_HOST at a daemon it would start as its
		// entrypoint; empty makes the script start one for the build
		// (buildctl-daemonless.sh).
		{Name: "BUILDKIT_HOST", Value: ""},
	}

	f, t := false, true
	cloneUID, builderUID := int64(cloneUser), int64(builderUser)
	deadline := int64(spec.TimeoutSeconds)
	if deadline <= 0 {
		deadline = DefaultTimeout
	}
	backoff := int32(0)
	podMeta := meta()
	podMeta.Name, podMeta.Namespace = "", ""

	job := &batchv1.Job{
		ObjectMeta: meta(),
		Spec: batchv1.JobSpec{
			// One attempt: a failed build is reported, and the control
			// plane decides about another.
			BackoffLimit:          &backoff,
			ActiveDeadlineSeconds: &deadline,
			// No TTLSecondsAfterFinished: the runner deletes the Job when
			// the build leaves the set, so a reconnect can re-report it.
			Template: corev1.PodTemplateSpec{
				ObjectMeta: podMeta,
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: &f,
					EnableServiceLinks:           &f,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   &t,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: []corev1.Container{{
						Name:      CloneContainer,
						Image:     cfg.CloneImage,
						Command:   []string{"/bin/sh", "-c", CloneScript},
						Env:       cloneEnv,
						Resources: cloneResources,
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:                &cloneUID,
							RunAsGroup:               &cloneUID,
							RunAsNonRoot:             &t,
							ReadOnlyRootFilesystem:   &t,
							AllowPrivilegeEscalation: &f,
							Privileged:               &f,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "workspace", MountPath: workspaceDir},
							{Name: "clone-home", MountPath: cloneHome},
						},
					}},
					Containers: []corev1.Container{{
						Name:      BuildContainer,
						Image:     cfg.BuilderImage,
						Command:   []string{"/bin/sh", "-c", BuildScript},
						Env:       buildEnv,
						Resources: buildResources,
						SecurityContext: &corev1.SecurityContext{
							RunAsUser:    &builderUID,
							RunAsGroup:   &builderUID,
							RunAsNonRoot: &t,
							Privileged:   &f,
							// Rootless BuildKit makes a user namespace
							// (rootlesskit) and mounts in it: the runtime's
							// default seccomp profile refuses the one, its
							// default AppArmor profile the other. These two
							// fields are why the namespace needs the
							// privileged Pod Security level.
							SeccompProfile:  &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined},
							AppArmorProfile: &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined},
							// AllowPrivilegeEscalation stays unset (true) and
							// no capability is dropped: rootlesskit maps the
							// user namespace with newuidmap/newgidmap, which
							// get CAP_SETUID/CAP_SETGID from their file
							// capabilities; no_new_privs or a bounding set
							// without them would make that fail. None is
							// added either: the process itself runs as 1000
							// with no capability in the node's namespace.
							// hostUsers: false is not used: it needs
							// Kubernetes 1.33, a kernel with idmapped mounts
							// of tmpfs (6.3) and containerd 2 on every node,
							// and upstream's user-namespace variant still
							// runs the container privileged.
						},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "workspace", MountPath: workspaceDir, ReadOnly: true},
							{Name: "buildkit", MountPath: buildkitState},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &workspaceLimit}}},
						{Name: "clone-home", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &homeLimit}}},
						{Name: "buildkit", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &buildkitLimit}}},
					},
				},
			},
		},
	}
	job.Annotations = map[string]string{CommitAnnotation: spec.Commit, BranchAnnotation: spec.Branch, ImageAnnotation: spec.Image}
	return job, secret
}

// contextDir is the build context relative to the checkout ("." for its
// root).
func contextDir(ctx string) string {
	ctx = strings.Trim(ctx, "/")
	if ctx == "" {
		return "."
	}
	return ctx
}

// dockerfilePath is the Dockerfile relative to the checkout: like `docker
// build -f`, the path is the repository's, not the context's.
func dockerfilePath(p string) string {
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return "Dockerfile"
	}
	return p
}
