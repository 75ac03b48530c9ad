package domain

import (
	"encoding/json"
	"slices"
	"time"
)

// Event is a fact in the history of an aggregate. Its type is an explicit,
// stable string, never derived from the Go type name; see codec.go.
type Event interface {
	EventType() string
}

// Instance stream.

// InstanceSettingsUpdated records the instance settings after a change.
type InstanceSettingsUpdated struct {
	AgentAutoUpgrade bool `json:"agentAutoUpgrade"`
}

// User streams.

// UserRegistered records a new user.
type UserRegistered struct {
	UserID        string `json:"userId"`
	Email         string `json:"email"`
	Name          string `json:"name"`
	PasswordHash  string `json:"passwordHash"`
	InstanceAdmin bool   `json:"instanceAdmin"`
}

// UserPasswordChanged records a new password hash.
type UserPasswordChanged struct {
	UserID       string `json:"userId"`
	PasswordHash string `json:"passwordHash"`
}

// UserInstanceAdminChanged grants or revokes the instance administrator role.
type UserInstanceAdminChanged struct {
	UserID        string `json:"userId"`
	InstanceAdmin bool   `json:"instanceAdmin"`
}

// TokenCreated records an API token: only its hash is kept.
type TokenCreated struct {
	TokenID   string     `json:"tokenId"`
	UserID    string     `json:"userId"`
	OrgID     string     `json:"orgId,omitempty"`
	Name      string     `json:"name"`
	Scopes    []Scope    `json:"scopes"`
	TokenHash string     `json:"tokenHash"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
}

// TokenRevoked ends an API token.
type TokenRevoked struct {
	TokenID string `json:"tokenId"`
	UserID  string `json:"userId"`
}

// Organisation streams.

// OrganisationCreated records a new organisation.
type OrganisationCreated struct {
	OrgID string `json:"orgId"`
	Name  string `json:"name"`
}

// MemberAdded records a user joining an organisation.
type MemberAdded struct {
	OrgID  string `json:"orgId"`
	UserID string `json:"userId"`
	Role   Role   `json:"role"`
}

// MemberRoleChanged records a member's new role.
type MemberRoleChanged struct {
	OrgID  string `json:"orgId"`
	UserID string `json:"userId"`
	Role   Role   `json:"role"`
}

// MemberRemoved records a user leaving an organisation.
type MemberRemoved struct {
	OrgID  string `json:"orgId"`
	UserID string `json:"userId"`
}

// Cluster streams.

// ClusterCreated records a new cluster of an organisation.
type ClusterCreated struct {
	ClusterID string `json:"clusterId"`
	OrgID     string `json:"orgId"`
	Name      string `json:"name"`
}

// ClusterDeleted records the end of a cluster.
type ClusterDeleted struct {
	ClusterID string `json:"clusterId"`
}

// JoinTokenIssued records a join token for a cluster: only its hash is kept.
type JoinTokenIssued struct {
	ClusterID string    `json:"clusterId"`
	TokenID   string    `json:"tokenId"`
	TokenHash string    `json:"tokenHash"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// JoinTokenRevoked ends a join token.
type JoinTokenRevoked struct {
	ClusterID string `json:"clusterId"`
	TokenID   string `json:"tokenId"`
}

// ServerRegistered records an agent installation that exchanged a join token
// for a credential of its own.
type ServerRegistered struct {
	ClusterID      string `json:"clusterId"`
	ServerID       string `json:"serverId"`
	Name           string `json:"name"`
	CredentialHash string `json:"credentialHash"`
	JoinTokenID    string `json:"joinTokenId"`
}

// ServerCredentialRevoked ends a server's credential.
type ServerCredentialRevoked struct {
	ClusterID string `json:"clusterId"`
	ServerID  string `json:"serverId"`
}

// ServerConnected records an agent connecting to the control plane.
type ServerConnected struct {
	ClusterID string `json:"clusterId"`
	ServerID  string `json:"serverId"`
	Version   string `json:"version"`
	Arch      string `json:"arch,omitempty"`
	// Upgradable is absent for an agent that predates self-upgrades.
	Upgradable    *bool  `json:"upgradable,omitempty"`
	CannotUpgrade string `json:"cannotUpgrade,omitempty"`
	// Session names the connection (see transport.Peer).
	Session string `json:"session,omitempty"`
}

// ServerDisconnected records an agent's connection ending.
type ServerDisconnected struct {
	ClusterID string `json:"clusterId"`
	ServerID  string `json:"serverId"`
	Reason    string `json:"reason,omitempty"`
}

// Project streams: a project, its environments and services, their
// configuration, releases, deployments and change sets.

// ProjectCreated records a new project.
type ProjectCreated struct {
	ProjectID string `json:"projectId"`
	OrgID     string `json:"orgId"`
	Name      string `json:"name"`
}

// ProjectDeleted records the end of a project.
type ProjectDeleted struct {
	ProjectID string `json:"projectId"`
}

// EnvironmentCreated records a new environment of a project.
type EnvironmentCreated struct {
	EnvironmentID string `json:"environmentId"`
	Name          string `json:"name"`
	ClusterID     string `json:"clusterId"`
	Protected     bool   `json:"protected"`
}

// EnvironmentUpdated records an environment's settings after a change.
type EnvironmentUpdated struct {
	EnvironmentID string `json:"environmentId"`
	ClusterID     string `json:"clusterId"`
	Protected     bool   `json:"protected"`
}

// EnvironmentDeleted records the end of an environment.
type EnvironmentDeleted struct {
	EnvironmentID string `json:"environmentId"`
}

// ServiceCreated records a new service of a project.
type ServiceCreated struct {
	ServiceID               string    `json:"serviceId"`
	Name                    string    `json:"name"`
	Source                  Source    `json:"source"`
	Processes               []Process `json:"processes"`
	ProgressDeadlineSeconds int       `json:"progressDeadlineSeconds,omitempty"`
}

// ServiceUpdated records a service's definition after a change.
type ServiceUpdated struct {
	ServiceID               string    `json:"serviceId"`
	Source                  Source    `json:"source"`
	Processes               []Process `json:"processes"`
	ProgressDeadlineSeconds int       `json:"progressDeadlineSeconds,omitempty"`
}

// ServiceDeleted records the end of a service.
type ServiceDeleted struct {
	ServiceID string `json:"serviceId"`
}

// VariablesSet records variables set in an environment, for one service or
// (ServiceID "") for every service there.
type VariablesSet struct {
	EnvironmentID string     `json:"environmentId"`
	ServiceID     string     `json:"serviceId,omitempty"`
	Variables     []Variable `json:"variables"`
}

// VariablesUnset records variables removed.
type VariablesUnset struct {
	EnvironmentID string   `json:"environmentId"`
	ServiceID     string   `json:"serviceId,omitempty"`
	Names         []string `json:"names"`
}

// DomainAdded records a host name routed to a service in an environment.
type DomainAdded struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Host          string `json:"host"`
}

