package webhooks

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// The data of each webhook event type (docs/webhooks.md has their JSON
// Schema). Later events of a deployment, build or change set carry only
// their id; what they need of the event that began it is kept by this
// subscription (hookstore subjects), in commit order.

// Names are the names of what a payload's ids name (organisation acme,
// project shop, environment production, service api, cluster eu-1), as they
// were made: a receiver can say what happened without asking the API. The
// subscription keeps them from the events that made each (hookstore
// subjects of kind "name", never pruned); one it has no record of is absent.
type Names struct {
	Organisation string `json:"organisation,omitempty"`
	Project      string `json:"project,omitempty"`
	Environment  string `json:"environment,omitempty"`
	Service      string `json:"service,omitempty"`
	Cluster      string `json:"cluster,omitempty"`
}

// DeploymentData is the data of deployment.succeeded, .failed and
// .superseded.
type DeploymentData struct {
	Names
	OrgID         string `json:"orgId"`
	DeploymentID  string `json:"deploymentId"`
	ProjectID     string `json:"projectId,omitempty"`
	EnvironmentID string `json:"environmentId,omitempty"`
	ServiceID     string `json:"serviceId,omitempty"`
	ReleaseID     string `json:"releaseId,omitempty"`
	ClusterID     string `json:"clusterId,omitempty"`
	Image         string `json:"image,omitempty"`
	Rollback      bool   `json:"rollback"`
	// Reason is why it failed; SupersededBy the deployment that replaced it.
	Reason       string `json:"reason,omitempty"`
	SupersededBy string `json:"supersededBy,omitempty"`
}

// BuildData is the data of build.succeeded and build.failed.
type BuildData struct {
	Names
	OrgID      string `json:"orgId"`
	BuildID    string `json:"buildId"`
	ProjectID  string `json:"projectId,omitempty"`
	ServiceID  string `json:"serviceId,omitempty"`
	ClusterID  string `json:"clusterId,omitempty"`
	Repository string `json:"repository,omitempty"`
	Branch     string `json:"branch,omitempty"`
	Commit     string `json:"commit,omitempty"`
	Image      string `json:"image,omitempty"`
	Digest     string `json:"digest,omitempty"`
	Reason     string `json:"reason,omitempty"`
	ExitCode   int    `json:"exitCode,omitempty"`
}

// ChangeSetData is the data of changeset.opened, .approved, .rejected and
// .expired.
type ChangeSetData struct {
	Names
	OrgID         string `json:"orgId"`
	ChangeSetID   string `json:"changeSetId"`
	ProjectID     string `json:"projectId,omitempty"`
	EnvironmentID string `json:"environmentId,omitempty"`
	Description   string `json:"description,omitempty"`
	OpenedBy      string `json:"openedBy,omitempty"`
	ApprovedBy    string `json:"approvedBy,omitempty"`
	RejectedBy    string `json:"rejectedBy,omitempty"`
	Reason        string `json:"reason,omitempty"`
}

// ClusterData is the data of cluster.connected and cluster.disconnected.
type ClusterData struct {
	Names
	OrgID      string `json:"orgId"`
	ClusterID  string `json:"clusterId"`
	LiveAgents int    `json:"liveAgents"`
}

// AgentData is the data of agent.upgraded and agent.rolled_back.
type AgentData struct {
	Names
	OrgID     string `json:"orgId"`
	ClusterID string `json:"clusterId"`
	ServerID  string `json:"serverId"`
	UpgradeID string `json:"upgradeId,omitempty"`
	From      string `json:"from,omitempty"`
	To        string `json:"to"`
	Reason    string `json:"reason,omitempty"`
}

const (
	subjectDeployment = "deployment"
	subjectBuild      = "build"
	subjectChangeSet  = "changeset"
	// subjectName is an organisation's, project's, environment's,
	// service's or cluster's name, by its id.
	subjectName = hookstore.SubjectName
)

type nameData struct {
	Name string `json:"name"`
}

// payload is the body of a delivery (Standard Webhooks).
type payload struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

// DeliveryID is the webhook-id of an event's delivery to an endpoint: the
// same whenever the event is handled again, and for every attempt.
func DeliveryID(position int64, endpointID string) string {
	return domain.DeriveID("outbound-webhook", strconv.FormatInt(position, 10), endpointID)
}

// project is the id of a project stream's project ("" for other streams).
func project(stream string) string {
	if kind, id := domain.StreamID(stream); kind == "project" {
		return id
	}
	return ""
}

