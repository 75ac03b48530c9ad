// Package build owns the agent's builds from Git: each build the control
// plane wants running becomes a Kubernetes Job in the build namespace
// (nebula-build) whose init container clones the commit and whose container
// builds and pushes the image with rootless BuildKit to the cluster's
// registry. The package makes those Jobs (and the Secret holding a build's
// Git credential), deletes the Jobs of builds the control plane no longer
// wants, watches the build pods and reports what becomes of each build, with
// its output, as the transport's build messages.
//
// The scripts the containers run are constants of this package (scripts.go),
// so that the tests run exactly the commands the pods run, against a real
// buildkitd, registry and Git repository.
//
// In the build namespace the agent needs: jobs (create, list, watch,
// delete), secrets (create, list, delete), pods (list, watch) and pods/log
// (get), which the installer's Role grants. The namespace must carry the Pod Security level
// PodSecurityLevel.
package build

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/transport"
)

// Defaults of Config.
const (
	DefaultNamespace = "nebula-build"
	// DefaultPushRegistry is the cluster's registry as the build pods reach
	// it: the in-cluster Service the agent runs in nebula-system, plain HTTP.
	DefaultPushRegistry = "nebula-registry.nebula-system.svc.cluster.local:5000"
	// DefaultNodeRegistry is the same registry as the nodes' container
	// runtime pulls from it: a NodePort on localhost, which containerd
	// reaches over plain HTTP without any configuration of the node.
	DefaultNodeRegistry = "localhost:30500"
	// DefaultCloneImage runs the clone: the alpine/git image pinned by its
	// Git version (multi-arch, amd64 and arm64). It has git and the OpenSSH
	// client on BusyBox sh, and the user nobody (65534) in /etc/passwd,
	// which ssh needs to run at all.
	DefaultCloneImage = "alpine/git:v2.47.2"
	// DefaultBuilderImage is rootless BuildKit of the version the tests run
	// (scripts/build-buildkit.sh): buildctl-daemonless.sh starts buildkitd
	// under rootlesskit as user 1000 inside the container.
	DefaultBuilderImage = "moby/buildkit:v0.34.2-rootless"
)

// PodSecurityLevel is the Pod Security Standard the installer labels the
// build namespace with (pod-security.kubernetes.io/enforce). The build
// container runs rootless BuildKit, which creates user and mount namespaces
// for the build's RUN steps; it needs
//
//	spec.containers[build].securityContext.seccompProfile.type: Unconfined
//	spec.containers[build].securityContext.appArmorProfile.type: Unconfined
//
// because the runtime's default seccomp profile refuses unshare/clone of a
// user namespace and its default AppArmor profile refuses mount. Baseline
// (and so restricted) forbids both Unconfined values: the namespace must be
// "privileged". Nothing else of the pod needs it: no privileged container,
// no added capability, no host namespace or path, non-root users.
const PodSecurityLevel = "privileged"

// Labels and annotations on a build's Job, pod and Secret.
const (
	BuildIDLabel   = "nebulactrl.io/build-id"
	ServiceLabel   = "nebulactrl.io/service"
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "nebulactrl"
	// CommitAnnotation is the commit the control plane asked for (empty:
	// the branch's head); ImageAnnotation the image's path in the registry,
	// which reports need after an agent restart.
	CommitAnnotation = "nebulactrl.io/commit"
	BranchAnnotation = "nebulactrl.io/branch"
	ImageAnnotation  = "nebulactrl.io/image"
)

// selector picks the build Jobs, pods and Secrets this package manages.
const selector = ManagedByLabel + "=" + ManagedBy + "," + BuildIDLabel

// Config configures the builds of a cluster.
type Config struct {
	// Client reaches the cluster's API server. Required.
	Client kubernetes.Interface
	// Namespace holds the build Jobs; DefaultNamespace when empty. It must
	// exist, labelled with PodSecurityLevel.
	Namespace string
	// PushRegistry is where the builder pushes (plain HTTP, in-cluster);
	// DefaultPushRegistry when empty.
	PushRegistry string
	// NodeRegistry is how the nodes pull the same registry; it prefixes the
	// reported image. DefaultNodeRegistry when empty.
	NodeRegistry string
	// CloneImage and BuilderImage are the images of the clone and build
	// containers; DefaultCloneImage and DefaultBuilderImage when empty.
	CloneImage, BuilderImage string
	// Report receives what becomes of each build. It is called from the
	// runner's goroutines and must not block long. Required by New.
	Report func(transport.BuildReport)
	// Logs receives the build pods' output in batches, under the same rule
	// as Report. Required by New.
	Logs func(transport.BuildLogs)
	// Logger receives what the runner does; discarded when nil.
	Logger *slog.Logger
	// Now stamps reports; time.Now when nil.
	Now func() time.Time
}

// withDefaults fills the empty fields that have defaults.
func (c Config) withDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.PushRegistry == "" {
		c.PushRegistry = DefaultPushRegistry
	}
	if c.NodeRegistry == "" {
		c.NodeRegistry = DefaultNodeRegistry
	}
	if c.CloneImage == "" {
		c.CloneImage = DefaultCloneImage
	}
	if c.BuilderImage == "" {
		c.BuilderImage = DefaultBuilderImage
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate reports every problem of the configuration at once; empty fields
// that have defaults are fine.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("build: Config.Client is required"))
	}
	if c.Report == nil {
		errs = append(errs, errors.New("build: Config.Report is required"))
	}
	if c.Logs == nil {
		errs = append(errs, errors.New("build: Config.Logs is required"))
	}
	if c.Namespace != "" {
		for _, msg := range validation.IsDNS1123Label(c.Namespace) {
			errs = append(errs, fmt.Errorf("build: Config.Namespace %q: %s", c.Namespace, msg))
		}
	}
	for _, r := range []struct{ field, value string }{{"PushRegistry", c.PushRegistry}, {"NodeRegistry", c.NodeRegistry}} {
		if r.value != "" && !validRegistryHost(r.value) {
			errs = append(errs, fmt.Errorf("build: Config.%s %q is not a registry host[:port]", r.field, r.value))
		}
	}
	for _, im := range []struct{ field, value string }{{"CloneImage", c.CloneImage}, {"BuilderImage", c.BuilderImage}} {
		if strings.ContainsAny(im.value, " \t\n") {
			errs = append(errs, fmt.Errorf("build: Config.%s %q holds white space", im.field, im.value))
		}
	}
	return errors.Join(errs...)
}

// validRegistryHost accepts host or host:port, the part of an image
// reference before the first slash.
func validRegistryHost(s string) bool {
	if s == "" || strings.ContainsAny(s, "/ \t\n\"'\\,=") {
		return false
	}
	host, port, hasPort := strings.Cut(s, ":")
	if host == "" || hasPort && (port == "" || strings.Trim(port, "0123456789") != "") {
		return false
	}
	return true
}