// DomainRemoved records a host name no longer routed.
type DomainRemoved struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Host          string `json:"host"`
}

// ServiceScaled records a process's replica count in one environment.
type ServiceScaled struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Process       string `json:"process"`
	Replicas      int    `json:"replicas"`
}

// ReleaseCreated records an immutable release: an image pinned by digest and
// the configuration frozen at that moment. The variables are recorded as a
// change against the release before (Base), so that an update of one
// variable stores that variable, not every variable of the service again.
//
// Schema 1 had no Base and no Removed: its Variables is the whole set, which
// is also what Base 0 means in schema 2.
type ReleaseCreated struct {
	ReleaseID     string    `json:"releaseId"`
	EnvironmentID string    `json:"environmentId"`
	ServiceID     string    `json:"serviceId"`
	Number        int       `json:"number"`
	Image         string    `json:"image"`
	Processes     []Process `json:"processes"`
	// Base is the number of the release of the same service and environment
	// that Variables and Removed are relative to (Number-1); 0 means that
	// Variables is the release's whole set.
	Base int `json:"base,omitempty"`
	// Variables are the release's variables that are not in release Base
	// with the same value (with Base 0: all of them), sorted by name.
	Variables []Variable `json:"variables"`
	// Removed names the variables of release Base that this release does not
	// have, sorted.
	Removed []string `json:"removed,omitempty"`
	// Reason says why the release exists: "deploy", "variables", "scale".
	Reason string `json:"reason"`
}

// ReleaseVariables returns the whole variable set of release e, given the set
// of release e.Base (ignored when e.Base is 0), sorted by name.
func ReleaseVariables(base []Variable, e ReleaseCreated) []Variable {
	if e.Base == 0 {
		return slices.Clone(e.Variables)
	}
	byName := make(map[string]Variable, len(base)+len(e.Variables))
	for _, v := range base {
		byName[v.Name] = v
	}
	for _, n := range e.Removed {
		delete(byName, n)
	}
	for _, v := range e.Variables {
		byName[v.Name] = v
	}
	out := make([]Variable, 0, len(byName))
	for _, n := range sortedKeys(byName) {
		out = append(out, byName[n])
	}
	return out
}

