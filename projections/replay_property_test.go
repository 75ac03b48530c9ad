package projections_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nebulactrl/nebulactrl/internal/version"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/projections"
)

// TestReplayEqualsLiveForAnyCommandSequence is the property "replay equals
// live": random valid command sequences over every aggregate (members removed
// and added again, services and environments deleted and recreated under the
// same name, tokens revoked, join tokens and servers revoked and re-issued,
// deployments through their stages, change sets, agent upgrades asked for,
// reported, failed and expired, staged rollouts started, halted and
// completed, the instance settings), projected live in batches
// of random sizes, rebuild from event 0 to exactly the same rows.
func TestReplayEqualsLiveForAnyCommandSequence(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 2; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			runRandomCommands(t, b, rand.New(rand.NewPCG(seed, 42)), 600)
			rep, err := projections.Replay(context.Background(), b.pool)
			require.NoError(t, err)
			require.True(t, rep.Equal(), "replay differs from live: %+v", rep)
			checkHistoryRebuilds(t, b)
			// The sequence reached the agent upgrades, the rollouts and the
			// instance settings too.
			rows, err := b.pool.Query(context.Background(), `SELECT DISTINCT event_type FROM events`)
			require.NoError(t, err)
			types, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			for _, want := range []string{"instance.settings.updated", "server.agent.upgrade.requested", "server.agent.upgraded", "server.agent.upgrade.failed",
				"agent.rollout.started", "agent.rollout.halted", "agent.rollout.completed"} {
				require.Contains(t, types, want)
			}
		})
	}
}

// liveLease is the lease of an agent whose heartbeat the stepping clock has
// not left 60 s behind when the upgrade is decided (domain.Lease.Live).
func liveLease(b *bundle) domain.Lease {
	beat := b.clock.Now().Add(time.Hour)
	return domain.Lease{Held: true, RenewedAt: &beat}
}

