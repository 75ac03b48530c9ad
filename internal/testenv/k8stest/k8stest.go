// Package k8stest runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, with kwok
// playing the kubelets of fake nodes, so that Deployments are scheduled, their
// pods become Ready with IPs, Services get EndpointSlices, RBAC is enforced
// and pod logs are served through the real pods/log API. No test talks to a
// fake clientset.
//
// The binaries are built once, from Go modules, by `go tool task k8s`
// (scripts/build-k8s.sh) into a cache outside the repository; a test whose
// binaries are missing fails rather than skips, because a skipped test would
// hide that the real part was never exercised.
//
// A test package that uses Shared calls k8stest.Main from TestMain so that the
// shared cluster is stopped when the tests end.
package k8stest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Version is the Kubernetes release the harness runs.
const Version = "v1.37.2"

// EnvDir names a directory holding bin/{etcd,kube-apiserver,...} and
// kwok-stages.yaml, overriding the build cache.
const EnvDir = "NEBULACTRL_K8S_DIR"

// EnvKeepDir, when set to a non-empty value, keeps each cluster's directory
// (process logs, audit log, certificates) after the test for post-mortems.
const EnvKeepDir = "NEBULACTRL_K8S_KEEP_DIR"

// AdminUser is the user name of Cluster.Admin, as it appears in the audit log.
const AdminUser = "nebula-test-admin"

// The users the other components authenticate as, as they appear in the
// audit log.
const (
	ControllerManagerUser = "system:kube-controller-manager"
	SchedulerUser         = "system:kube-scheduler"
	KwokUser              = "kwok"
)

// FakeNodeAnnotation marks the Node objects that kwok manages.
const FakeNodeAnnotation = "kwok.x-k8s.io/node"

// startTimeout bounds the whole start-up; a healthy start takes seconds, a
// hung one should fail the test with logs rather than wait for go test's
// global timeout, which discards them.
const startTimeout = 2 * time.Minute

// stopGrace is how long a process has to exit after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// Options configure a cluster.
type Options struct {
	// Nodes is the number of fake nodes; 0 means 2.
	Nodes int
	// Logs are container logs kwok serves through the pods/log API.
	Logs []LogFile
}

// LogFile makes kwok serve the file at Path as the log of matching
// containers. The file must be in the CRI log format, one entry a line:
//
//	2026-11-30T00:00:00.000000000Z stdout F the text
//
// kwok refuses plain lines with "unsupported log format". Lines appended
// later reach followers (GetLogs with Follow).
type LogFile struct {
	// Namespace selects the pods' namespace; empty matches every namespace.
	Namespace string
	// Container selects the container name; empty matches every container.
	Container string
	// Path is the log file.
	Path string
}

// Cluster is a running control plane.
type Cluster struct {
	// Admin authenticates as AdminUser, in group system:masters, with a
	// static token.
	Admin *rest.Config
	// Dir holds the processes' logs, data and configuration.
	Dir string
	// Server is the API server's URL, https://127.0.0.1:PORT.
	Server string
	// CAData verifies the API server's self-signed serving certificate.
	CAData []byte

	procs             []*process // in start order
	controllerManager *process   // blamed when namespaces lack their default ServiceAccount
	keepDir           bool
	stopOnce          sync.Once
	stopErr           error
}

// The shared cluster is per test binary, created on first use: a test
// harness is the one place where this package-level state earns its keep.
var shared struct {
	once    sync.Once
	cluster *Cluster
	err     error
}

// Main runs the tests and then stops the shared cluster, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if shared.cluster != nil {
		if err := shared.cluster.stop(stopGrace); err != nil {
			fmt.Fprintf(os.Stderr, "k8stest: stopping the shared cluster: %v\n", err)
		}
	}
	os.Exit(code)
}

// Shared returns the test binary's shared cluster (default Options), starting
// it on first use. Tests on it must isolate themselves, typically with
// Namespace. The package's TestMain must call Main to stop it.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		began := time.Now()
		shared.cluster, shared.err = start(Options{})
		if shared.err == nil {
			t.Logf("k8stest: shared cluster up in %v, directory %s", time.Since(began).Round(time.Millisecond), shared.cluster.Dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("k8stest: no shared Kubernetes cluster for this test (a real control plane is required): %v", shared.err)
	}
	return shared.cluster
}

// Start starts a cluster for one test; it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	began := time.Now()
	c, err := start(opts)
	if err != nil {
		t.Fatalf("k8stest: starting a Kubernetes cluster (a real control plane is required): %v", err)
	}
	// Start-up and shutdown times are logged because they dominate the run
	// time of tests that use their own cluster.
	t.Logf("k8stest: cluster up in %v, directory %s", time.Since(began).Round(time.Millisecond), c.Dir)
	t.Cleanup(func() {
		began := time.Now()
		if err := c.stop(stopGrace); err != nil {
			t.Errorf("k8stest: stopping the cluster: %v", err)
		}
		t.Logf("k8stest: cluster stopped in %v", time.Since(began).Round(time.Millisecond))
	})
	return c
}