// DeploymentRequested records that a release is to run in its environment.
type DeploymentRequested struct {
	DeploymentID  string `json:"deploymentId"`
	ReleaseID     string `json:"releaseId"`
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	// Rollback marks a deployment of an earlier release.
	Rollback bool `json:"rollback,omitempty"`
	// Image is the release's image.
	Image string `json:"image,omitempty"`
	// Supersedes is the deployment of the same service and environment that
	// this one replaces (it ends superseded unless it is over already).
	Supersedes string `json:"supersedes,omitempty"`
}

// DeploymentsPaused records that automatic deploys of a service in an
// environment stop (after a rollback) until someone resumes them.
type DeploymentsPaused struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Reason        string `json:"reason"`
}

// DeploymentsResumed records that automatic deploys happen again.
type DeploymentsResumed struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
}

// Deployment streams: one deployment's lifecycle.

// DeploymentDelivering opens a deployment's stream: the desired state that
// carries it was compiled and is on its way to the cluster.
type DeploymentDelivering struct {
	DeploymentID            string    `json:"deploymentId"`
	ProjectID               string    `json:"projectId,omitempty"`
	EnvironmentID           string    `json:"environmentId,omitempty"`
	ServiceID               string    `json:"serviceId,omitempty"`
	ReleaseID               string    `json:"releaseId,omitempty"`
	ClusterID               string    `json:"clusterId,omitempty"`
	Revision                int       `json:"revision,omitempty"`
	ProgressDeadlineSeconds int       `json:"progressDeadlineSeconds,omitempty"`
	At                      time.Time `json:"at"`
}

// DeploymentStageReached records a rollout stage the cluster's agent reported,
// with the new release's pods ready and desired.
type DeploymentStageReached struct {
	DeploymentID string           `json:"deploymentId"`
	Stage        DeploymentStatus `json:"stage"`
	Ready        int              `json:"ready"`
	Desired      int              `json:"desired"`
	Detail       string           `json:"detail,omitempty"`
	At           time.Time        `json:"at"`
}

// DeploymentSuperseded records that a newer deployment replaced this one
// before it finished.
type DeploymentSuperseded struct {
	DeploymentID string `json:"deploymentId"`
	By           string `json:"by"`
}

// DeploymentStalled flags a deployment whose stages made no progress within
// the stall timeout.
type DeploymentStalled struct {
	DeploymentID string           `json:"deploymentId"`
	Since        time.Time        `json:"since"`
	Stage        DeploymentStatus `json:"stage"`
}

// DeploymentStallCleared records that a stalled deployment moved again.
type DeploymentStallCleared struct {
	DeploymentID string `json:"deploymentId"`
}

// DeploymentSucceeded records that the release runs.
type DeploymentSucceeded struct {
	DeploymentID string `json:"deploymentId"`
}

// DeploymentFailed records that the release could not be made to run.
type DeploymentFailed struct {
	DeploymentID string `json:"deploymentId"`
	Reason       string `json:"reason"`
}

// ChangeSetOpened records changes to a protected environment that wait for
// someone else's approval.
//
// Schema 1 held the commands themselves as Changes; schema 2 holds a
// versioned payload of each change's kind (see change_codec.go). Both read
// as the same ChangeList.
type ChangeSetOpened struct {
	ChangeSetID   string     `json:"changeSetId"`
	EnvironmentID string     `json:"environmentId"`
	Description   string     `json:"description"`
	Changes       ChangeList `json:"changes"`
	// OpenedBy is the person (user id) who asked for the changes.
	OpenedBy string `json:"openedBy"`
}

// ChangeSetChanged records a change joining an open change set: its version
// grows, so an approval given for the version before is refused. Its
// schemas are those of ChangeSetOpened.
type ChangeSetChanged struct {
	ChangeSetID string `json:"changeSetId"`
	Version     int    `json:"version"`
	// Description and Changes are the whole change set after the change.
	Description string     `json:"description"`
	Changes     ChangeList `json:"changes"`
}

// ChangeSetExpired records that an open change set was not decided in time.
type ChangeSetExpired struct {
	ChangeSetID string `json:"changeSetId"`
}

// ChangeSetApproved records the approval; the changes' own events follow it.
type ChangeSetApproved struct {
	ChangeSetID string `json:"changeSetId"`
	ApprovedBy  string `json:"approvedBy"`
	Version     int    `json:"version,omitempty"`
}

// ChangeSetRejected records a rejection; nothing of the change set happens.
type ChangeSetRejected struct {
	ChangeSetID string `json:"changeSetId"`
	RejectedBy  string `json:"rejectedBy"`
	Reason      string `json:"reason,omitempty"`
}

// Revision streams.

