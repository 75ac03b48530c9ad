package agentlink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The agent receives a revision the moment it is compiled and can report
// its first stage before the reactions opened the deployment's stream: the
// report is kept all the same (found by the end-to-end test: "starting" was
// lost now and then).
func TestStageReportedBeforeDeliveryIsKept(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	sealer := seal.New(pool, mk, nil)
	store := eventstore.New(pool, nil)
	cmd, err := dispatch.New(dispatch.Config{Store: store})
	require.NoError(t, err)
	proj, err := projections.New(projections.Config{Store: store, Keys: sealer})
	require.NoError(t, err)
	deliveries, err := reactions.NewDeliveries(pool, cmd, projections.ReadModels{})
	require.NoError(t, err)
	link, err := agentlink.New(agentlink.Config{Pool: pool, Commands: cmd, Secrets: sealer, Deliveries: deliveries})
	require.NoError(t, err)
	t.Cleanup(link.Close)

	alice := uuid.NewString()
	as := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice"}, Person: alice}
	org, cluster, project, env, svc, dep := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	must := func(_ dispatch.Result, err error) { t.Helper(); require.NoError(t, err) }
	must(cmd.Organisation(ctx, as, org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: alice}))
	must(cmd.Cluster(ctx, as, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: uuid.NewString(), TokenHash: "h", ExpiresAt: time.Now().Add(time.Hour)}}))
	must(cmd.Project(ctx, as, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"}))
	must(cmd.Project(ctx, as, org, project, domain.CreateEnvironment{EnvironmentID: env, Name: "staging", ClusterID: cluster}))
	must(cmd.Project(ctx, as, org, project, domain.CreateService{ServiceID: svc, Name: "api", Source: domain.Source{Image: "api:1"},
		Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}, ProgressDeadlineSeconds: 90}))
	must(cmd.Project(ctx, as, org, project, domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: uuid.NewString(), DeploymentID: dep,
		Image: fmt.Sprintf("registry.example.com/api@sha256:%064x", 1)}))
	// Projected (the commit horizon shared with other tests' databases may
	// hold events back for a moment): the deployment is in the read model.
	require.Eventually(t, func() bool {
		_, err := proj.CatchUp(ctx)
		require.NoError(t, err)
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM deployments WHERE id = $1`, dep).Scan(&n))
		return n == 1
	}, 20*time.Second, 10*time.Millisecond)

	peer := transport.Peer{ServerID: uuid.NewString(), ClusterID: cluster, OrgID: org, Name: "agent-0"}
	link.OnStage(ctx, peer, transport.StageReport{EnvironmentID: env, DeploymentID: dep, Service: "api", Release: 1, Stage: transport.StageStarting, Desired: 1})
	other := peer
	other.ClusterID = uuid.NewString()
	link.OnStage(ctx, other, transport.StageReport{EnvironmentID: env, DeploymentID: dep, Service: "api", Release: 1, Stage: transport.StageProbing, Desired: 1})

	events, err := store.ReadStream(ctx, domain.DeploymentStream(dep), 0)
	require.NoError(t, err)
	var types []string
	for _, e := range events {
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"deployment.delivering", "deployment.stage"}, types, "delivered, then the stage; another cluster's report is refused")
	d, err := domain.Decode(events[0].Type, events[0].SchemaVersion, events[0].Payload)
	require.NoError(t, err)
	require.Equal(t, 90, d.(domain.DeploymentDelivering).ProgressDeadlineSeconds)
}