// translate keeps what the event tells later events, applies endpoint
// changes, and returns the webhook event the event is (type "" for none).
//
// What a deployment's, build's or change set's first event tells its later
// ones is kept only for organisations with an endpoint (hooked): the others'
// events cost no write. A deployment begun before its organisation's first
// endpoint reports, when it ends, what its last event says (ids, names).
func (w *Webhooks) translate(ctx context.Context, q eventstore.Querier, e eventstore.Event, d domain.Event, hooked bool) (string, any, error) {
	org := e.OrgID
	keep := func(kind, id string, data any) error {
		if !hooked {
			return nil
		}
		return hookstore.PutSubject(ctx, q, kind, id, data, e.OccurredAt)
	}
	switch ev := d.(type) {
	// The endpoints, as this subscription sees them in commit order.
	case domain.OutHookCreated:
		return "", nil, hookstore.PutEndpoint(ctx, q, hookstore.Endpoint{ID: ev.EndpointID, OrgID: ev.OrgID, URL: ev.URL,
			EventTypes: ev.EventTypes, Secret: ev.Secret, CreatedAt: ev.At})
	case domain.OutHookDeleted:
		return "", nil, hookstore.DeleteEndpoint(ctx, q, ev.EndpointID)
	case domain.OutHookRotated:
		return "", nil, hookstore.RotateEndpoint(ctx, q, ev.EndpointID, ev.Secret, ev.Previous, ev.PreviousUntil)
	case domain.OutHookDisabled:
		return "", nil, hookstore.SetEnabled(ctx, q, ev.EndpointID, false, "the endpoint was disabled: "+ev.Reason)
	case domain.OutHookEnabled:
		return "", nil, hookstore.SetEnabled(ctx, q, ev.EndpointID, true, "")
	case domain.OutHookRedeliveryRequested:
		return "", nil, hookstore.Redeliver(ctx, q, ev.EndpointID, ev.DeliveryID, ev.At)

	// The names payloads carry.
	case domain.OrganisationCreated:
		return "", nil, hookstore.PutSubject(ctx, q, subjectName, ev.OrgID, nameData{ev.Name}, e.OccurredAt)
	case domain.ProjectCreated:
		return "", nil, hookstore.PutSubject(ctx, q, subjectName, ev.ProjectID, nameData{ev.Name}, e.OccurredAt)
	case domain.EnvironmentCreated:
		return "", nil, hookstore.PutSubject(ctx, q, subjectName, ev.EnvironmentID, nameData{ev.Name}, e.OccurredAt)
	case domain.ServiceCreated:
		return "", nil, hookstore.PutSubject(ctx, q, subjectName, ev.ServiceID, nameData{ev.Name}, e.OccurredAt)
	case domain.ClusterCreated:
		return "", nil, hookstore.PutSubject(ctx, q, subjectName, ev.ClusterID, nameData{ev.Name}, e.OccurredAt)

	// The clusters whose leases the link job watches.
	case domain.ServerConnected:
		if org == "" {
			return "", nil, nil
		}
		return "", nil, hookstore.WatchCluster(ctx, q, ev.ClusterID, org)
	case domain.ClusterDeleted:
		return "", nil, hookstore.UnwatchCluster(ctx, q, ev.ClusterID)
	case domain.ClusterLinkChanged:
		t := "cluster.disconnected"
		if ev.Connected {
			t = "cluster.connected"
		}
		return t, ClusterData{OrgID: ev.OrgID, ClusterID: ev.ClusterID, LiveAgents: ev.Agents}, nil

	// Deployments.
	case domain.DeploymentRequested:
		return "", nil, keep(subjectDeployment, ev.DeploymentID, DeploymentData{OrgID: org, DeploymentID: ev.DeploymentID,
			ProjectID: project(e.StreamID), EnvironmentID: ev.EnvironmentID, ServiceID: ev.ServiceID, ReleaseID: ev.ReleaseID,
			Image: ev.Image, Rollback: ev.Rollback})
	case domain.DeploymentDelivering:
		return "", nil, keep(subjectDeployment, ev.DeploymentID, map[string]any{"clusterId": ev.ClusterID})
	case domain.DeploymentSucceeded:
		data, err := w.deployment(ctx, q, org, ev.DeploymentID)
		return "deployment.succeeded", data, err
	case domain.DeploymentFailed:
		data, err := w.deployment(ctx, q, org, ev.DeploymentID)
		data.Reason = ev.Reason
		return "deployment.failed", data, err
	case domain.DeploymentSuperseded:
		data, err := w.deployment(ctx, q, org, ev.DeploymentID)
		data.SupersededBy = ev.By
		return "deployment.superseded", data, err

	// Builds.
	case domain.BuildQueuedEvent:
		return "", nil, keep(subjectBuild, ev.BuildID, BuildData{OrgID: org, BuildID: ev.BuildID, ProjectID: ev.ProjectID,
			ServiceID: ev.ServiceID, ClusterID: ev.ClusterID, Repository: ev.Repository, Branch: ev.Branch, Commit: ev.Commit})
	case domain.BuildCommitResolved:
		return "", nil, keep(subjectBuild, ev.BuildID, map[string]any{"commit": ev.Commit})
	case domain.BuildSucceededEvent:
		data, err := w.build(ctx, q, org, ev.BuildID)
		data.Image, data.Digest = ev.Image, ev.Digest
		if ev.Commit != "" {
			data.Commit = ev.Commit
		}
		return "build.succeeded", data, err
	case domain.BuildFailedEvent:
		data, err := w.build(ctx, q, org, ev.BuildID)
		data.Reason, data.ExitCode = ev.Reason, ev.ExitCode
		return "build.failed", data, err
	case domain.BuildTimedOutEvent:
		data, err := w.build(ctx, q, org, ev.BuildID)
		data.Reason = "timed out after " + (time.Duration(ev.TimeoutSeconds) * time.Second).String()
		return "build.failed", data, err

	// Change sets.
	case domain.ChangeSetOpened:
		data := ChangeSetData{OrgID: org, ChangeSetID: ev.ChangeSetID, ProjectID: project(e.StreamID), EnvironmentID: ev.EnvironmentID,
			Description: ev.Description, OpenedBy: ev.OpenedBy}
		return "changeset.opened", data, keep(subjectChangeSet, ev.ChangeSetID, data)
	case domain.ChangeSetApproved:
		data, err := w.changeSet(ctx, q, org, ev.ChangeSetID)
		data.ApprovedBy = ev.ApprovedBy
		return "changeset.approved", data, err
	case domain.ChangeSetRejected:
		data, err := w.changeSet(ctx, q, org, ev.ChangeSetID)
		data.RejectedBy, data.Reason = ev.RejectedBy, ev.Reason
		return "changeset.rejected", data, err
	case domain.ChangeSetExpired:
		data, err := w.changeSet(ctx, q, org, ev.ChangeSetID)
		return "changeset.expired", data, err

	// Agents.
	case domain.AgentUpgraded:
		return "agent.upgraded", AgentData{OrgID: org, ClusterID: ev.ClusterID, ServerID: ev.ServerID, UpgradeID: ev.UpgradeID, From: ev.From, To: ev.To}, nil
	case domain.AgentUpgradeFailed:
		if ev.State != domain.UpgradeRolledBack {
			return "", nil, nil
		}
		return "agent.rolled_back", AgentData{OrgID: org, ClusterID: ev.ClusterID, ServerID: ev.ServerID, UpgradeID: ev.UpgradeID, To: ev.To, Reason: ev.Reason}, nil
	}
	return "", nil, nil
}

