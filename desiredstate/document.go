// Package desiredstate owns the desired-state document: types, canonical
// encoding, hash.
//
// The control plane compiles one Document per environment and records it with
// its Hash; the agent in the cluster decodes it and converges the cluster on
// it. A change that compiles to the same hash creates no new revision, so the
// encoding is canonical: the same document always encodes to the same bytes,
// whatever order its slices were built in.
//
// The package uses only the standard library because both the control plane
// and the agent import it.
package desiredstate

// SchemaVersion is the version of the document format this package writes and
// the only one Decode accepts. Bump it on any change that an older agent
// would misread.
const SchemaVersion = 1

// Document is the desired state of one environment.
type Document struct {
	SchemaVersion int         `json:"schemaVersion"`
	Environment   Environment `json:"environment"`
	// Services is sorted by Name and never nil, so an empty environment
	// encodes as [] and not null.
	Services []Service `json:"services"`
}

// Environment says which environment a document is for and where it lives.
type Environment struct {
	OrgID     string `json:"orgId"`
	Org       string `json:"org"`
	ProjectID string `json:"projectId"`
	Project   string `json:"project"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	ClusterID string `json:"clusterId"`
	// Namespace is the Kubernetes namespace of the environment; see Namespace.
	Namespace string `json:"namespace"`
}

// Service is one service of the environment.
//
// A held service could not be compiled (for example a secret it needs cannot
// be unsealed). It carries only ID, Name, Held and HeldReason: the agent
// leaves whatever currently runs for it alone rather than guessing.
type Service struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Held       bool   `json:"held,omitempty"`
	HeldReason string `json:"heldReason,omitempty"`
	// Release is nil when held.
	Release *Release `json:"release,omitempty"`
	// Processes is sorted by name; nil when held.
	Processes []Process `json:"processes,omitempty"`
	// Variables is sorted by name; nil when held.
	Variables []Variable `json:"variables,omitempty"`
	// Domains is sorted; nil when held.
	Domains []string `json:"domains,omitempty"`
}

// Release is the release of a service that should run.
type Release struct {
	ID     string `json:"id"`
	Number int    `json:"number"`
	// Image is an image reference pinned by digest, so the same document
	// always means the same bytes running.
	Image string `json:"image"`
	// DeploymentID is the deployment that asked for this release to run: the
	// agent reports the rollout's stages under it. Empty in documents that
	// predate rollout stages.
	DeploymentID string `json:"deploymentId,omitempty"`
}

// Process is one kind of process of a service: web, worker, ...
type Process struct {
	Name    string   `json:"name"`
	Command []string `json:"command,omitempty"`
	Port    int      `json:"port,omitempty"`
	// Replicas is always encoded: 0 is a meaningful "scaled to zero".
	Replicas    int          `json:"replicas"`
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// HealthCheck is how a process is probed before it takes traffic.
type HealthCheck struct {
	// Path is an HTTP path probed on Port; empty means a TCP check.
	Path                string `json:"path,omitempty"`
	Port                int    `json:"port"`
	InitialDelaySeconds int    `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int    `json:"periodSeconds,omitempty"`
}

// Variable is one environment variable of a service, with every reference
// already resolved. Exactly one of Value and Secret is meaningful: a secret
// travels sealed inside the stored document and is opened only where it is
// delivered, so the document and its hash never contain a plain secret.
type Variable struct {
	Name   string  `json:"name"`
	Value  string  `json:"value,omitempty"`
	Secret *Sealed `json:"secret,omitempty"`
}

// Sealed is a sealed secret value and the id of the data key that opens it.
type Sealed struct {
	DataKeyID  string `json:"dataKeyId"`
	Ciphertext []byte `json:"ciphertext"`
}
