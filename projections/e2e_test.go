package projections_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/projections"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	pool   *pgxpool.Pool
	store  *eventstore.Store
	cmd    *dispatch.Handler
	sealer *seal.Sealer
	proj   *projections.Projections
	clock  *testclock.Clock
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.Pool(t)
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	b := &bundle{pool: pool, store: eventstore.New(pool, nil), clock: testclock.Stepping(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), time.Minute)}
	b.sealer = seal.New(pool, mk, nil)
	b.cmd, err = dispatch.New(dispatch.Config{Store: b.store, Now: b.clock.Now})
	require.NoError(t, err)
	b.proj, err = projections.New(projections.Config{Store: b.store, Keys: b.sealer, Now: b.clock.Now})
	require.NoError(t, err)
	return b
}

// catchUp projects everything; other tests' transactions on the shared
// cluster may hold the commit horizon back for a moment.
func (b *bundle) catchUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := b.proj.CatchUp(ctx)
		require.NoError(t, err)
		var total, handled int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&total))
		_, handled, err = eventstore.Checkpoint(ctx, b.pool, projections.SubscriptionName)
		require.NoError(t, err)
		return total == handled
	}, 20*time.Second, 5*time.Millisecond)
}

func id() string { return uuid.NewString() }

func digestOf(name string) string {
	return fmt.Sprintf("registry.example.com/%s@sha256:%064x", name, len(name))
}

