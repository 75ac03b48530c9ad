// Package install renders what installs an agent: the Kubernetes manifest
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
package install

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"text/template"

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

var manifest = template.Must(template.New("manifest").Parse(`# NebulaCtrl agent for cluster {{.Cluster}}. Apply with: kubectl apply -f -
{{- if .WithToken}}
# It holds the cluster's join token: keep it like a password.
{{- else}}
# It holds no join token and can be kept in Git. Before the agents can join,
# create the token's Secret (with a token from nebula cluster token create):
#   kubectl -n {{.Namespace}} create secret generic {{.JoinSecret}} --from-literal={{.JoinKey}}=TOKEN
{{- end}}
# Requires Kubernetes 1.30 or newer (ValidatingAdmissionPolicy) and, for the
# registry's volume, {{if .RegistryStorageClass}}the StorageClass {{.RegistryStorageClass}}{{else}}a default StorageClass (K3s: local-path){{end}}.
apiVersion: v1
kind: Namespace
metadata:
  name: {{.Namespace}}
  labels:
    app.kubernetes.io/part-of: nebulactrl
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/audit: restricted
---
# Builds run here, as Jobs the agent creates. Their builder, rootless
# BuildKit, needs Unconfined seccomp and AppArmor, which the "baseline" and
# "restricted" levels forbid: so this namespace alone enforces
# "privileged", while warnings and the audit log still report every pod
# against "restricted". What the agent's Jobs may ask beyond the builder's
# needs is refused by the policy {{.Name}}-builds below.
apiVersion: v1
kind: Namespace
metadata:
  name: {{.Build}}
  labels:
    app.kubernetes.io/part-of: nebulactrl
    pod-security.kubernetes.io/enforce: privileged
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/audit: restricted
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
---
# Cluster wide: nodes and namespaces to read, namespaces to create and
# (the policy below says which) to change, and one role to bind.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{.Name}}
rules:
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch, create, patch, update]
- apiGroups: [""]
  resources: [nodes]
  verbs: [get, list, watch]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings]
  verbs: [create]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
  resourceNames: [{{.WorkloadRole}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{.Name}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {{.Name}}}
subjects:
- {kind: ServiceAccount, name: {{.Name}}, namespace: {{.Namespace}}}
---
# What the agent does in an environment's namespace: exactly the objects it
# reconciles, and reading what it reports. Bound by the agent in each
# namespace it creates, never cluster wide.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{.WorkloadRole}}
rules:
- apiGroups: [""]
  resources: [secrets, services]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: [get, list, watch, create, patch, update, delete]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods, pods/log, events]
  verbs: [get, list, watch]
---
# The agent changes only the namespaces NebulaCtrl manages, and binds its
# workload role only there and only to itself: without this, the right to
# bind would reach kube-system.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{.Name}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["*"]
      resources: [namespaces]
      operations: [CREATE, UPDATE, DELETE]
    - apiGroups: [rbac.authorization.k8s.io]
      apiVersions: ["*"]
      resources: [rolebindings]
      operations: [CREATE, UPDATE, DELETE]
  matchConditions:
  - name: the-agent
    expression: "request.userInfo.username == '{{.SAUser}}'"
  variables:
  - name: namespaces
    expression: "request.resource.resource == 'namespaces'"
  validations:
  - expression: >-
      !variables.namespaces || request.operation == 'DELETE' ||
      (has(object.metadata.labels) && '{{.ManagedBy}}' in object.metadata.labels &&
      object.metadata.labels['{{.ManagedBy}}'] == '{{.ManagedByValue}}')
    message: "the agent's namespaces carry {{.ManagedBy}}={{.ManagedByValue}}"
  - expression: >-
      !variables.namespaces || request.operation == 'CREATE' ||
      (has(oldObject.metadata.labels) && '{{.ManagedBy}}' in oldObject.metadata.labels &&
      oldObject.metadata.labels['{{.ManagedBy}}'] == '{{.ManagedByValue}}')
    message: "the agent changes only namespaces labelled {{.ManagedBy}}={{.ManagedByValue}}"
  - expression: >-
      variables.namespaces ||
      (has(namespaceObject.metadata.labels) && '{{.ManagedBy}}' in namespaceObject.metadata.labels &&
      namespaceObject.metadata.labels['{{.ManagedBy}}'] == '{{.ManagedByValue}}')
    message: "the agent binds roles only in namespaces labelled {{.ManagedBy}}={{.ManagedByValue}}"
  - expression: >-
      variables.namespaces || request.operation == 'DELETE' ||
      (object.roleRef.kind == 'ClusterRole' && object.roleRef.name == '{{.WorkloadRole}}' &&
      has(object.subjects) && object.subjects.all(s, s.kind == 'ServiceAccount' &&
      s.name == '{{.Name}}' && has(s.namespace) && s.namespace == '{{.Namespace}}'))
    message: "the agent binds only {{.WorkloadRole}}, and only to itself"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{.Name}}
spec:
  policyName: {{.Name}}
  validationActions: [Deny]
---
# The agent's build Jobs get what the builder needs (Unconfined seccomp and
# AppArmor, which is why {{.Build}} is "privileged") and nothing else that
# level would allow: no privileged container, no added capability, no host
# network, PID or IPC namespace, no host path, no host port. So the right to
# create Jobs there is no way to a node's root.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{.Name}}-builds
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [batch]
      apiVersions: ["*"]
      resources: [jobs]
      operations: [CREATE, UPDATE]
  matchConditions:
  - name: the-agent
    expression: "request.userInfo.username == '{{.SAUser}}'"
  variables:
  - name: pod
    expression: "object.spec.template.spec"
  - name: containers
    expression: "variables.pod.containers + (has(variables.pod.initContainers) ? variables.pod.initContainers : [])"
  validations:
  - expression: >-
      variables.containers.all(c, !has(c.securityContext) ||
      ((!has(c.securityContext.privileged) || !c.securityContext.privileged) &&
      (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add) ||
      size(c.securityContext.capabilities.add) == 0)))
    message: "the agent's build containers are not privileged and add no capability"
  - expression: >-
      !(has(variables.pod.hostNetwork) && variables.pod.hostNetwork) &&
      !(has(variables.pod.hostPID) && variables.pod.hostPID) &&
      !(has(variables.pod.hostIPC) && variables.pod.hostIPC)
    message: "the agent's build pods share no host namespace"
  - expression: "!has(variables.pod.volumes) || variables.pod.volumes.all(v, !has(v.hostPath))"
    message: "the agent's build pods mount no host path"
  - expression: "variables.containers.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))"
    message: "the agent's build containers take no host port"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{.Name}}-builds
spec:
  policyName: {{.Name}}-builds
  validationActions: [Deny]
---
# In its own namespace: its leader election Lease and its credentials.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
rules:
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{.Name}}}
subjects:
- {kind: ServiceAccount, name: {{.Name}}, namespace: {{.Namespace}}}
---
# In the build namespace, and nowhere else: its build Jobs, their pods (to
# follow them), the build container's log, events, and the Secrets a build
# reads (its Git credentials).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{.BuildRole}}
  namespace: {{.Build}}
rules:
- apiGroups: [batch]
  resources: [jobs]
  verbs: [create, delete, get, list, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
- apiGroups: [""]
  resources: [secrets]
  verbs: [create, delete, get, list]
- apiGroups: [""]
  resources: [events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{.BuildRole}}
  namespace: {{.Build}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{.BuildRole}}}
subjects:
- {kind: ServiceAccount, name: {{.Name}}, namespace: {{.Namespace}}}
{{- if .WithToken}}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{.JoinSecret}}
  namespace: {{.Namespace}}
type: Opaque
data:
  {{.JoinKey}}: {{.Token}}
{{- end}}
{{- if .HasCA}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{.CAConfigMap}}
  namespace: {{.Namespace}}
data:
  ca.pem: |
{{.CA -}}
{{- end}}
---
# Two replicas with stable names: each is a server of the cluster. One holds
# the Lease and reconciles; the other stays connected and stands by. The agent
# binary runs from a pod volume seeded from the image, so a self-upgrade
# survives a container restart while a recreated pod starts from the image
# (and is upgraded again at its next connect); its upgrade.json is kept on
# the same volume (--state-dir), with the same lifetime.
# The join token is read only until the replica has its own credential: the
# Secret may be deleted after both joined.
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
  labels: {app.kubernetes.io/name: {{.Name}}}
spec:
  serviceName: {{.Name}}
  replicas: 2
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app.kubernetes.io/name: {{.Name}}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: {{.Name}}}
    spec:
      serviceAccountName: {{.Name}}
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels: {app.kubernetes.io/name: {{.Name}}}
      initContainers:
      - name: seed-binary
        image: {{.Image}}
        command: [/nebulactrl-agent, seed, /agent-bin/nebulactrl-agent]
        resources:
          requests: {cpu: 10m, memory: 16Mi}
          limits: {cpu: 500m, memory: 64Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
        volumeMounts:
        - {name: agent-bin, mountPath: /agent-bin}
      containers:
      - name: agent
        image: {{.Image}}
        command: [/agent-bin/nebulactrl-agent]
        args:
        - --url={{.URL}}
        - --join-token-file=/etc/nebulactrl/join/{{.JoinKey}}
        - --credential-secret=$(POD_NAME)-credential
        - --lease-name={{.Name}}
        - --workload-role={{.WorkloadRole}}
        - --health-file={{.HealthFile}}
        - --state-dir={{.PodStateDir}}
        - --build-namespace={{.Build}}
        - --registry={{.RegistryPush}}
        - --node-registry={{.RegistryNode}}
{{- if .HasCA}}
        - --ca-bundle=/etc/nebulactrl/ca/ca.pem
{{- end}}
{{- if .Plain}}
        - --insecure-plain-http
{{- end}}
{{- if .PlainRemote}}
        - --insecure-plain-http-remote
{{- end}}
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - name: SERVICE_ACCOUNT
          valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {cpu: "1", memory: 256Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
        # Alive: the agent keeps its health file fresh. Ready: it is
        # connected to the control plane. No inbound port either way.
        livenessProbe:
          exec: {command: [/agent-bin/nebulactrl-agent, health, --file={{.HealthFile}}]}
          initialDelaySeconds: 10
          periodSeconds: 20
          timeoutSeconds: 5
          failureThreshold: 3
        readinessProbe:
          exec: {command: [/agent-bin/nebulactrl-agent, health, --file={{.HealthFile}}, --connected]}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 3
        volumeMounts:
        - {name: agent-bin, mountPath: /agent-bin}
        - {name: join, mountPath: /etc/nebulactrl/join, readOnly: true}
        - {name: run, mountPath: /run/nebulactrl}
        - {name: tmp, mountPath: /tmp}
{{- if .HasCA}}
        - {name: ca, mountPath: /etc/nebulactrl/ca, readOnly: true}
{{- end}}
      volumes:
      - name: agent-bin
        emptyDir: {sizeLimit: 256Mi}
      - name: run
        emptyDir: {medium: Memory, sizeLimit: 1Mi}
      - name: tmp
        emptyDir: {sizeLimit: 64Mi}
      - name: join
        secret: {secretName: {{.JoinSecret}}, optional: true, defaultMode: 0440}
{{- if .HasCA}}
      - name: ca
        configMap: {name: {{.CAConfigMap}}}
{{- end}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
spec:
  minAvailable: 1
  selector:
    matchLabels: {app.kubernetes.io/name: {{.Name}}}
---
# The cluster's registry. Builds push to the Service's name in the cluster,
# over plain HTTP:
#   {{.RegistryPush}}
# Every node's containerd pulls the built images by digest from the Service's
# NodePort on localhost, {{.RegistryNode}}: containerd reaches a registry on
# localhost over plain HTTP with no configuration, and kube-proxy forwards a
# NodePort on localhost in its iptables mode (K3s's default; not in nftables
# or IPVS mode). The NodePort answers on the nodes' other addresses too,
# without authentication: keep port {{.RegistryNodePort}} closed to anything but the
# nodes themselves.
# No NetworkPolicy narrows who may reach it in the cluster: the nodes' pulls
# arrive through the NodePort from node addresses (rewritten by kube-proxy)
# that a manifest cannot name, and a policy would block them.
# On K3s the nodes can pull from a TLS registry instead, configured on every
# node in /etc/rancher/k3s/registries.yaml (mirrors: the registry's host;
# configs: its CA, or credentials), with the agent's --registry and
# --node-registry naming it; this Deployment is then not needed.
#
# Its storage: a PersistentVolumeClaim, which the cluster's default
# StorageClass provisions (K3s: local-path, a directory of mode 0777 on the
# node the registry first runs on, which keeps it there; fsGroup makes other
# volumes writable by its user)
{{- if .RegistryStorageClass}}, here of StorageClass {{.RegistryStorageClass}}{{end}}.
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: {{.Registry}}
  namespace: {{.Namespace}}
  labels: {app.kubernetes.io/name: {{.Registry}}, app.kubernetes.io/part-of: nebulactrl}
spec:
  accessModes: [ReadWriteOnce]
{{- if .RegistryStorageClass}}
  storageClassName: {{.RegistryStorageClass}}
{{- end}}
  resources:
    requests: {storage: {{.RegistrySize}}}
---
# One replica, replaced by stopping it first (Recreate): the volume takes one
# writer. Deleting manifests through the API is on; their blobs are freed by
# the registry's garbage-collect command.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{.Registry}}
  namespace: {{.Namespace}}
  labels: {app.kubernetes.io/name: {{.Registry}}, app.kubernetes.io/part-of: nebulactrl}
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app.kubernetes.io/name: {{.Registry}}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: {{.Registry}}}
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      containers:
      - name: registry
        image: {{.RegistryImage}}
        ports:
        - {name: registry, containerPort: {{.RegistryPort}}}
        env:
        - {name: REGISTRY_HTTP_ADDR, value: ":{{.RegistryPort}}"}
        - {name: REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY, value: /var/lib/registry}
        - {name: REGISTRY_STORAGE_DELETE_ENABLED, value: "true"}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {cpu: "1", memory: 512Mi}
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL]}
          seccompProfile: {type: RuntimeDefault}
        # /v2/ answers 200 once the registry serves, 503 when its storage
        # fails its health check.
        readinessProbe:
          httpGet: {path: /v2/, port: registry}
          periodSeconds: 10
          timeoutSeconds: 5
          failureThreshold: 3
        livenessProbe:
          httpGet: {path: /v2/, port: registry}
          initialDelaySeconds: 10
          periodSeconds: 20
          timeoutSeconds: 5
          failureThreshold: 3
        volumeMounts:
        - {name: data, mountPath: /var/lib/registry}
        - {name: tmp, mountPath: /tmp}
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: {{.Registry}}}
      - name: tmp
        emptyDir: {sizeLimit: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: {{.Registry}}
  namespace: {{.Namespace}}
  labels: {app.kubernetes.io/name: {{.Registry}}, app.kubernetes.io/part-of: nebulactrl}
spec:
  type: NodePort
  selector: {app.kubernetes.io/name: {{.Registry}}}
  ports:
  - {name: registry, port: {{.RegistryPort}}, targetPort: registry, nodePort: {{.RegistryNodePort}}}
`))