// RevisionCompiled records a desired-state revision of an environment: once
// compiled, agents may already have applied it, so it is a fact that a replay
// reproduces exactly, whatever a newer compiler would make.
//
// Schema 1 carried the whole document (Document). Schema 2 carries what
// changed against revision Base (Number-1; 0 for the first revision, against
// the empty document): the document is cut into objects (the environment,
// each service without its variables, each variable of each service; see
// projections.SplitDocument), and Set holds the objects that are new or
// changed, Removed the keys of those that are gone. Hash is always the hash of
// the whole canonical document, as agents receive it.
type RevisionCompiled struct {
	EnvironmentID string           `json:"environmentId"`
	ProjectID     string           `json:"projectId"`
	Number        int              `json:"number"`
	Hash          string           `json:"hash"`
	Document      json.RawMessage  `json:"document,omitempty"`
	Base          int              `json:"base,omitempty"`
	Set           []RevisionObject `json:"set,omitempty"`
	Removed       []string         `json:"removed,omitempty"`
}

// Whole reports whether the event carries the whole document (schema 1).
func (e RevisionCompiled) Whole() bool { return e.Document != nil }

// RevisionObject is one object of a desired-state document: its key and its
// JSON value.
type RevisionObject struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// EventType implementations: the stable names.

func (InstanceSettingsUpdated) EventType() string  { return "instance.settings.updated" }
func (UserRegistered) EventType() string           { return "user.registered" }
func (UserPasswordChanged) EventType() string      { return "user.password.changed" }
func (UserInstanceAdminChanged) EventType() string { return "user.instance_admin.changed" }
func (TokenCreated) EventType() string             { return "token.created" }
func (TokenRevoked) EventType() string             { return "token.revoked" }
func (OrganisationCreated) EventType() string      { return "organisation.created" }
func (MemberAdded) EventType() string              { return "member.added" }
func (MemberRoleChanged) EventType() string        { return "member.role.changed" }
func (MemberRemoved) EventType() string            { return "member.removed" }
func (ClusterCreated) EventType() string           { return "cluster.created" }
func (ClusterDeleted) EventType() string           { return "cluster.deleted" }
func (JoinTokenIssued) EventType() string          { return "cluster.join_token.issued" }
func (JoinTokenRevoked) EventType() string         { return "cluster.join_token.revoked" }
func (ServerRegistered) EventType() string         { return "server.registered" }
func (ServerCredentialRevoked) EventType() string  { return "server.credential.revoked" }
func (ServerConnected) EventType() string          { return "server.connected" }
func (ServerDisconnected) EventType() string       { return "server.disconnected" }
func (ProjectCreated) EventType() string           { return "project.created" }
func (ProjectDeleted) EventType() string           { return "project.deleted" }
func (EnvironmentCreated) EventType() string       { return "environment.created" }
func (EnvironmentUpdated) EventType() string       { return "environment.updated" }
func (EnvironmentDeleted) EventType() string       { return "environment.deleted" }
func (ServiceCreated) EventType() string           { return "service.created" }
func (ServiceUpdated) EventType() string           { return "service.updated" }
func (ServiceDeleted) EventType() string           { return "service.deleted" }
func (VariablesSet) EventType() string             { return "variables.set" }
func (VariablesUnset) EventType() string           { return "variables.unset" }
func (DomainAdded) EventType() string              { return "domain.added" }
func (DomainRemoved) EventType() string            { return "domain.removed" }
func (ServiceScaled) EventType() string            { return "service.scaled" }
func (ReleaseCreated) EventType() string           { return "release.created" }
func (DeploymentRequested) EventType() string      { return "deployment.requested" }
func (DeploymentDelivering) EventType() string     { return "deployment.delivering" }
func (DeploymentStageReached) EventType() string   { return "deployment.stage" }
func (DeploymentSuperseded) EventType() string     { return "deployment.superseded" }
func (DeploymentStalled) EventType() string        { return "deployment.stalled" }
func (DeploymentStallCleared) EventType() string   { return "deployment.stall_cleared" }
func (DeploymentsPaused) EventType() string        { return "service.deploys.paused" }
func (DeploymentsResumed) EventType() string       { return "service.deploys.resumed" }
func (ChangeSetChanged) EventType() string         { return "changeset.changed" }
func (ChangeSetExpired) EventType() string         { return "changeset.expired" }
func (DeploymentSucceeded) EventType() string      { return "deployment.succeeded" }
func (DeploymentFailed) EventType() string         { return "deployment.failed" }
func (ChangeSetOpened) EventType() string          { return "changeset.opened" }
func (ChangeSetApproved) EventType() string        { return "changeset.approved" }
func (ChangeSetRejected) EventType() string        { return "changeset.rejected" }
func (RevisionCompiled) EventType() string         { return "revision.compiled" }
