package api

import (
	"time"
)

// CreateEnvironmentRequest creates an environment on a cluster of the organisation.
type CreateEnvironmentRequest struct {
	Name      string `json:"name"`
	Cluster   string `json:"cluster"`
	Protected bool   `json:"protected,omitempty"`
}

// UpdateEnvironmentRequest changes an environment; absent fields stay.
type UpdateEnvironmentRequest struct {
	Cluster   *string `json:"cluster,omitempty"`
	Protected *bool   `json:"protected,omitempty"`
}

// CreateProjectRequest creates a project.
type CreateProjectRequest struct {
	Name string `json:"name"`
}

// ServiceRequest creates or (PATCH: absent fields stay) changes a service.
// Without processes a service gets one "web" process with Port and Replicas.
// ProgressDeadlineSeconds bounds how long a release may take to become ready
// once its pods start (0: the default, 600; at most 86400); a release that
// is not ready by then fails and the one before it runs again.
type ServiceRequest struct {
	Name       string `json:"name,omitempty"`
	Image      string `json:"image,omitempty"`
	GitURL     string `json:"gitUrl,omitempty" input:"max=2048"`
	GitBranch  string `json:"gitBranch,omitempty"`
	Dockerfile string `json:"dockerfile,omitempty" input:"max=1024"`
	Context    string `json:"context,omitempty" input:"max=1024"`
	// GitToken (an HTTPS token, with GitUsername) or GitSSHKey (a deploy
	// key, PEM) reads a private repository: sealed before it is stored,
	// delivered only to the build, never returned. GitCredentialNone
	// removes the one set.
	GitUsername string `json:"gitUsername,omitempty" input:"max=200"`
	GitToken    string `json:"gitToken,omitempty" input:"opaque,max=4096"`
	GitSSHKey   string `json:"gitSshKey,omitempty" input:"opaque,max=16384"`
	// GitKnownHosts pins the forge's SSH host keys (known_hosts lines, as
	// ssh-keyscan prints them) for GitSSHKey; without them the build
	// accepts the host key on first contact.
	GitKnownHosts           string    `json:"gitKnownHosts,omitempty" input:"max=16384"`
	GitCredentialNone       bool      `json:"gitCredentialNone,omitempty"`
	Port                    *int      `json:"port,omitempty"`
	Replicas                *int      `json:"replicas,omitempty"`
	Processes               []Process `json:"processes,omitempty"`
	ProgressDeadlineSeconds *int      `json:"progressDeadlineSeconds,omitempty"`
}

// Project is a project of an organisation.
type Project struct {
	ID        string    `json:"id"`
	OrgID     string    `json:"orgId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// Environment is an environment of a project and the cluster it runs on.
type Environment struct {
	ID          string    `json:"id"`
	ProjectID   string    `json:"projectId"`
	Name        string    `json:"name"`
	ClusterID   string    `json:"clusterId"`
	ClusterName string    `json:"clusterName"`
	Protected   bool      `json:"protected"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Service is a service of a project: where its image comes from and its processes.
type Service struct {
	ID        string        `json:"id"`
	ProjectID string        `json:"projectId"`
	Name      string        `json:"name"`
	Source    ServiceSource `json:"source"`
	Processes []Process     `json:"processes"`
	// ProgressDeadlineSeconds bounds how long a release may take to become
	// ready once its pods start; 0 means the default (600).
	ProgressDeadlineSeconds int       `json:"progressDeadlineSeconds"`
	CreatedAt               time.Time `json:"createdAt"`
	UpdatedAt               time.Time `json:"updatedAt"`
}

// ServiceSource is a service's source as the API shows it: a Git source's
// credential is named by its kind and user name, never returned.
type ServiceSource struct {
	Image      string          `json:"image,omitempty"`
	GitURL     string          `json:"gitUrl,omitempty"`
	GitBranch  string          `json:"gitBranch,omitempty"`
	Dockerfile string          `json:"dockerfile,omitempty"`
	Context    string          `json:"context,omitempty"`
	Credential *CredentialInfo `json:"credential,omitempty"`
}

// CredentialInfo says that a Git source has a read credential, and which.
type CredentialInfo struct {
	Kind     string `json:"kind"`
	Username string `json:"username,omitempty"`
	// KnownHosts are the pinned SSH host keys (public, not a secret).
	KnownHosts string `json:"knownHosts,omitempty"`
}

// Where a variable is set, as Variable.Scope says.
const (
	VariableScopeEnvironment = "environment"
	VariableScopeService     = "service"
)

// Variable is a configuration variable. A secret's value never leaves the
// database: it comes back with Secret set and Value empty.
type Variable struct {
	Name   string `json:"name"`
	Value  string `json:"value,omitempty"`
	Secret bool   `json:"secret"`
	// Scope is VariableScopeEnvironment or VariableScopeService.
	Scope     string    `json:"scope"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Domain is a host name routed to a service in an environment.
type Domain struct {
	Host          string    `json:"host"`
	ServiceID     string    `json:"serviceId"`
	ServiceName   string    `json:"serviceName"`
	EnvironmentID string    `json:"environmentId"`
	CreatedAt     time.Time `json:"createdAt"`
}
