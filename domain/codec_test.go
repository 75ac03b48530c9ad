package domain_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

// Every event type survives encode and decode unchanged, and has an audit action.
func TestEveryEventRoundTrips(t *testing.T) {
	t.Parallel()
	exp := now.Add(time.Hour)
	events := []domain.Event{
		domain.InstanceSettingsUpdated{AgentAutoUpgrade: true},
		domain.UserRegistered{UserID: alice, Email: "a@example.com", PasswordHash: "h", InstanceAdmin: true},
		domain.UserPasswordChanged{UserID: alice, PasswordHash: "h2"},
		domain.UserInstanceAdminChanged{UserID: alice},
		domain.TokenCreated{TokenID: "t", UserID: alice, Name: "ci", Scopes: []domain.Scope{"projects:read"}, TokenHash: "h", ExpiresAt: &exp},
		domain.TokenRevoked{TokenID: "t", UserID: alice},
		domain.OrganisationCreated{OrgID: orgID, Name: "acme"},
		domain.MemberAdded{OrgID: orgID, UserID: bob, Role: domain.RoleViewer},
		domain.MemberRoleChanged{OrgID: orgID, UserID: bob, Role: domain.RoleAdmin},
		domain.MemberRemoved{OrgID: orgID, UserID: bob},
		domain.ClusterCreated{ClusterID: clusterID, OrgID: orgID, Name: "eu"},
		domain.ClusterDeleted{ClusterID: clusterID},
		domain.JoinTokenIssued{ClusterID: clusterID, TokenID: "j", TokenHash: "h", ExpiresAt: exp},
		domain.JoinTokenRevoked{ClusterID: clusterID, TokenID: "j"},
		domain.ServerRegistered{ClusterID: clusterID, ServerID: "s", Name: "agent-0", CredentialHash: "c", JoinTokenID: "j"},
		domain.ServerCredentialRevoked{ClusterID: clusterID, ServerID: "s"},
		domain.ServerConnected{ClusterID: clusterID, ServerID: "s", Version: "1.0.0", Arch: "amd64"},
		domain.MeshSettingsUpdated{OrgID: "o", Network: "100.64.0.0/10"},
		domain.MeshNodeJoined{OrgID: "o", ClusterID: clusterID, Node: "n1", Address: "100.96.0.1", PublicKey: "k", Endpoint: "10.0.0.1:51820", PodCIDRs: []string{"10.42.0.0/24"}},
		domain.MeshNodeChanged{OrgID: "o", ClusterID: clusterID, Node: "n1", PodCIDRs: []string{"10.42.1.0/24"}},
		domain.MeshKeyRotated{OrgID: "o", ClusterID: clusterID, Node: "n1", PublicKey: "k2", Requested: true},
		domain.MeshKeyRotationRequested{OrgID: "o", ClusterID: clusterID, Node: "n1", Reason: "schedule"},
		domain.MeshKeyStaged{OrgID: "o", ClusterID: clusterID, Node: "n1", NextPublicKey: "k3"},
		domain.MeshNodeLeft{OrgID: "o", ClusterID: clusterID, Node: "n1", Address: "100.96.0.1", Reason: "cluster deleted"},
		domain.MeshServiceCIDRsReported{OrgID: "o", ClusterID: clusterID, ServiceCIDRs: []string{"10.43.0.0/16"}},
		domain.MeshRevisionCompiled{OrgID: "o", ClusterID: clusterID, Hash: "h", Mesh: domain.MeshCompiled{Network: "100.96.0.0/12",
			Nodes: []domain.MeshCompiledNode{{Name: "n1", Address: "100.96.0.1", Keepalive: 25}},
			Peers: []domain.MeshCompiledPeer{{Cluster: clusterID, Node: "n1", PublicKey: "k", AllowedIPs: []string{"100.96.0.1/32"}}}}},
		domain.ServerDisconnected{ClusterID: clusterID, ServerID: "s", Reason: "connection lost"},
		domain.ProjectCreated{ProjectID: projectID, OrgID: orgID, Name: "shop"},
		domain.ProjectDeleted{ProjectID: projectID},
		domain.EnvironmentCreated{EnvironmentID: stagingID, Name: "staging", ClusterID: clusterID},
		domain.EnvironmentUpdated{EnvironmentID: stagingID, ClusterID: clusterID, Protected: true},
		domain.EnvironmentDeleted{EnvironmentID: stagingID},
		domain.ServiceCreated{ServiceID: apiID, Name: "api", Source: domain.Source{Image: "api"}, Processes: web},
		domain.ServiceUpdated{ServiceID: apiID, Source: domain.Source{GitURL: "https://g", GitBranch: "main"}, Processes: web},
		domain.ServiceDeleted{ServiceID: apiID},
		domain.VariablesSet{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "A", Value: "1"}, {Name: "S", Secret: &domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1, 2}}}}},
		domain.VariablesUnset{EnvironmentID: stagingID, Names: []string{"A"}},
		domain.DomainAdded{EnvironmentID: stagingID, ServiceID: apiID, Host: "a.example.com"},
		domain.DomainRemoved{EnvironmentID: stagingID, ServiceID: apiID, Host: "a.example.com"},
		domain.ServiceScaled{EnvironmentID: stagingID, ServiceID: apiID, Process: "web", Replicas: 3},
		domain.ReleaseCreated{ReleaseID: rel1, EnvironmentID: stagingID, ServiceID: apiID, Number: 1, Image: digest, Processes: web, Reason: "deploy"},
		domain.DeploymentRequested{DeploymentID: dep1, ReleaseID: rel1, EnvironmentID: stagingID, ServiceID: apiID},
		domain.DeploymentDelivering{DeploymentID: dep1, ProjectID: projectID, EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1,
			ClusterID: clusterID, Revision: 2, ProgressDeadlineSeconds: 600, At: now},
		domain.DeploymentStageReached{DeploymentID: dep1, Stage: domain.StatusProbing, Ready: 1, Desired: 2, Detail: "ImagePullBackOff", At: now},
		domain.DeploymentSuperseded{DeploymentID: dep1, By: rel1},
		domain.DeploymentStalled{DeploymentID: dep1, Since: now, Stage: domain.StatusProbing},
		domain.DeploymentStallCleared{DeploymentID: dep1},
		domain.DeploymentsPaused{EnvironmentID: stagingID, ServiceID: apiID, Reason: "rolled back to release 1"},
		domain.DeploymentsResumed{EnvironmentID: stagingID, ServiceID: apiID},
		domain.ChangeSetChanged{ChangeSetID: "c", Version: 2, Description: "scale web to 2", Changes: domain.ChangeList{domain.ScalePayload{EnvironmentID: prodID, ServiceID: apiID, Process: "web", Replicas: 2}}},
		domain.ChangeSetExpired{ChangeSetID: "c"},
		domain.DeploymentSucceeded{DeploymentID: dep1},
		domain.DeploymentFailed{DeploymentID: dep1, Reason: "x"},
		domain.ChangeSetOpened{ChangeSetID: "c", EnvironmentID: prodID, Description: "d", Changes: domain.ChangeList{domain.ScalePayload{EnvironmentID: prodID, ServiceID: apiID, Process: "web", Replicas: 1}}, OpenedBy: alice},
		domain.ChangeSetApproved{ChangeSetID: "c", ApprovedBy: bob},
		domain.ChangeSetRejected{ChangeSetID: "c", RejectedBy: bob, Reason: "no"},
		domain.RevisionCompiled{EnvironmentID: stagingID, ProjectID: projectID, Number: 1, Hash: "sha256:x", Document: json.RawMessage(`{"a":1}`)},
		domain.RevisionCompiled{EnvironmentID: stagingID, ProjectID: projectID, Number: 3, Hash: "sha256:y", Base: 2,
			Set: []domain.RevisionObject{{Key: "variable/s/A", Value: json.RawMessage(`{"name":"A","value":"1"}`)}}, Removed: []string{"variable/s/B"}},
		domain.ReleaseCreated{ReleaseID: rel1, EnvironmentID: stagingID, ServiceID: apiID, Number: 2, Base: 1, Image: digest, Processes: web,
			Variables: []domain.Variable{{Name: "A", Value: "2"}}, Removed: []string{"B"}, Reason: "variables"},
		domain.AgentUpgradeRequested{ClusterID: clusterID, ServerID: "s", UpgradeID: "u", From: "1.4.0", To: "1.5.0", Arch: "amd64", SHA256: "ab", Force: true, Auto: true, RolloutID: "r", At: now},
		domain.AgentUpgraded{ClusterID: clusterID, ServerID: "s", UpgradeID: "u", From: "1.4.0", To: "1.5.0", RolloutID: "r", At: now},
		domain.AgentUpgradeFailed{ClusterID: clusterID, ServerID: "s", UpgradeID: "u", To: "1.5.0", State: domain.UpgradeRolledBack, Step: "verify", Reason: "crash loop", RolloutID: "r", At: now},
		domain.AgentRolloutStarted{OrgID: orgID, RolloutID: "r", Version: "1.5.0", Servers: []domain.RolloutServer{{ServerID: "s", ClusterID: clusterID, Name: "a"}}, At: now},
		domain.AgentRolloutHalted{OrgID: orgID, RolloutID: "r", ServerID: "s", Reason: "x", Untouched: 1, At: now},
		domain.AgentRolloutCompleted{OrgID: orgID, RolloutID: "r", At: now},
		domain.BuildQueuedEvent{BuildID: dep1, ProjectID: projectID, ServiceID: apiID, ClusterID: clusterID, Repository: "https://git.example.com/a/b",
			Branch: "main", Commit: strings.Repeat("a", 40), Environments: []string{stagingID}, Automatic: true, Trigger: "push", Attempt: 1, TimeoutSeconds: 1800},
		domain.BuildTargetsAdded{BuildID: dep1, Environments: []string{prodID}},
		domain.BuildStarted{BuildID: dep1, At: now},
		domain.BuildCommitResolved{BuildID: dep1, Commit: strings.Repeat("b", 40)},
		domain.BuildSucceededEvent{BuildID: dep1, Image: "localhost:30500/acme/shop/api", Digest: "sha256:" + strings.Repeat("c", 64)},
		domain.BuildFailedEvent{BuildID: dep1, Reason: "RUN failed", ExitCode: 3, LogTail: []string{"boom"}},
		domain.BuildCancelledEvent{BuildID: dep1, Reason: "superseded", By: rel1, WasRunning: true},
		domain.BuildTimedOutEvent{BuildID: dep1, TimeoutSeconds: 1800},
		domain.WebhookDeliveryRecorded{DeliveryID: dep1, ProjectID: projectID, Provider: "github", ForgeID: "x", Event: "push", Ref: "refs/heads/main",
			Branch: "main", Commit: strings.Repeat("a", 40), Outcome: domain.DeliveryBuilding, Builds: []domain.DeliveryBuild{{ServiceID: apiID, ClusterID: clusterID, Environments: []string{stagingID}}}, At: now},
		domain.BranchTracked{EnvironmentID: stagingID, ServiceID: apiID, Branch: "feature/x"},
		domain.WebhookSecretRotated{ProjectID: projectID, Secret: domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1}}},
		domain.DeployWaiting{EnvironmentID: stagingID, ServiceID: apiID, Image: digest, BuildID: dep1},
		domain.OutHookCreated{OrgID: orgID, EndpointID: dep1, URL: "https://hooks.example.com/in?token=x", Description: "ops",
			EventTypes: []string{"deployment.failed"}, Secret: domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1}}, At: now},
		domain.OutHookDeleted{OrgID: orgID, EndpointID: dep1},
		domain.OutHookRotated{OrgID: orgID, EndpointID: dep1, Secret: domain.SealedValue{DataKeyID: "k2", Ciphertext: []byte{2}},
			Previous: &domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1}}, PreviousUntil: &exp, At: now},
		domain.OutHookDisabled{OrgID: orgID, EndpointID: dep1, Reason: "the receiver answered 410 Gone", At: now},
		domain.OutHookEnabled{OrgID: orgID, EndpointID: dep1},
		domain.OutHookRedeliveryRequested{OrgID: orgID, EndpointID: dep1, DeliveryID: rel1, At: now},
		domain.ClusterLinkChanged{ClusterID: clusterID, OrgID: orgID, Connected: true, Agents: 2, At: now},
	}
	seen := map[string]bool{}
	for _, e := range events {
		typ, v, payload, err := domain.Encode(e)
		require.NoError(t, err)
		back, err := domain.Decode(typ, v, payload)
		require.NoError(t, err, typ)
		require.Equal(t, e, back, typ)
		a := domain.Audit(e)
		require.NotEmpty(t, a.Action, typ)
		require.NotContains(t, a.Action, "unknown", typ)
		seen[typ] = true
	}
	for _, typ := range domain.EventTypes() {
		require.True(t, seen[typ], "event type %s has no round-trip case", typ)
	}
}

