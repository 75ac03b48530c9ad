// Package agentinstall renders what installs an agent: the Kubernetes manifest
// for a cluster and the systemd unit for an agent on a host.
//
// The manifest gives the agent no right over what NebulaCtrl does not
// manage. Cluster wide it may read nodes and namespaces, create namespaces
// and change those it manages, and bind one ClusterRole (WorkloadRole, the
// rights on workloads) with a RoleBinding: it binds it to itself in each
// environment's namespace it creates, so its rights on Secrets,
// Deployments, Services and Ingresses exist in those namespaces only. A
// ValidatingAdmissionPolicy holds the agent's ServiceAccount to that: it may
// change or bind only in namespaces labelled as managed by NebulaCtrl,
// create only namespaces that carry that label, and bind nothing but
// WorkloadRole to itself. Its pods pass the Pod Security Standard
// "restricted" (its namespace enforces it): non-root, no privilege
// escalation, no capabilities, the runtime's seccomp profile, read-only
// root filesystems, bounded resources, and health probes that need no
// inbound port.
//
// Builds run as Jobs in BuildNamespace, whose Pod Security level is
// "privileged" (rootless BuildKit needs Unconfined seccomp and AppArmor). The
// agent's rights there are a Role of its own (Jobs, their pods, logs and
// events, Secrets), and a second ValidatingAdmissionPolicy keeps its Jobs
// from what that level would otherwise allow: privileged containers, added
// capabilities, host namespaces, host paths and host ports. The builds push
// to the cluster's registry (a Deployment in AgentNamespace on a
// PersistentVolumeClaim), which every node pulls from through a NodePort on
// localhost: RegistryPushAddress and RegistryNodeAddress.
//
// The join token is in the manifest only when asked for; without it the
// manifest can live in Git and the token's Secret is created on its own.
package agentinstall

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/nebulactrl/nebulactrl/transport"
)

// Options say what to install.
type Options struct {
	// ControlPlaneURL is where the agents connect (https://...).
	ControlPlaneURL string
	// JoinToken is the cluster's join token, put in the manifest's Secret.
	JoinToken string
	// WithoutToken leaves the join token out: the manifest has no Secret,
	// which is created separately (see JoinSecretCommand), so the manifest
	// can be kept in Git.
	WithoutToken bool
	// Image is the agent's container image, with an explicit tag or digest
	// (never latest).
	Image string
	// Version is the control plane's version, which its agents run: the
	// host unit names it and its image ("" leaves that line out).
	Version string
	// CABundle (PEM) is trusted besides the system roots.
	CABundle string
	// Cluster names the cluster, for the reader of the manifest.
	Cluster string
	// InsecurePlainHTTP allows an http:// ControlPlaneURL to a host that is
	// not loopback: the join token, the agents' credentials and the secrets
	// of every desired state then cross the network in clear.
	InsecurePlainHTTP bool
	// RegistryImage is the cluster registry's image, with an explicit tag or
	// digest ("": the constant RegistryImage).
	RegistryImage string
	// RegistrySize is the storage the registry's PersistentVolumeClaim
	// requests, a Kubernetes quantity ("": DefaultRegistrySize).
	RegistrySize string
	// RegistryStorageClass is the storageClassName of the registry's
	// PersistentVolumeClaim. Empty leaves the field out, so that the
	// cluster's default StorageClass provisions it: on K3s, local-path, a
	// directory on the node the registry is scheduled to.
	RegistryStorageClass string
}

// Names of what the manifest creates.
const (
	AgentNamespace = "nebula-system"
	BuildNamespace = "nebula-build"
	AgentName      = "nebulactrl-agent"
	// WorkloadRole is the ClusterRole of the agent's rights in an
	// environment's namespace, which the agent binds there itself.
	WorkloadRole = "nebulactrl-workloads"
	// JoinSecret holds the join token, under JoinSecretKey.
	JoinSecret    = "nebulactrl-agent-join"
	JoinSecretKey = "join-token"
	// CAConfigMap holds the CA bundle, under ca.pem.
	CAConfigMap = "nebulactrl-agent-ca"
	// HealthFile is where the agent in a pod keeps its health, which its
	// probes read.
	HealthFile = "/run/nebulactrl/health"
	// PodBinary is the agent binary in a pod: on the pod volume its init
	// container seeds from the image, where a self-upgrade replaces it.
	PodBinary = "/agent-bin/nebulactrl-agent"
	// PodStateDir holds the in-cluster agent's upgrade.json, on the same
	// volume as its binary.
	PodStateDir = "/agent-bin/state"
	// ManagedByLabel marks what NebulaCtrl manages.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "nebulactrl"
)