// Client returns a clientset authenticated as AdminUser.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(c.Admin))
	if err != nil {
		t.Fatalf("k8stest: admin clientset: %v", err)
	}
	return cs
}

// ServiceAccountUser is the user name a ServiceAccount authenticates as, as
// it appears in the audit log and in RBAC subjects of kind User.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// ServiceAccountConfig returns a rest.Config that authenticates as the
// ServiceAccount namespace/name, creating the ServiceAccount if needed. The
// token comes from the TokenRequest API, as a pod's projected token would, so
// requests go through real authentication and RBAC: a ServiceAccount with no
// bindings is forbidden nearly everything.
func (c *Cluster) ServiceAccountConfig(t testing.TB, namespace, name string) *rest.Config {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := c.Client(t)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("k8stest: creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	// An hour outlives any test; the API server's minimum is ten minutes.
	expiry := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("k8stest: requesting a token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	return &rest.Config{
		Host:            c.Server,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), c.CAData...)},
	}
}

// Namespace creates a fresh namespace named after the test and deletes it
// when the test ends. Deletion is not awaited: nothing else will use the name.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	name := namespaceName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := c.Client(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("k8stest: creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("k8stest: deleting namespace %s: %v", name, err)
		}
	})
	// The API server rejects a pod whose ServiceAccount does not exist yet,
	// and the controller manager creates "default" only after the namespace:
	// wait, so a test may create pods straight away.
	err := waitFor(ctx, c.procs, "the default ServiceAccount in namespace "+name, []*process{c.controllerManager}, func(ctx context.Context) (bool, error) {
		return serviceAccountExists(ctx, cs, name, "default")
	})
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	return name
}

// namespaceName turns a test name into a DNS label with a random suffix, so
// that the namespace says which test made it.
func namespaceName(testName string) string {
	var b strings.Builder
	dash := true // no leading dash
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	prefix := strings.TrimSuffix(b.String(), "-")
	if prefix == "" {
		prefix = "test"
	}
	return prefix + "-" + strings.ToLower(rand.Text()[:6])
}

// AuditLog returns the path of the API server's audit log: JSON lines, one
// audit.k8s.io/v1 Event each, at Metadata level for every request.
func (c *Cluster) AuditLog() string {
	return filepath.Join(c.Dir, "audit.log")
}

// BinDir returns the directory holding bin/ (the binaries) and
// kwok-stages.yaml: NEBULACTRL_K8S_DIR, or else the cache that
// scripts/build-k8s.sh fills.
func BinDir() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return d, nil
	}
	cache := os.Getenv("NEBULACTRL_CACHE_DIR")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("locating the build cache: %w", err)
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "nebulactrl")
	}
	return filepath.Join(cache, "k8s-"+Version), nil
}

// Kubectl returns the path of the kubectl that scripts/build-k8s.sh built
// (of the same version as the API server), for tests that run what a user
// would type.
func Kubectl() (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "bin", "kubectl")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("missing bin/kubectl in %s: run `go tool task k8s` to build it, or set %s", dir, EnvDir)
	}
	return p, nil
}

func findBinaries() (string, error) {
	dir, err := BinDir()
	if err != nil {
		return "", err
	}
	var missing []string
	for _, b := range []string{"bin/etcd", "bin/kube-apiserver", "bin/kube-controller-manager", "bin/kube-scheduler", "bin/kwok", "kwok-stages.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("missing %s in %s: run `go tool task k8s` to build the Kubernetes binaries (about 12 minutes the first time), or set %s",
			strings.Join(missing, ", "), dir, EnvDir)
	}
	return dir, nil
}

// stop stops the processes in reverse start order, each with SIGTERM and
// after grace SIGKILL, and removes Dir.
func (c *Cluster) stop(grace time.Duration) error {
	c.stopOnce.Do(func() {
		var errs []error
		for i := len(c.procs) - 1; i >= 0; i-- {
			if err := c.procs[i].stop(grace); err != nil {
				errs = append(errs, err)
			}
		}
		if !c.keepDir {
			if err := os.RemoveAll(c.Dir); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", c.Dir, err))
			}
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// Launch starts a cluster outside a test (the benchmarks); Stop ends it.
func Launch(opts Options) (*Cluster, error) { return start(opts) }

// Stop stops a cluster that Launch started.
func (c *Cluster) Stop() error { return c.stop(10 * time.Second) }
