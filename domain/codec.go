package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// eventCodec is one row of the decode table: the schema version events of a
// type are written with, and how to read each version that was ever written.
type eventCodec struct {
	version int
	decode  func(version int, payload []byte) (Event, error)
}

// decodeV1 reads schema version 1 of T strictly.
func decodeV1[T Event](version int, payload []byte) (Event, error) {
	if version != 1 {
		return nil, fmt.Errorf("schema version %d is unknown", version)
	}
	var e T
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeUpTo reads schema versions 1 to max of T strictly, for event types
// whose newer schema only added optional fields: a version 1 payload reads
// as the newer shape with those fields empty, which the type documents.
func decodeUpTo[T Event](max int) func(int, []byte) (Event, error) {
	return func(version int, payload []byte) (Event, error) {
		if version < 1 || version > max {
			return nil, fmt.Errorf("schema version %d is unknown", version)
		}
		return decodeV1[T](1, payload)
	}
}

// codecs is the one decode table of every event type. Adding an event type
// means adding a line here; changing a payload incompatibly means a new
// schema version with its own decoder, never editing the old one. The types
// a replay reads most also have a hand-written reader (withFastPath,
// codec_fast.go) that reads what Encode writes without reflection and leaves
// anything else to the strict decoder; a new field of such a type needs its
// case there too, else its events take the strict path (which the tests in
// codec_fast_test.go catch).
var codecs = map[string]eventCodec{
	"instance.settings.updated":   {1, decodeV1[InstanceSettingsUpdated]},
	"user.registered":             {1, decodeV1[UserRegistered]},
	"user.password.changed":       {1, decodeV1[UserPasswordChanged]},
	"user.instance_admin.changed": {1, decodeV1[UserInstanceAdminChanged]},
	"token.created":               {1, decodeV1[TokenCreated]},
	"token.revoked":               {1, decodeV1[TokenRevoked]},
	"organisation.created":        {1, decodeV1[OrganisationCreated]},
	"member.added":                {1, decodeV1[MemberAdded]},
	"member.role.changed":         {1, decodeV1[MemberRoleChanged]},
	"member.removed":              {1, decodeV1[MemberRemoved]},
	"cluster.created":             {1, decodeV1[ClusterCreated]},
	"cluster.deleted":             {1, decodeV1[ClusterDeleted]},
	"cluster.join_token.issued":   {1, decodeV1[JoinTokenIssued]},
	"cluster.join_token.revoked":  {1, decodeV1[JoinTokenRevoked]},
	"server.registered":           {1, decodeV1[ServerRegistered]},
	"server.credential.revoked":   {1, decodeV1[ServerCredentialRevoked]},
	"server.connected":            {1, decodeV1[ServerConnected]},
	"mesh.settings.updated":       {1, decodeV1[MeshSettingsUpdated]},
	"mesh.node.joined":            {1, decodeV1[MeshNodeJoined]},
	"mesh.node.changed":           {1, decodeV1[MeshNodeChanged]},
	"mesh.key.rotated":            {1, decodeV1[MeshKeyRotated]},
	"mesh.key.rotation_requested": {1, decodeV1[MeshKeyRotationRequested]},
	"mesh.node.left":              {1, decodeV1[MeshNodeLeft]},
	"mesh.service_cidrs.reported": {1, decodeV1[MeshServiceCIDRsReported]},
	"mesh.revision.compiled":      {1, decodeV1[MeshRevisionCompiled]},
	"mesh.key.staged":             {1, decodeV1[MeshKeyStaged]},
	"server.disconnected":         {1, decodeV1[ServerDisconnected]},
	"project.created":             {1, decodeV1[ProjectCreated]},
	"project.deleted":             {1, decodeV1[ProjectDeleted]},
	"environment.created":         {1, decodeV1[EnvironmentCreated]},
	"environment.updated":         {1, decodeV1[EnvironmentUpdated]},
	"environment.deleted":         {1, decodeV1[EnvironmentDeleted]},
	"service.created":             {1, decodeV1[ServiceCreated]},
	"service.updated":             {1, decodeV1[ServiceUpdated]},
	"service.deleted":             {1, decodeV1[ServiceDeleted]},
	"variables.set":               {1, withFastPath(1, fastVariablesSet, decodeV1[VariablesSet])},
	"variables.unset":             {1, decodeV1[VariablesUnset]},
	"domain.added":                {1, decodeV1[DomainAdded]},
	"domain.removed":              {1, decodeV1[DomainRemoved]},
	"service.scaled":              {1, decodeV1[ServiceScaled]},
	"release.created":             {2, withFastPath(2, fastReleaseCreated, decodeUpTo[ReleaseCreated](2))},
	"deployment.requested":        {1, withFastPath(1, fastDeploymentRequested, decodeV1[DeploymentRequested])},
	"deployment.delivering":       {1, withFastPath(1, fastDeploymentDelivering, decodeV1[DeploymentDelivering])},
	"deployment.succeeded":        {1, withFastPath(1, fastDeploymentSucceeded, decodeV1[DeploymentSucceeded])},
	"deployment.failed":           {1, withFastPath(1, fastDeploymentFailed, decodeV1[DeploymentFailed])},
	"deployment.stage":            {1, withFastPath(1, fastDeploymentStageReached, decodeV1[DeploymentStageReached])},
	"deployment.superseded":       {1, decodeV1[DeploymentSuperseded]},
	"deployment.stalled":          {1, decodeV1[DeploymentStalled]},
	"deployment.stall_cleared":    {1, decodeV1[DeploymentStallCleared]},
	"service.deploys.paused":      {1, decodeV1[DeploymentsPaused]},
	"service.deploys.resumed":     {1, decodeV1[DeploymentsResumed]},
	"changeset.changed":           {changeSetSchema, decodeChangeSetChanged},
	"changeset.expired":           {1, decodeV1[ChangeSetExpired]},
	"changeset.opened":            {changeSetSchema, decodeChangeSetOpened},
	"changeset.approved":          {1, decodeV1[ChangeSetApproved]},
	"changeset.rejected":          {1, decodeV1[ChangeSetRejected]},
	"revision.compiled":           {2, withFastPath(2, fastRevisionCompiled, decodeUpTo[RevisionCompiled](2))},

	// Builds from Git (build.go, webhook.go).
	"build.queued":              {1, decodeV1[BuildQueuedEvent]},
	"build.targets.added":       {1, decodeV1[BuildTargetsAdded]},
	"build.started":             {1, decodeV1[BuildStarted]},
	"build.commit.resolved":     {1, decodeV1[BuildCommitResolved]},
	"build.succeeded":           {1, decodeV1[BuildSucceededEvent]},
	"build.failed":              {1, decodeV1[BuildFailedEvent]},
	"build.cancelled":           {1, decodeV1[BuildCancelledEvent]},
	"build.timed_out":           {1, decodeV1[BuildTimedOutEvent]},
	"webhook.delivery.recorded": {1, decodeV1[WebhookDeliveryRecorded]},
	"service.branch.tracked":    {1, decodeV1[BranchTracked]},
	"project.webhook.rotated":   {1, decodeV1[WebhookSecretRotated]},
	"service.deploy.waiting":    {1, decodeV1[DeployWaiting]},

	// Agent upgrades (upgrade.go).
	"server.agent.upgrade.requested": {1, decodeV1[AgentUpgradeRequested]},
	"server.agent.upgraded":          {1, decodeV1[AgentUpgraded]},
	"server.agent.upgrade.failed":    {2, decodeUpTo[AgentUpgradeFailed](2)},
	"agent.rollout.started":          {1, decodeV1[AgentRolloutStarted]},
	"agent.rollout.halted":           {1, decodeV1[AgentRolloutHalted]},
	"agent.rollout.completed":        {1, decodeV1[AgentRolloutCompleted]},

	// Outbound webhooks and cluster links (outhook.go).
	"webhook.endpoint.created":              {1, decodeV1[OutHookCreated]},
	"webhook.endpoint.deleted":              {1, decodeV1[OutHookDeleted]},
	"webhook.endpoint.rotated":              {1, decodeV1[OutHookRotated]},
	"webhook.endpoint.disabled":             {1, decodeV1[OutHookDisabled]},
	"webhook.endpoint.enabled":              {1, decodeV1[OutHookEnabled]},
	"webhook.endpoint.redelivery_requested": {1, decodeV1[OutHookRedeliveryRequested]},
	"cluster.link.changed":                  {1, decodeV1[ClusterLinkChanged]},
}

// EventTypes lists every known event type.
func EventTypes() []string {
	out := make([]string, 0, len(codecs))
	for t := range codecs {
		out = append(out, t)
	}
	return out
}

// Encode returns an event's type, schema version and JSON payload.
func Encode(e Event) (string, int, []byte, error) {
	t := e.EventType()
	c, ok := codecs[t]
	if !ok {
		return "", 0, nil, fmt.Errorf("event type %q is not in the decode table", t)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return "", 0, nil, fmt.Errorf("encoding %s: %w", t, err)
	}
	return t, c.version, b, nil
}

// Decode reads a stored event.
func Decode(eventType string, schemaVersion int, payload []byte) (Event, error) {
	c, ok := codecs[eventType]
	if !ok {
		return nil, fmt.Errorf("decoding event: type %q is unknown", eventType)
	}
	e, err := c.decode(schemaVersion, payload)
	if err != nil {
		return nil, fmt.Errorf("decoding %s (schema %d): %w", eventType, schemaVersion, err)
	}
	return e, nil
}

// AuditEntry is how an event reads in the audit log.
type AuditEntry struct {
	// Action is dotted and lower case: service.deploy, variable.update, ...
	Action     string
	TargetKind string
	TargetID   string
	// Detail is a short description for people; never a secret value.
	Detail string
}

// Audit describes an event for the audit log.
func Audit(e Event) AuditEntry {
	if en, ok := auditUpgrade(e); ok {
		return en
	}
	if en, ok := auditBuild(e); ok {
		return en
	}
	if en, ok := auditMesh(e); ok {
		return en
	}
	if en, ok := auditOutHook(e); ok {
		return en
	}
	switch e := e.(type) {
	case InstanceSettingsUpdated:
		return AuditEntry{"instance.agent_auto_upgrade.update", "instance", "instance", fmt.Sprintf("agent auto-upgrade %s", onOff(e.AgentAutoUpgrade))}
	case UserRegistered:
		d := e.Email
		if e.InstanceAdmin {
			d += " (instance administrator)"
		}
		return AuditEntry{"user.create", "user", e.UserID, d}
	case UserPasswordChanged:
		return AuditEntry{"user.password.update", "user", e.UserID, ""}
	case UserInstanceAdminChanged:
		return AuditEntry{"user.instance_admin.update", "user", e.UserID, fmt.Sprintf("instance administrator %s", onOff(e.InstanceAdmin))}
	case TokenCreated:
		return AuditEntry{"token.create", "token", e.TokenID, fmt.Sprintf("%s with scopes %s", e.Name, joinScopes(e.Scopes))}
	case TokenRevoked:
		return AuditEntry{"token.revoke", "token", e.TokenID, ""}
	case OrganisationCreated:
		return AuditEntry{"organisation.create", "organisation", e.OrgID, ""}
	case MemberAdded:
		return AuditEntry{"member.add", "user", e.UserID, "role " + string(e.Role)}
	case MemberRoleChanged:
		return AuditEntry{"member.update", "user", e.UserID, "role " + string(e.Role)}
	case MemberRemoved:
		return AuditEntry{"member.remove", "user", e.UserID, ""}
	case ClusterCreated:
		return AuditEntry{"cluster.create", "cluster", e.ClusterID, ""}
	case ClusterDeleted:
		return AuditEntry{"cluster.delete", "cluster", e.ClusterID, ""}
	case JoinTokenIssued:
		return AuditEntry{"cluster.join_token.create", "cluster", e.ClusterID, "expires " + e.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")}
	case JoinTokenRevoked:
		return AuditEntry{"cluster.join_token.revoke", "cluster", e.ClusterID, ""}
	case ServerRegistered:
		return AuditEntry{"server.register", "server", e.ServerID, e.Name}
	case ServerCredentialRevoked:
		return AuditEntry{"server.credential.revoke", "server", e.ServerID, ""}
	case ServerConnected:
		return AuditEntry{"server.agent.connect", "server", e.ServerID, "agent " + e.Version}
	case ServerDisconnected:
		return AuditEntry{"server.agent.disconnect", "server", e.ServerID, e.Reason}
	case ProjectCreated:
		return AuditEntry{"project.create", "project", e.ProjectID, ""}
	case ProjectDeleted:
		return AuditEntry{"project.delete", "project", e.ProjectID, ""}
	case EnvironmentCreated:
		return AuditEntry{"environment.create", "environment", e.EnvironmentID, protectedNote(e.Protected)}
	case EnvironmentUpdated:
		return AuditEntry{"environment.update", "environment", e.EnvironmentID, protectedNote(e.Protected)}
	case EnvironmentDeleted:
		return AuditEntry{"environment.delete", "environment", e.EnvironmentID, ""}
	case ServiceCreated:
		return AuditEntry{"service.create", "service", e.ServiceID, sourceNote(e.Source)}
	case ServiceUpdated:
		return AuditEntry{"service.update", "service", e.ServiceID, sourceNote(e.Source)}
	case ServiceDeleted:
		return AuditEntry{"service.delete", "service", e.ServiceID, ""}
	case VariablesSet:
		names := make([]string, len(e.Variables))
		for i, v := range e.Variables {
			names[i] = v.Name
			if v.Secret != nil {
				names[i] += " (secret)"
			}
		}
		return envOrService("variable.update", e.EnvironmentID, e.ServiceID, strings.Join(names, ", "))
	case VariablesUnset:
		return envOrService("variable.delete", e.EnvironmentID, e.ServiceID, strings.Join(e.Names, ", "))
	case DomainAdded:
		return AuditEntry{"domain.add", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, e.Host}
	case DomainRemoved:
		return AuditEntry{"domain.remove", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, e.Host}
	case ServiceScaled:
		return AuditEntry{"service.scale", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, fmt.Sprintf("%s to %d", e.Process, e.Replicas)}
	case ReleaseCreated:
		return AuditEntry{"release.create", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, fmt.Sprintf("release %d of %s (%s)", e.Number, e.Image, e.Reason)}
	case DeploymentRequested:
		action := "service.deploy"
		if e.Rollback {
			action = "service.rollback"
		}
		return AuditEntry{action, "deployment-target", e.EnvironmentID + "/" + e.ServiceID, "deployment " + e.DeploymentID}
	case DeploymentDelivering:
		return AuditEntry{"deployment.deliver", "deployment", e.DeploymentID, fmt.Sprintf("revision %d", e.Revision)}
	case DeploymentStageReached:
		return AuditEntry{"deployment.stage", "deployment", e.DeploymentID, fmt.Sprintf("%s (%d/%d ready)", e.Stage, e.Ready, e.Desired)}
	case DeploymentSuperseded:
		return AuditEntry{"deployment.supersede", "deployment", e.DeploymentID, "by deployment " + e.By}
	case DeploymentStalled:
		return AuditEntry{"deployment.stall", "deployment", e.DeploymentID, fmt.Sprintf("no progress since %s (%s)", e.Since.UTC().Format("2006-01-02T15:04:05Z"), e.Stage)}
	case DeploymentStallCleared:
		return AuditEntry{"deployment.stall.clear", "deployment", e.DeploymentID, ""}
	case DeploymentsPaused:
		return AuditEntry{"service.deploys.pause", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, e.Reason}
	case DeploymentsResumed:
		return AuditEntry{"service.deploys.resume", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, ""}
	case ChangeSetChanged:
		return AuditEntry{"changeset.update", "changeset", e.ChangeSetID, fmt.Sprintf("version %d: %s", e.Version, e.Description)}
	case ChangeSetExpired:
		return AuditEntry{"changeset.expire", "changeset", e.ChangeSetID, ""}
	case DeploymentSucceeded:
		return AuditEntry{"deployment.succeed", "deployment", e.DeploymentID, ""}
	case DeploymentFailed:
		return AuditEntry{"deployment.fail", "deployment", e.DeploymentID, e.Reason}
	case ChangeSetOpened:
		return AuditEntry{"changeset.open", "environment", e.EnvironmentID, fmt.Sprintf("change set %s: %s", e.ChangeSetID, e.Description)}
	case ChangeSetApproved:
		return AuditEntry{"changeset.approve", "changeset", e.ChangeSetID, ""}
	case ChangeSetRejected:
		return AuditEntry{"changeset.reject", "changeset", e.ChangeSetID, e.Reason}
	case RevisionCompiled:
		return AuditEntry{"environment.revision.compile", "environment", e.EnvironmentID, fmt.Sprintf("revision %d %s", e.Number, e.Hash)}
	}
	return AuditEntry{Action: "unknown." + e.EventType(), TargetKind: "unknown"}
}

func envOrService(action, envID, svcID, detail string) AuditEntry {
	if svcID == "" {
		return AuditEntry{action, "environment", envID, detail}
	}
	return AuditEntry{action, "deployment-target", envID + "/" + svcID, detail}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func protectedNote(p bool) string {
	if p {
		return "protected"
	}
	return ""
}

func sourceNote(s Source) string {
	if s.Image != "" {
		return "image " + s.Image
	}
	note := "git " + s.GitURL + "#" + s.GitBranch
	if s.Credential != nil {
		note += " (with a " + s.Credential.Kind + " credential)"
	}
	return note
}

// auditBuild describes the events of builds and webhooks.
func auditBuild(e Event) (AuditEntry, bool) {
	switch e := e.(type) {
	case BuildQueuedEvent:
		what := e.Branch
		if e.Commit != "" {
			what += " at " + shortCommit(e.Commit)
		}
		return AuditEntry{"build.queue", "build", e.BuildID, fmt.Sprintf("%s (by %s, attempt %d)", what, e.Trigger, e.Attempt)}, true
	case BuildTargetsAdded:
		return AuditEntry{"build.queue", "build", e.BuildID, fmt.Sprintf("%d more environments", len(e.Environments))}, true
	case BuildStarted:
		return AuditEntry{"build.start", "build", e.BuildID, ""}, true
	case BuildCommitResolved:
		return AuditEntry{"build.commit.resolve", "build", e.BuildID, shortCommit(e.Commit)}, true
	case BuildSucceededEvent:
		return AuditEntry{"build.succeed", "build", e.BuildID, e.Image + "@" + e.Digest}, true
	case BuildFailedEvent:
		d := e.Reason
		if e.ExitCode != 0 {
			d = fmt.Sprintf("exit code %d: %s", e.ExitCode, d)
		}
		return AuditEntry{"build.fail", "build", e.BuildID, d}, true
	case BuildTimedOutEvent:
		return AuditEntry{"build.fail", "build", e.BuildID, fmt.Sprintf("timed out after %s", time.Duration(e.TimeoutSeconds)*time.Second)}, true
	case BuildCancelledEvent:
		return AuditEntry{"build.cancel", "build", e.BuildID, e.Reason}, true
	case WebhookDeliveryRecorded:
		d := e.Provider + " " + e.Event
		if e.Ref != "" {
			d += " " + e.Ref
		}
		d += ": " + e.Outcome
		if e.Reason != "" {
			d += " (" + e.Reason + ")"
		}
		return AuditEntry{"webhook.delivery", "project", e.ProjectID, d}, true
	case BranchTracked:
		d := "branch " + e.Branch
		if e.None {
			d = "no branch"
		}
		return AuditEntry{"service.track", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, d}, true
	case WebhookSecretRotated:
		return AuditEntry{"project.webhook.rotate", "project", e.ProjectID, ""}, true
	case DeployWaiting:
		return AuditEntry{"service.deploy.wait", "deployment-target", e.EnvironmentID + "/" + e.ServiceID, e.Image + " waits: automatic deploys are paused"}, true
	}
	return AuditEntry{}, false
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func joinScopes(s []Scope) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = string(x)
	}
	return strings.Join(parts, " ")
}