var unitTmpl = template.Must(template.New("unit").Parse(`# /etc/systemd/system/nebulactrl-agent.service
{{- if .Version}}
# NebulaCtrl agent {{.Version}}, the version of the control plane at {{.URL}}
{{- if .HostImage}}
# (the binary is /nebulactrl-agent in the image {{.HostImage}})
{{- end}}; it upgrades itself when the control plane does.
{{- end}}
# The agent binary goes in {{.HostBinaryDir}}/, a directory of its own: the
# agent may write there (to replace itself) and in {{.HostStateDir}},
# and nowhere else.
[Unit]
Description=NebulaCtrl agent
Wants=network-online.target
After=network-online.target
# Never give up restarting: a new binary that crash-loops is rolled back by
# the agent itself at its fourth start, which systemd's start limit must not
# prevent.
StartLimitIntervalSec=0

[Service]
EnvironmentFile=/etc/nebulactrl/agent.env
ExecStart={{.HostBinary}} --url {{.URL}} --state-dir {{.HostStateDir}} --kubeconfig /etc/rancher/k3s/k3s.yaml{{if .HasCA}} --ca-bundle /etc/nebulactrl/ca.pem{{end}}{{if .Plain}} --insecure-plain-http{{end}}{{if .PlainRemote}} --insecure-plain-http-remote{{end}}
Restart=always
RestartSec=2
UMask=0077
StateDirectory=nebulactrl-agent
StateDirectoryMode=0700
ProtectSystem=strict
ReadWritePaths={{.HostBinaryDir}}
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
DevicePolicy=closed
PrivateMounts=yes
PrivateIPC=yes
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
ProtectProc=invisible
ProcSubset=pid
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
RemoveIPC=yes
KeyringMode=private
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM

[Install]
WantedBy=multi-user.target
`))

var envTmpl = template.Must(template.New("env").Parse(`# /etc/nebulactrl/agent.env (mode 0600): read once, on the first start
{{- if .WithToken}}
NEBULACTRL_JOIN_TOKEN={{.RawToken}}
{{- else}}
NEBULACTRL_JOIN_TOKEN=
{{- end}}
`))