// The cluster's registry: builds push there, nodes pull from there.
const (
	// RegistryName names the registry's Deployment, PersistentVolumeClaim
	// and Service, in AgentNamespace.
	RegistryName = "nebula-registry"
	// RegistryImage is the registry's default image: distribution's
	// official image (registry:2.8.3 on Docker Hub), pinned.
	RegistryImage = "docker.io/library/registry:2.8.3"
	// DefaultRegistrySize is the default storage of the registry.
	DefaultRegistrySize = "10Gi"
	// RegistryPort is the registry's port, in its pod and on its Service.
	RegistryPort = 5000
	// RegistryNodePort is the Service's port on every node.
	RegistryNodePort = 30500
	// RegistryPushAddress is where builds push, over plain HTTP: the
	// Service's name in the cluster (the agent's --registry).
	RegistryPushAddress = RegistryName + "." + AgentNamespace + ".svc.cluster.local:5000"
	// RegistryNodeAddress is where every node's container runtime pulls
	// built images from, by digest: the NodePort on localhost, which
	// containerd reaches over plain HTTP without configuration (the agent's
	// --node-registry).
	RegistryNodeAddress = "localhost:30500"
	// BuildRole is the agent's Role, and RoleBinding, in BuildNamespace.
	BuildRole = AgentName + "-builds"
	// MeshNamespace holds the WireGuard mesh's node agents (the DaemonSet
	// MeshName, host network, NET_ADMIN): the only namespace besides the
	// build namespace that enforces Pod Security "privileged".
	MeshNamespace = "nebula-mesh"
	// MeshName is the node agents' DaemonSet, ServiceAccount and Role.
	MeshName = "nebulactrl-mesh"
	// MeshRole is the agent's Role, and RoleBinding, in MeshNamespace.
	MeshRole = AgentName + "-mesh"
	// MeshKeyDir is the host directory that keeps each node's private key.
	MeshKeyDir = "/var/lib/nebulactrl-mesh"
)

// Host agent paths: the binary has a directory of its own, which the unit
// lets the agent write (to replace itself) and nothing else of the system.
const (
	HostBinaryDir = "/usr/local/lib/nebulactrl-agent"
	HostBinary    = HostBinaryDir + "/nebulactrl-agent"
	HostStateDir  = "/var/lib/nebulactrl-agent"
)