// allowed are the refusals a random sequence runs into by design.
func allowed(err error) bool {
	for _, e := range []error{domain.ErrNotFound, domain.ErrConflict, domain.ErrForbidden, domain.ErrInvalid} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func runRandomCommands(t *testing.T, b *bundle, rng *rand.Rand, n int) {
	ctx := context.Background()
	users := []string{id(), id(), id()}
	as := func(i int) dispatch.Context {
		return dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: users[i], Name: fmt.Sprint("user", i)}, Person: users[i], RequestID: fmt.Sprint("req-", rng.IntN(1000))}
	}
	agent := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorAgent, ID: id(), Name: "agent-0"}}
	yes := true
	must := func(_ dispatch.Result, err error) {
		t.Helper()
		if err != nil && !allowed(err) {
			require.NoError(t, err)
		}
	}
	for i, u := range users {
		must(b.cmd.User(ctx, as(i), u, domain.RegisterUser{UserID: u, Email: fmt.Sprintf("u%d@example.com", i), PasswordHash: "$2a$x", InstanceAdmin: i == 0}))
	}
	org, cluster, project := id(), id(), id()
	must(b.cmd.Organisation(ctx, as(0), org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: users[0]}))
	must(b.cmd.Cluster(ctx, as(0), org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: id(), TokenHash: "h", ExpiresAt: b.clock.Now().Add(24 * 365 * time.Hour)}}))
	must(b.cmd.Project(ctx, as(0), org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"}))

	names := []string{"api", "web", "db"}
	services := map[string]string{} // name -> live id
	envs := map[string]string{}     // name -> live id
	var tokens, joinTokens, servers, deployments []string
	pick := func(xs []string) string {
		if len(xs) == 0 {
			return id()
		}
		return xs[rng.IntN(len(xs))]
	}
	pickMap := func(m map[string]string) (string, string) {
		keys := []string{"api", "web", "db", "staging", "production"}
		for range 5 {
			k := keys[rng.IntN(len(keys))]
			if v, ok := m[k]; ok {
				return k, v
			}
		}
		return "", id()
	}
	for i := 0; i < n; i++ {
		u := rng.IntN(len(users))
		switch rng.IntN(21) {
		case 0:
			must(b.cmd.Organisation(ctx, as(0), org, domain.AddMember{UserID: users[1+rng.IntN(2)], Role: []domain.Role{domain.RoleAdmin, domain.RoleMember, domain.RoleViewer}[rng.IntN(3)]}))
		case 1:
			must(b.cmd.Organisation(ctx, as(0), org, domain.RemoveMember{UserID: users[1+rng.IntN(2)]}))
		case 2:
			must(b.cmd.Organisation(ctx, as(0), org, domain.ChangeMemberRole{UserID: users[1+rng.IntN(2)], Role: domain.RoleViewer}))
		case 3:
			tok := id()
			tokens = append(tokens, tok)
			must(b.cmd.User(ctx, as(u), users[u], domain.CreateToken{TokenID: tok, Name: fmt.Sprint("t", i), Scopes: []domain.Scope{domain.ScopeProjectsRead}, TokenHash: fmt.Sprint("h", i)}))
		case 4:
			must(b.cmd.User(ctx, as(u), users[u], domain.RevokeToken{TokenID: pick(tokens)}))
		case 5:
			jt := id()
			joinTokens = append(joinTokens, jt)
			must(b.cmd.Cluster(ctx, as(0), org, cluster, domain.IssueJoinToken{TokenID: jt, TokenHash: "h", ExpiresAt: b.clock.Now().Add(24 * 365 * time.Hour)}))
		case 6:
			if rng.IntN(2) == 0 {
				must(b.cmd.Cluster(ctx, as(0), org, cluster, domain.RevokeJoinToken{TokenID: pick(joinTokens)}))
			} else {
				must(b.cmd.Cluster(ctx, as(0), org, cluster, domain.RevokeServer{ServerID: pick(servers)}))
			}
		case 7:
			srv := id()
			servers = append(servers, srv)
			must(b.cmd.Cluster(ctx, agent, org, cluster, domain.RegisterServer{ServerID: srv, Name: fmt.Sprint("agent-", rng.IntN(3)), CredentialHash: "c", JoinTokenID: pick(joinTokens)}))
			must(b.cmd.Server(ctx, agent, org, srv, domain.RecordConnection{ClusterID: cluster, ServerID: srv, Connected: rng.IntN(2) == 0, Version: "1.0.0",
				Arch: "amd64", Upgradable: &yes, Session: fmt.Sprint("s", i)}))
		case 8:
			name := []string{"staging", "production"}[rng.IntN(2)]
			if _, ok := envs[name]; ok {
				must(b.cmd.Project(ctx, as(0), org, project, domain.DeleteEnvironment{EnvironmentID: envs[name]}))
				delete(envs, name)
			} else {
				e := id()
				envs[name] = e
				must(b.cmd.Project(ctx, as(0), org, project, domain.CreateEnvironment{EnvironmentID: e, Name: name, ClusterID: cluster, Protected: name == "production"}))
			}
		case 9:
			name := names[rng.IntN(len(names))]
			if _, ok := services[name]; ok {
				must(b.cmd.Project(ctx, as(0), org, project, domain.DeleteService{ServiceID: services[name]}))
				delete(services, name)
			} else {
				s := id()
				services[name] = s
				must(b.cmd.Project(ctx, as(0), org, project, domain.CreateService{ServiceID: s, Name: name, Source: domain.Source{Image: name + ":1"},
					Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}}))
			}
		case 10, 11:
			_, env := pickMap(envs)
			_, svc := pickMap(services)
			dep := id()
			res, err := b.cmd.Project(ctx, as(u), org, project, domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: id(), DeploymentID: dep, Image: digestOf(fmt.Sprint("img", i))})
			must(res, err)
			if err == nil && len(res.Events) > 1 {
				deployments = append(deployments, dep)
			}
		case 12:
			_, env := pickMap(envs)
			_, svc := pickMap(services)
			_, other := pickMap(services)
			must(b.cmd.Project(ctx, as(u), org, project, domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: []domain.Variable{
				{Name: fmt.Sprint("V", rng.IntN(3)), Value: fmt.Sprint(i)}, {Name: "REF", Value: "${{ " + map[bool]string{true: "api", false: "db"}[other != svc] + ".HOST }}"}}}))
		case 16:
			_, env := pickMap(envs)
			_, svc := pickMap(services)
			must(b.cmd.Project(ctx, as(u), org, project, domain.UnsetVariables{EnvironmentID: env, ServiceID: svc, Names: []string{fmt.Sprint("V", rng.IntN(3))}}))
		case 17:
			// A rollback to an earlier release, as the API makes it: the
			// release's facts read from the release history.
			b.catchUp(t)
			_, env := pickMap(envs)
			_, svc := pickMap(services)
			rows, err := b.pool.Query(ctx, `SELECT id::text, number, image FROM releases WHERE environment_id::text = $1 AND service_id::text = $2 ORDER BY number`, env, svc)
			require.NoError(t, err)
			var refs []domain.ReleaseRef
			var relIDs []string
			for rows.Next() {
				r := domain.ReleaseRef{EnvironmentID: env, ServiceID: svc}
				var relID string
				require.NoError(t, rows.Scan(&relID, &r.Number, &r.Image))
				refs, relIDs = append(refs, r), append(relIDs, relID)
			}
			require.NoError(t, rows.Err())
			if len(refs) > 0 {
				dep := id()
				k := rng.IntN(len(refs))
				res, err := b.cmd.Project(ctx, as(u), org, project, domain.Rollback{EnvironmentID: env, ServiceID: svc, ReleaseID: relIDs[k], DeploymentID: dep,
					Release: refs[k]})
				must(res, err)
				if err == nil && len(res.Events) > 0 {
					deployments = append(deployments, dep)
				}
			}
		case 13:
			_, env := pickMap(envs)
			_, svc := pickMap(services)
			host := fmt.Sprintf("h%d.example.com", rng.IntN(4))
			if rng.IntN(2) == 0 {
				must(b.cmd.Project(ctx, as(u), org, project, domain.AddDomain{EnvironmentID: env, ServiceID: svc, Host: host}))
			} else {
				must(b.cmd.Project(ctx, as(u), org, project, domain.RemoveDomain{EnvironmentID: env, Host: host}))
			}
		case 14:
			// An agent reports a stage of a deployment it was given.
			dep := pick(deployments)
			stage := []domain.DeploymentStatus{domain.StatusStarting, domain.StatusProbing, domain.StatusSwitching, domain.StatusRetiring, domain.StatusSucceeded}[rng.IntN(5)]
			must(b.cmd.Deployment(ctx, agent, org, dep, domain.ReportStage{ClusterID: cluster, Stage: stage, Ready: rng.IntN(3), Desired: 2}))
		case 15:
			// Change sets of the protected environment: someone approves or
			// rejects one.
			if env, ok := envs["production"]; ok {
				_, svc := pickMap(services)
				res, err := b.cmd.Project(ctx, as(u), org, project, domain.Scale{EnvironmentID: env, ServiceID: svc, Process: "web", Replicas: rng.IntN(4)})
				must(res, err)
				var cs string
				version := 1
				for _, e := range res.Events {
					switch e := e.(type) {
					case domain.ChangeSetOpened:
						cs = e.ChangeSetID
					case domain.ChangeSetChanged:
						cs, version = e.ChangeSetID, e.Version
					}
				}
				if cs != "" && rng.IntN(2) == 0 {
					if rng.IntN(2) == 0 {
						must(b.cmd.Project(ctx, as((u+1)%len(users)), org, project, domain.ApproveChangeSet{ChangeSetID: cs, Version: version}))
					} else {
						must(b.cmd.Project(ctx, as((u+1)%len(users)), org, project, domain.RejectChangeSet{ChangeSetID: cs, Reason: "no"}))
					}
				}
			}
		case 18:
			// The instance settings: automatic agent upgrades off and on.
			must(b.cmd.Instance(ctx, as(0), domain.SetAgentAutoUpgrade{Enabled: rng.IntN(2) == 0}))
		case 19:
			// An agent upgrade: asked for, then reported done or failed by
			// the agent, or expired; or the agent connects again (with the
			// new version or the old one).
			srv := pick(servers)
			upg := id()
			if rng.IntN(2) == 0 {
				must(b.cmd.Server(ctx, agent, org, srv, domain.RecordConnection{ClusterID: cluster, ServerID: srv, Connected: true, Version: "1.0.0",
					Arch: "amd64", Upgradable: &yes, Session: fmt.Sprint("s", i)}))
			}
			must(b.cmd.Server(ctx, as(0), org, srv, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg, To: "1.5.0",
				Binaries: map[string]string{"amd64": "abc"}, Force: rng.IntN(3) == 0, Auto: rng.IntN(2) == 0, Lease: liveLease(b)}))
			switch rng.IntN(4) {
			case 0:
				must(b.cmd.Server(ctx, agent, org, srv, domain.ReportUpgradeResult{UpgradeID: upg, Version: "1.5.0", OK: true}))
			case 1:
				must(b.cmd.Server(ctx, agent, org, srv, domain.ReportUpgradeResult{UpgradeID: upg, Version: "1.0.0", Step: "download", Error: "checksum mismatch"}))
			case 2:
				must(b.cmd.Server(ctx, agent, org, srv, domain.ExpireUpgrade{UpgradeID: upg, Timeout: time.Second}))
			default:
				must(b.cmd.Server(ctx, agent, org, srv, domain.RecordConnection{ClusterID: cluster, ServerID: srv, Connected: true,
					Version: []string{"1.5.0", "1.0.0"}[rng.IntN(2)], Arch: "amd64", Upgradable: &yes, Session: fmt.Sprint("s", i)}))
			}
		case 20:
			// A staged rollout over some servers: started, then halted or
			// completed.
			roll := id()
			var over []domain.RolloutServer
			for _, srv := range servers {
				if rng.IntN(2) == 0 {
					over = append(over, domain.RolloutServer{ServerID: srv, ClusterID: cluster, Name: "agent"})
				}
			}
			must(b.cmd.Organisation(ctx, as(0), org, domain.StartRollout{OrgID: org, RolloutID: roll, Version: "1.5.0", Servers: over}))
			if rng.IntN(2) == 0 {
				must(b.cmd.Organisation(ctx, as(0), org, domain.HaltRollout{RolloutID: roll, ServerID: pick(servers), Reason: "the agent rolled the upgrade back"}))
			} else {
				must(b.cmd.Organisation(ctx, as(0), org, domain.CompleteRollout{RolloutID: roll}))
			}
		}
		// Deliver what was compiled, as the reactions would, so that stage
		// reports have deployments to land on.
		if rng.IntN(10) == 0 {
			b.catchUp(t)
			for _, dep := range deployments {
				var env, svc, rel string
				if err := b.pool.QueryRow(ctx, `SELECT environment_id::text, service_id::text, release_id::text FROM deployments WHERE id = $1`, dep).Scan(&env, &svc, &rel); err != nil {
					continue
				}
				must(b.cmd.Deployment(ctx, dispatch.Context{Actor: domain.System("reactions")}, org, dep, domain.DeliverDeployment{
					ProjectID: project, EnvironmentID: env, ServiceID: svc, ReleaseID: rel, ClusterID: cluster, Revision: 1}))
			}
		}
		// Live projections see the events in batches of random sizes.
		if rng.IntN(7) == 0 {
			b.catchUp(t)
		}
	}
	// Whatever the sequence reached, each kind of upgrade and rollout event
	// happens at least once: an upgrade done, one failed, one expired, a
	// rollout halted and one completed, and the settings changed.
	srv := id()
	connect := func(v string) {
		t.Helper()
		require.NoError(t, second(b.cmd.Server(ctx, agent, org, srv, domain.RecordConnection{ClusterID: cluster, ServerID: srv, Connected: true, Version: v,
			Arch: "amd64", Upgradable: &yes, Session: id()})))
	}
	jt := id()
	require.NoError(t, second(b.cmd.Cluster(ctx, as(0), org, cluster, domain.IssueJoinToken{TokenID: jt, TokenHash: "h", ExpiresAt: b.clock.Now().Add(time.Hour)})))
	require.NoError(t, second(b.cmd.Cluster(ctx, agent, org, cluster, domain.RegisterServer{ServerID: srv, Name: "agent-last", CredentialHash: "c", JoinTokenID: jt})))
	for _, end := range []domain.ServerCommand{
		domain.ReportUpgradeResult{Version: "1.5.0", OK: true},
		domain.ReportUpgradeResult{Version: "1.0.0", Step: "download", Error: "checksum mismatch"},
		domain.ExpireUpgrade{Timeout: time.Second},
	} {
		connect("1.0.0")
		upg := id()
		require.NoError(t, second(b.cmd.Server(ctx, as(0), org, srv, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg, To: "1.5.0",
			Binaries: map[string]string{"amd64": "abc"}, Force: true, Lease: liveLease(b)})))
		switch e := end.(type) {
		case domain.ReportUpgradeResult:
			e.UpgradeID = upg
			end = e
		case domain.ExpireUpgrade:
			e.UpgradeID = upg
			end = e
		}
		require.NoError(t, second(b.cmd.Server(ctx, agent, org, srv, end)))
		if r, ok := end.(domain.ReportUpgradeResult); ok && r.OK {
			connect("1.5.0") // the agent comes back with the new version: upgraded
		}
	}
	for _, halt := range []bool{true, false} {
		roll := id()
		require.NoError(t, second(b.cmd.Organisation(ctx, as(0), org, domain.StartRollout{OrgID: org, RolloutID: roll, Version: "1.5.0",
			Servers: []domain.RolloutServer{{ServerID: srv, ClusterID: cluster, Name: "agent-last"}}})))
		if halt {
			require.NoError(t, second(b.cmd.Organisation(ctx, as(0), org, domain.HaltRollout{RolloutID: roll, ServerID: srv, Reason: "the agent rolled the upgrade back"})))
		} else {
			require.NoError(t, second(b.cmd.Organisation(ctx, as(0), org, domain.CompleteRollout{RolloutID: roll})))
		}
	}
	auto := true
	for range 2 {
		auto = !auto
		require.NoError(t, second(b.cmd.Instance(ctx, as(0), domain.SetAgentAutoUpgrade{Enabled: auto})))
	}
	b.catchUp(t)
}