func (w *Webhooks) deployment(ctx context.Context, q eventstore.Querier, org, id string) (DeploymentData, error) {
	data := DeploymentData{OrgID: org, DeploymentID: id}
	_, err := hookstore.Subject(ctx, q, subjectDeployment, id, &data)
	data.OrgID, data.DeploymentID = org, id
	return data, err
}

func (w *Webhooks) build(ctx context.Context, q eventstore.Querier, org, id string) (BuildData, error) {
	data := BuildData{OrgID: org, BuildID: id}
	_, err := hookstore.Subject(ctx, q, subjectBuild, id, &data)
	data.OrgID, data.BuildID = org, id
	return data, err
}

func (w *Webhooks) changeSet(ctx context.Context, q eventstore.Querier, org, id string) (ChangeSetData, error) {
	data := ChangeSetData{OrgID: org, ChangeSetID: id}
	_, err := hookstore.Subject(ctx, q, subjectChangeSet, id, &data)
	data.OrgID, data.ChangeSetID = org, id
	return data, err
}

// withNames fills in the names of what data's ids name.
func withNames(ctx context.Context, q eventstore.Querier, data any) (any, error) {
	var err error
	name := func(id string) string {
		if id == "" || err != nil {
			return ""
		}
		var n nameData
		_, err = hookstore.Subject(ctx, q, subjectName, id, &n)
		return n.Name
	}
	fill := func(org, project, env, service, cluster string) Names {
		return Names{Organisation: name(org), Project: name(project), Environment: name(env), Service: name(service), Cluster: name(cluster)}
	}
	switch d := data.(type) {
	case DeploymentData:
		d.Names = fill(d.OrgID, d.ProjectID, d.EnvironmentID, d.ServiceID, d.ClusterID)
		data = d
	case BuildData:
		d.Names = fill(d.OrgID, d.ProjectID, "", d.ServiceID, d.ClusterID)
		data = d
	case ChangeSetData:
		d.Names = fill(d.OrgID, d.ProjectID, d.EnvironmentID, "", "")
		data = d
	case ClusterData:
		d.Names = fill(d.OrgID, "", "", "", d.ClusterID)
		data = d
	case AgentData:
		d.Names = fill(d.OrgID, "", "", "", d.ClusterID)
		data = d
	}
	return data, err
}

// encode is a delivery's body.
func encode(t string, at time.Time, data any) ([]byte, error) {
	return json.Marshal(payload{Type: t, Timestamp: at.UTC(), Data: data})
}