var (
	// quantity is a storage size as Kubernetes writes it: 10Gi, 500M, 1.5Ti.
	quantity = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$`)
	// dnsSubdomain is a StorageClass name.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// validSize reports whether s is a storage size greater than zero.
func validSize(s string) bool {
	if !quantity.MatchString(s) {
		return false
	}
	n, err := strconv.ParseFloat(strings.TrimRight(s, "KMGTPEik"), 64)
	return err == nil && n > 0
}

var releaseVersion = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// DefaultImage is the agent image of a control plane's version ("1.5.0"):
// the agents run the control plane's own version. It is "" for a version
// that is not a release ("dev", a commit): such a build has no published
// image, and the image must be given.
func DefaultImage(version string) string {
	if !releaseVersion.MatchString(version) {
		return ""
	}
	return "ghcr.io/nebulactrl/nebulactrl-agent:" + strings.TrimPrefix(version, "v")
}

// CheckImage refuses an image reference without an explicit tag or digest,
// or tagged latest: what runs must not change under the same manifest.
func CheckImage(image string) error {
	if image == "" || strings.ContainsAny(image, " \n\"'") {
		return fmt.Errorf("image %q is not an image reference", image)
	}
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image %q needs an explicit tag or digest (%v)", image, err)
	}
	if t, ok := ref.(name.Tag); ok && t.TagStr() == "latest" {
		return fmt.Errorf("image %q: not latest, which changes under the same manifest; give a version", image)
	}
	return nil
}

// CheckURL refuses a control plane URL the agents must not be given: not
// http(s), or plain http:// to a host that is not loopback unless insecure.
func CheckURL(raw string, insecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("control plane URL %q is not an http(s) URL", raw)
	}
	if u.Scheme == "http" && !insecure && !transport.IsLoopback(u.Hostname()) {
		return fmt.Errorf("control plane URL %s is plain HTTP to a host that is not loopback: the join token, "+
			"the agents' credentials and the secrets of every desired state would cross the network in clear; "+
			"give an https:// URL (or, on a network you trust as you would TLS, allow it with --insecure)", raw)
	}
	return nil
}

// Validate joins every problem with the options.
func (o Options) Validate() error { return o.validate(true) }

func (o Options) registryImage() string {
	if o.RegistryImage == "" {
		return RegistryImage
	}
	return o.RegistryImage
}

func (o Options) registrySize() string {
	if o.RegistrySize == "" {
		return DefaultRegistrySize
	}
	return o.RegistrySize
}

// validate checks the options; cluster adds what only the manifest uses (the
// images): a host runs the binary it was given, and has no cluster registry.
func (o Options) validate(cluster bool) error {
	var errs []error
	if err := CheckURL(o.ControlPlaneURL, o.InsecurePlainHTTP); err != nil {
		errs = append(errs, err)
	}
	if o.JoinToken == "" && !o.WithoutToken {
		errs = append(errs, errors.New("no join token"))
	}
	if strings.ContainsAny(o.JoinToken, " \n\r\"'") {
		errs = append(errs, errors.New("the join token holds spaces or quotes"))
	}
	if !cluster {
		return errors.Join(errs...)
	}
	if err := CheckImage(o.Image); err != nil {
		errs = append(errs, err)
	}
	if err := CheckImage(o.registryImage()); err != nil {
		errs = append(errs, fmt.Errorf("registry: %w", err))
	}
	if size := o.registrySize(); !validSize(size) {
		errs = append(errs, fmt.Errorf("registry size %q is not a storage size (10Gi, 500Mi)", size))
	}
	if c := o.RegistryStorageClass; c != "" && (len(c) > 253 || !dnsSubdomain.MatchString(c)) {
		errs = append(errs, fmt.Errorf("registry storage class %q is not a StorageClass name", c))
	}
	return errors.Join(errs...)
}

func (o Options) data() map[string]any {
	u, _ := url.Parse(o.ControlPlaneURL)
	plain := u != nil && u.Scheme == "http"
	remote := plain && !transport.IsLoopback(u.Hostname())
	// The bundle as a YAML block scalar's lines.
	ca := "    " + strings.ReplaceAll(strings.TrimRight(o.CABundle, "\n"), "\n", "\n    ")
	return map[string]any{
		"URL": o.ControlPlaneURL, "Image": o.Image, "Cluster": o.Cluster,
		"WithToken": !o.WithoutToken, "Token": base64.StdEncoding.EncodeToString([]byte(o.JoinToken)), "RawToken": o.JoinToken,
		"CA": ca, "HasCA": o.CABundle != "",
		"Plain": plain && !remote, "PlainRemote": remote,
		"Namespace": AgentNamespace, "Build": BuildNamespace, "Name": AgentName, "WorkloadRole": WorkloadRole,
		"JoinSecret": JoinSecret, "JoinKey": JoinSecretKey, "CAConfigMap": CAConfigMap, "HealthFile": HealthFile, "PodStateDir": PodStateDir,
		"ManagedBy": ManagedByLabel, "ManagedByValue": ManagedByValue,
		"SAUser":     "system:serviceaccount:" + AgentNamespace + ":" + AgentName,
		"HostBinary": HostBinary, "HostBinaryDir": HostBinaryDir, "HostStateDir": HostStateDir,
		"Version": o.Version, "HostImage": DefaultImage(o.Version),
		"BuildRole": BuildRole, "Registry": RegistryName, "RegistryImage": o.registryImage(), "RegistrySize": o.registrySize(),
		"RegistryStorageClass": o.RegistryStorageClass, "RegistryPort": RegistryPort, "RegistryNodePort": RegistryNodePort,
		"RegistryPush": RegistryPushAddress, "RegistryNode": RegistryNodeAddress,
		"Mesh": MeshNamespace, "MeshName": MeshName, "MeshRole": MeshRole, "MeshKeyDir": MeshKeyDir,
	}
}

// Manifest renders the cluster's install manifest (YAML, several documents).
func Manifest(o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := manifest.Execute(&b, o.data()); err != nil {
		return "", err
	}
	return b.String(), nil
}

// MeshUnit renders the unit of the mesh's node agent on a host
// (/etc/systemd/system/nebulactrl-mesh.service), beside the agent's.
func MeshUnit(o Options) (string, error) {
	if err := o.validate(false); err != nil {
		return "", err
	}
	var u bytes.Buffer
	if err := meshUnitTmpl.Execute(&u, o.data()); err != nil {
		return "", err
	}
	return u.String(), nil
}

// JoinSecretCommand is the kubectl command that creates the join token's
// Secret for a manifest made WithoutToken.
func JoinSecretCommand(token string) string {
	return fmt.Sprintf("kubectl -n %s create secret generic %s --from-literal=%s=%s", AgentNamespace, JoinSecret, JoinSecretKey, token)
}

// SystemdUnit renders the unit of an agent on a host; the join token goes in
// an environment file next to it (mode 0600), never in the unit (and is left
// empty WithoutToken). The unit
// is hardened (systemd-analyze security rates it well below 5): no
// capabilities, a read-only system except the agent's state directory and
// its binary's own directory (so that it can replace itself), no devices,
// kernel tunables, other users' files or foreign system calls.
func SystemdUnit(o Options) (unit, envFile string, err error) {
	// A host runs the binary it was given: no image.
	if err := o.validate(false); err != nil {
		return "", "", err
	}
	var u, e bytes.Buffer
	data := o.data()
	if err := unitTmpl.Execute(&u, data); err != nil {
		return "", "", err
	}
	if err := envTmpl.Execute(&e, data); err != nil {
		return "", "", err
	}
	return u.String(), e.String(), nil
}
