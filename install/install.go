// Package install renders what installs an agent: the Kubernetes manifest
// for a cluster (namespaces, least-privilege RBAC, the join token Secret, a
// StatefulSet of two agent replicas with leader election, a
// PodDisruptionBudget) and the systemd unit for an agent on a host.
package install

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/template"
)

// Options say what to install.
type Options struct {
	// ControlPlaneURL is where the agents connect (https://...).
	ControlPlaneURL string
	// JoinToken is the cluster's join token.
	JoinToken string
	// Image is the agent's container image.
	Image string
	// CABundle (PEM) is trusted besides the system roots.
	CABundle string
	// Cluster names the cluster, for the reader of the manifest.
	Cluster string
}

// DefaultImage is the agent image of this version.
func DefaultImage(version string) string {
	if version == "" || version == "dev" {
		version = "latest"
	}
	return "ghcr.io/nebulactrl/nebulactrl-agent:" + version
}

// Validate joins every problem with the options.
func (o Options) Validate() error {
	var errs []error
	u, err := url.Parse(o.ControlPlaneURL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		errs = append(errs, fmt.Errorf("control plane URL %q is not an http(s) URL", o.ControlPlaneURL))
	}
	if o.JoinToken == "" {
		errs = append(errs, errors.New("no join token"))
	}
	if o.Image == "" || strings.ContainsAny(o.Image, " \n\"") {
		errs = append(errs, fmt.Errorf("image %q is not an image reference", o.Image))
	}
	return errors.Join(errs...)
}

// AgentNamespace and BuildNamespace are the namespaces the manifest creates.
const (
	AgentNamespace = "nebula-system"
	BuildNamespace = "nebula-build"
	AgentName      = "nebulactrl-agent"
)

// Manifest renders the cluster's install manifest (YAML, several documents).
func Manifest(o Options) (string, error) {
	if err := o.Validate(); err != nil {
		return "", err
	}
	data := map[string]any{
		"URL": o.ControlPlaneURL, "Image": o.Image, "Cluster": o.Cluster,
		"Token":     base64.StdEncoding.EncodeToString([]byte(o.JoinToken)),
		"CA":        base64.StdEncoding.EncodeToString([]byte(o.CABundle)),
		"HasCA":     o.CABundle != "",
		"Plain":     strings.HasPrefix(o.ControlPlaneURL, "http://"),
		"Namespace": AgentNamespace, "Build": BuildNamespace, "Name": AgentName,
	}
	var b bytes.Buffer
	if err := manifest.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// SystemdUnit renders the unit of an agent on a host; the join token goes in
// an environment file next to it (mode 0600), never in the unit.
func SystemdUnit(o Options) (unit, envFile string, err error) {
	if err := o.Validate(); err != nil {
		return "", "", err
	}
	var u, e bytes.Buffer
	data := map[string]any{"URL": o.ControlPlaneURL, "Token": o.JoinToken, "HasCA": o.CABundle != "", "Plain": strings.HasPrefix(o.ControlPlaneURL, "http://")}
	if err := unitTmpl.Execute(&u, data); err != nil {
		return "", "", err
	}
	if err := envTmpl.Execute(&e, data); err != nil {
		return "", "", err
	}
	return u.String(), e.String(), nil
}

var manifest = template.Must(template.New("manifest").Parse(`# NebulaCtrl agent for cluster {{.Cluster}}. Apply with: kubectl apply -f -
# It holds the cluster's join token: keep it like a password.
apiVersion: v1
kind: Namespace
metadata:
  name: {{.Namespace}}
  labels: {app.kubernetes.io/part-of: nebulactrl}
---
apiVersion: v1
kind: Namespace
metadata:
  name: {{.Build}}
  labels: {app.kubernetes.io/part-of: nebulactrl}
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{.Name}}
  namespace: {{.Namespace}}
---
# What the agent does in the environments' namespaces: exactly the objects it
# reconciles, and reading what it reports.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{.Name}}
rules:
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, list, watch, create, patch, update]
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
  resources: [pods, pods/log, nodes, events]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{.Name}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {{.Name}}}
subjects:
- {kind: ServiceAccount, name: {{.Name}}, namespace: {{.Namespace}}}
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
apiVersion: v1
kind: Secret
metadata:
  name: {{.Name}}-join
  namespace: {{.Namespace}}
type: Opaque
data:
  join-token: {{.Token}}
{{- if .HasCA}}
  ca.pem: {{.CA}}
{{- end}}
---
# Two replicas with stable names: each is a server of the cluster. One holds
# the Lease and reconciles; the other stays connected and stands by. The agent
# binary runs from a pod volume seeded from the image, so a self-upgrade
# survives a container restart while a recreated pod starts from the image.
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
        volumeMounts:
        - {name: agent-bin, mountPath: /agent-bin}
      containers:
      - name: agent
        image: {{.Image}}
        command: [/agent-bin/nebulactrl-agent]
        args:
        - --url={{.URL}}
        - --join-token-file=/etc/nebulactrl/join-token
        - --credential-secret=$(POD_NAME)-credential
        - --lease-name={{.Name}}
{{- if .HasCA}}
        - --ca-bundle=/etc/nebulactrl/ca.pem
{{- end}}
{{- if .Plain}}
        - --insecure-plain-http
{{- end}}
        env:
        - name: POD_NAME
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
          limits: {memory: 256Mi}
        securityContext:
          allowPrivilegeEscalation: false
          runAsNonRoot: true
          runAsUser: 65532
        volumeMounts:
        - {name: agent-bin, mountPath: /agent-bin}
        - {name: join, mountPath: /etc/nebulactrl, readOnly: true}
      volumes:
      - name: agent-bin
        emptyDir: {}
      - name: join
        secret: {secretName: {{.Name}}-join}
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
`))

var unitTmpl = template.Must(template.New("unit").Parse(`# /etc/systemd/system/nebulactrl-agent.service
[Unit]
Description=NebulaCtrl agent
Wants=network-online.target
After=network-online.target

[Service]
EnvironmentFile=/etc/nebulactrl/agent.env
ExecStart=/usr/local/bin/nebulactrl-agent --url {{.URL}} --state-dir /var/lib/nebulactrl-agent --kubeconfig /etc/rancher/k3s/k3s.yaml{{if .HasCA}} --ca-bundle /etc/nebulactrl/ca.pem{{end}}{{if .Plain}} --insecure-plain-http{{end}}
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
`))

var envTmpl = template.Must(template.New("env").Parse(`# /etc/nebulactrl/agent.env (mode 0600): read once, on the first start
NEBULACTRL_JOIN_TOKEN={{.Token}}
`))