func TestDecodeRejectsBadPayloads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ     string
		version int
		payload string
	}{
		{"nope.happened", 1, `{}`},
		{"project.created", 2, `{}`},
		{"project.created", 1, `{"projectId": 5}`},
		{"project.created", 1, `{"unknownField": "x"}`},
		{"project.created", 1, `not json`},
	} {
		_, err := domain.Decode(tc.typ, tc.version, []byte(tc.payload))
		require.Error(t, err, "%+v", tc)
	}
}

// Events written before releases and revisions recorded changes (schema 1,
// the whole set or document) still decode: as the schema 2 shape with Base 0
// (a whole set) and the document in Document.
func TestSchema1ReleasesAndRevisionsDecode(t *testing.T) {
	t.Parallel()
	e, err := domain.Decode("release.created", 1, []byte(`{"releaseId":"r","environmentId":"e","serviceId":"s","number":4,"image":"i",
		"processes":[{"name":"web","replicas":1}],"variables":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"reason":"deploy"}`))
	require.NoError(t, err)
	rel := e.(domain.ReleaseCreated)
	require.Equal(t, 0, rel.Base, "a schema 1 release holds its whole set")
	require.Equal(t, []domain.Variable{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		domain.ReleaseVariables([]domain.Variable{{Name: "OLD", Value: "x"}}, rel), "the set of the release before does not leak into it")
	p := domain.NewProject()
	p.Apply(rel)
	require.Len(t, p.Released["e"]["s"], 2)
	p.Apply(domain.ReleaseCreated{EnvironmentID: "e", ServiceID: "s", Number: 5, Base: 4, Variables: []domain.Variable{{Name: "C", Value: "3"}}, Removed: []string{"A"}})
	require.Equal(t, map[string]domain.Variable{"B": {Name: "B", Value: "2"}, "C": {Name: "C", Value: "3"}}, p.Released["e"]["s"])

	e, err = domain.Decode("revision.compiled", 1, []byte(`{"environmentId":"e","projectId":"p","number":1,"hash":"sha256:h","document":{"schemaVersion":1}}`))
	require.NoError(t, err)
	rc := e.(domain.RevisionCompiled)
	require.True(t, rc.Whole())
	require.JSONEq(t, `{"schemaVersion":1}`, string(rc.Document))
	typ, v, _, err := domain.Encode(rc)
	require.NoError(t, err)
	require.Equal(t, "revision.compiled", typ)
	require.Equal(t, 2, v, "new events are written with schema 2")
	_, err = domain.Decode("revision.compiled", 3, []byte(`{}`))
	require.Error(t, err, "a schema from the future is refused")
}

func TestVariableSecretsNeverAppearInAudit(t *testing.T) {
	t.Parallel()
	e := domain.VariablesSet{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "DB_PASSWORD", Secret: &domain.SealedValue{DataKeyID: "k", Ciphertext: []byte("c")}}}}
	require.Equal(t, "DB_PASSWORD (secret)", domain.Audit(e).Detail)
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add("variables.set", 1, []byte(`{"environmentId":"e","variables":[{"name":"A","value":"${{ api.PORT }}"}]}`))
	f.Add("changeset.opened", 1, []byte(`{"changeSetId":"c","environmentId":"e","description":"","changes":[{"deploy":{"image":"x"}}],"openedBy":"u"}`))
	f.Add("revision.compiled", 1, []byte(`{"document":{"x":[1,2]}}`))
	f.Add("revision.compiled", 2, []byte(`{"environmentId":"e","number":2,"hash":"h","base":1,"set":[{"key":"variable/s/A","value":{"name":"A"}}],"removed":["service/t"]}`))
	f.Add("release.created", 2, []byte(`{"releaseId":"r","number":2,"base":1,"variables":[{"name":"A","value":"1"}],"removed":["B"],"reason":"variables"}`))
	f.Fuzz(func(t *testing.T, typ string, version int, payload []byte) {
		e, err := domain.Decode(typ, version, payload)
		if err != nil {
			return
		}
		// Whatever decodes must encode again and decode to the same value.
		typ2, v2, p2, err := domain.Encode(e)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", typ, err)
		}
		back, err := domain.Decode(typ2, v2, p2)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", typ, err)
		}
		_ = domain.Audit(back)
	})
}