// second is the error of a command's result.
func second(_ dispatch.Result, err error) error { return err }

// checkHistoryRebuilds checks that what releases and revisions record (the
// changes) rebuilds what they stand for: every release's whole variable set,
// from the versioned rows of the release history, equals the fold of the
// release events; every revision's document, rebuilt, has the hash its
// event recorded (DocumentAt checks it) and equals the fold of the events.
func checkHistoryRebuilds(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	rows, err := b.pool.Query(ctx, `SELECT event_type, schema_version, payload FROM events
		WHERE event_type IN ('release.created', 'revision.compiled') ORDER BY position`)
	require.NoError(t, err)
	type key struct{ env, svc string }
	sets := map[key][]domain.Variable{}
	releases, revisions, diffs := 0, 0, 0
	for rows.Next() {
		var typ string
		var sv int16
		var payload []byte
		require.NoError(t, rows.Scan(&typ, &sv, &payload))
		ev, err := domain.Decode(typ, int(sv), payload)
		require.NoError(t, err)
		switch e := ev.(type) {
		case domain.ReleaseCreated:
			k := key{e.EnvironmentID, e.ServiceID}
			sets[k] = domain.ReleaseVariables(sets[k], e)
			got, err := projections.ReleaseVariables(ctx, b.pool, e.EnvironmentID, e.ServiceID, e.Number)
			require.NoError(t, err)
			want := sets[k]
			if len(want) == 0 {
				want = nil
			}
			require.Equal(t, want, got, "release %d of %s/%s", e.Number, e.EnvironmentID, e.ServiceID)
			releases++
		case domain.RevisionCompiled:
			rev, err := projections.RevisionNumber(ctx, b.pool, e.EnvironmentID, e.Number)
			require.NoError(t, err, "revision %d of %s", e.Number, e.EnvironmentID)
			require.Equal(t, e.Hash, rev.Hash)
			if !e.Whole() && e.Base > 0 {
				diffs++
			}
			revisions++
		}
	}
	require.NoError(t, rows.Err())
	require.NotZero(t, releases, "the sequence made releases")
	require.NotZero(t, diffs, "the sequence made revisions that record a change")
	var rollbacks int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM deployments WHERE rollback`).Scan(&rollbacks))
	require.NotZero(t, rollbacks, "the sequence rolled back to earlier releases")
	t.Logf("%d releases, %d rollbacks and %d revisions (%d of them changes) rebuilt", releases, rollbacks, revisions, diffs)
}