// TestEndToEnd drives the domain through the event store and the projections:
// an organisation with a project, two environments, three services, plain,
// secret and reference variables; deleting a referenced service holds its
// dependant in the next revision; the audit log shows every step with its
// actor; the replay tool finds every projection equal.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	alice, bob := id(), id()
	asAlice := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice@example.com"}, Person: alice, RequestID: "req-alice"}
	asBob := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: bob, Name: "bob@example.com"}, Person: bob, RequestID: "req-bob"}
	org, cluster, project, staging, prod := id(), id(), id(), id(), id()
	api, worker, db := id(), id(), id()

	must := func(_ dispatch.Result, err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(b.cmd.User(ctx, asAlice, alice, domain.RegisterUser{UserID: alice, Email: "alice@example.com", PasswordHash: "$2a$x", InstanceAdmin: true}))
	must(b.cmd.User(ctx, asBob, bob, domain.RegisterUser{UserID: bob, Email: "bob@example.com", PasswordHash: "$2a$y"}))
	must(b.cmd.Organisation(ctx, asAlice, org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: alice}))
	must(b.cmd.Organisation(ctx, asAlice, org, domain.AddMember{UserID: bob, Role: domain.RoleAdmin}))
	must(b.cmd.Cluster(ctx, asAlice, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: id(), TokenHash: "hash", ExpiresAt: b.clock.Now().Add(24 * time.Hour)}}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.CreateEnvironment{EnvironmentID: staging, Name: "staging", ClusterID: cluster}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.CreateEnvironment{EnvironmentID: prod, Name: "production", ClusterID: cluster, Protected: true}))
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}
	for _, s := range []struct{ id, name string }{{api, "api"}, {worker, "worker"}, {db, "db"}} {
		must(b.cmd.Project(ctx, asAlice, org, project, domain.CreateService{ServiceID: s.id, Name: s.name, Source: domain.Source{Image: s.name + ":1"}, Processes: web}))
	}
	const secret = "hunter2-very-secret-Zq8"
	sealed, err := b.sealer.Seal(ctx, org, []byte(secret))
	require.NoError(t, err)
	must(b.cmd.Project(ctx, asAlice, org, project, domain.SetVariables{EnvironmentID: staging, Variables: []domain.Variable{{Name: "LOG_LEVEL", Value: "info"}}}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.SetVariables{EnvironmentID: staging, ServiceID: db, Variables: []domain.Variable{{Name: "DB_PASSWORD", Secret: &sealed}, {Name: "DB_PORT", Value: "5432"}}}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.SetVariables{EnvironmentID: staging, ServiceID: api, Variables: []domain.Variable{
		{Name: "DB_PASSWORD", Value: "${{ db.DB_PASSWORD }}"},
		{Name: "DB_ADDR", Value: "${{ db.HOST }}:${{ db.DB_PORT }}"},
	}}))
	must(b.cmd.Project(ctx, asAlice, org, project, domain.SetVariables{EnvironmentID: staging, ServiceID: worker, Variables: []domain.Variable{{Name: "API_URL", Value: "http://${{ api.HOST }}:${{ api.PORT }}"}}}))
	for _, s := range []struct{ id, name string }{{api, "api"}, {worker, "worker"}, {db, "db"}} {
		must(b.cmd.Project(ctx, asAlice, org, project, domain.Deploy{EnvironmentID: staging, ServiceID: s.id, ReleaseID: id(), DeploymentID: id(), Image: digestOf(s.name)}))
	}
	b.catchUp(t)

	rev, err := projections.RevisionNumber(ctx, b.pool, staging, 0)
	require.NoError(t, err)
	doc := rev.Document
	require.Len(t, doc.Services, 3)
	byName := map[string]desiredstate.Service{}
	for _, s := range doc.Services {
		byName[s.Name] = s
		require.False(t, s.Held, "%s: %s", s.Name, s.HeldReason)
	}
	ns := desiredstate.Namespace("acme", "shop", "staging")
	require.Equal(t, ns, doc.Environment.Namespace)
	apiVars := varMap(byName["api"])
	require.Equal(t, "db."+ns+".svc.cluster.local:5432", apiVars["DB_ADDR"].Value)
	require.NotNil(t, apiVars["DB_PASSWORD"].Secret, "a reference to a secret stays sealed")
	require.Equal(t, sealed.DataKeyID, apiVars["DB_PASSWORD"].Secret.DataKeyID)
	require.Equal(t, "info", apiVars["LOG_LEVEL"].Value, "environment-wide variables reach every service")
	require.Equal(t, "http://api."+ns+".svc.cluster.local:8080", varMap(byName["worker"])["API_URL"].Value)
	hash, err := doc.Hash()
	require.NoError(t, err)
	require.Equal(t, rev.Hash, hash)
	before := b.clock.Now()

	// A change that compiles to the same document makes no revision.
	must(b.cmd.Project(ctx, asAlice, org, project, domain.UpdateService{ServiceID: worker, Source: domain.Source{Image: "worker:2"}, Processes: web}))
	b.catchUp(t)
	same, err := projections.RevisionNumber(ctx, b.pool, staging, 0)
	require.NoError(t, err)
	require.Equal(t, rev.Number, same.Number, "no-op recompile made a revision")

	// Production is protected: alice's deploy waits for bob.
	res, err := b.cmd.Project(ctx, asAlice, org, project, domain.Deploy{EnvironmentID: prod, ServiceID: api, ReleaseID: id(), DeploymentID: id(), Image: digestOf("api")})
	require.NoError(t, err)
	cs := res.Events[0].(domain.ChangeSetOpened)
	_, err = b.cmd.Project(ctx, asAlice, org, project, domain.ApproveChangeSet{ChangeSetID: cs.ChangeSetID, Version: 1})
	require.ErrorIs(t, err, domain.ErrForbidden)
	must(b.cmd.Project(ctx, asBob, org, project, domain.ApproveChangeSet{ChangeSetID: cs.ChangeSetID, Version: 1}))

	// Deleting the referenced service holds its dependant, with the reason.
	must(b.cmd.Project(ctx, asBob, org, project, domain.DeleteService{ServiceID: db}))
	b.catchUp(t)
	after, err := projections.RevisionNumber(ctx, b.pool, staging, 0)
	require.NoError(t, err)
	require.Equal(t, rev.Number+1, after.Number)
	names := map[string]desiredstate.Service{}
	for _, s := range after.Document.Services {
		names[s.Name] = s
	}
	require.NotContains(t, names, "db")
	require.True(t, names["api"].Held)
	require.Contains(t, names["api"].HeldReason, `"db"`)
	require.Contains(t, names["api"].HeldReason, "deleted")
	require.Nil(t, names["api"].Release, "a held service carries nothing the agent could apply")
	require.False(t, names["worker"].Held, "the rest of the environment compiles")

	// What ran at a point in time comes from the revision events.
	then, err := projections.StateAt(ctx, b.pool, staging, before)
	require.NoError(t, err)
	require.Equal(t, rev.Number, then.Number)
	_, err = projections.StateAt(ctx, b.pool, staging, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	require.ErrorIs(t, err, projections.ErrNoRevision)

	// Every step is in the audit log with its actor.
	rows, err := b.pool.Query(ctx, `SELECT action, actor_name, target, request_id FROM audit_log ORDER BY seq`)
	require.NoError(t, err)
	var actions []string
	byAction := map[string][]string{}
	for rows.Next() {
		var action, actor, target, req string
		require.NoError(t, rows.Scan(&action, &actor, &target, &req))
		actions = append(actions, action)
		byAction[action] = append(byAction[action], actor+" "+target+" "+req)
	}
	require.NoError(t, rows.Err())
	var events int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&events))
	require.Len(t, actions, events, "every event is in the audit log")
	require.Contains(t, byAction["organisation.create"], "alice@example.com acme req-alice")
	require.Contains(t, byAction["project.create"], "alice@example.com acme/shop req-alice")
	require.Contains(t, byAction["environment.create"], "alice@example.com acme/shop/production req-alice")
	require.Contains(t, byAction["variable.update"], "alice@example.com acme/shop/staging/db req-alice")
	require.Contains(t, byAction["service.deploy"], "alice@example.com acme/shop/staging/api req-alice")
	require.Contains(t, byAction["changeset.approve"], "bob@example.com acme/shop/production req-bob")
	require.Contains(t, byAction["service.delete"], "bob@example.com acme/shop/*/db req-bob")
	require.Contains(t, byAction["environment.revision.compile"][0], "compiler acme/shop/staging")

	// The replay tool rebuilds every projection and finds it equal.
	rep, err := projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	for _, p := range rep.Projections {
		require.True(t, p.Equal, "%+v", p)
	}
	require.True(t, rep.Chain.OK, rep.Chain.Problem)
	require.True(t, rep.Equal())
	require.EqualValues(t, events, rep.Events)
	for _, want := range []string{"read-models", "release-history", "revisions", "audit-log"} {
		require.True(t, strings.Contains(fmt.Sprint(rep.Projections), want), want)
	}
}

func varMap(s desiredstate.Service) map[string]desiredstate.Variable {
	m := map[string]desiredstate.Variable{}
	for _, v := range s.Variables {
		m[v.Name] = v
	}
	return m
}
