package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/projections"
)

// Many environments compiled in one batch (their snapshots read set-wise,
// compiled in parallel, their revisions appended in one round trip) get
// exactly the revision each would get alone: nothing of one environment (a
// variable, a domain, a release, a secret) leaks into another, and a
// project-wide change makes a revision in every environment of that project
// and none elsewhere.
func TestBatchCompileEqualsCompilingEachAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	alice := id()
	as := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice@example.com"}, Person: alice, RequestID: "req-batch"}
	must := func(_ dispatch.Result, err error) {
		t.Helper()
		require.NoError(t, err)
	}
	org := id()
	must(b.cmd.User(ctx, as, alice, domain.RegisterUser{UserID: alice, Email: "alice@example.com", PasswordHash: "$2a$x", InstanceAdmin: true}))
	must(b.cmd.Organisation(ctx, as, org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: alice}))
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}
	sealed, err := b.sealer.Seal(ctx, org, []byte("s3cret"))
	require.NoError(t, err)

	type project struct {
		id       string
		envs     []string
		services []string
	}
	var projects []project
	for p, size := range []int{30, 7} {
		pr := project{id: id()}
		must(b.cmd.Project(ctx, as, org, pr.id, domain.CreateProject{ProjectID: pr.id, OrgID: org, Name: fmt.Sprintf("p%d", p)}))
		for s := range 2 {
			svc := id()
			pr.services = append(pr.services, svc)
			must(b.cmd.Project(ctx, as, org, pr.id, domain.CreateService{ServiceID: svc, Name: fmt.Sprintf("s%d", s), Source: domain.Source{Image: "img:1"}, Processes: web}))
		}
		for e := range size {
			cluster, env := id(), id()
			must(b.cmd.Cluster(ctx, as, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: fmt.Sprintf("c%d-%d", p, e),
				JoinToken: domain.IssueJoinToken{TokenID: id(), TokenHash: "hash", ExpiresAt: b.clock.Now().Add(24 * time.Hour)}}))
			must(b.cmd.Project(ctx, as, org, pr.id, domain.CreateEnvironment{EnvironmentID: env, Name: fmt.Sprintf("e%d", e), ClusterID: cluster}))
			pr.envs = append(pr.envs, env)
			must(b.cmd.Project(ctx, as, org, pr.id, domain.SetVariables{EnvironmentID: env, Variables: []domain.Variable{{Name: "WHO", Value: env}}}))
			vars := []domain.Variable{{Name: "PEER", Value: "${{ s1.WHO }}-" + env}}
			if e%3 == 0 {
				vars = append(vars, domain.Variable{Name: "TOKEN", Secret: &sealed})
			}
			must(b.cmd.Project(ctx, as, org, pr.id, domain.SetVariables{EnvironmentID: env, ServiceID: pr.services[0], Variables: vars}))
			if e%2 == 0 {
				must(b.cmd.Project(ctx, as, org, pr.id, domain.AddDomain{EnvironmentID: env, ServiceID: pr.services[0], Host: fmt.Sprintf("e%d-p%d.example.com", e, p)}))
			}
			for _, svc := range pr.services {
				must(b.cmd.Project(ctx, as, org, pr.id, domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: id(), DeploymentID: id(), Image: digestOf(fmt.Sprintf("e%d", e))}))
			}
		}
		projects = append(projects, pr)
	}
	deleted := projects[0].envs[5]
	must(b.cmd.Project(ctx, as, org, projects[0].id, domain.DeleteEnvironment{EnvironmentID: deleted}))
	b.catchUp(t)

	check := func() map[string]int {
		t.Helper()
		numbers := map[string]int{}
		for _, pr := range projects {
			for _, env := range pr.envs {
				rev, err := projections.RevisionNumber(ctx, b.pool, env, 0)
				require.NoError(t, err, env)
				snap, err := projections.LoadSnapshot(ctx, b.pool, env, b.sealer)
				require.NoError(t, err)
				alone := compiler.Compile(snap)
				want, err := alone.Hash()
				require.NoError(t, err)
				require.Equal(t, want, rev.Hash, "environment %s: the recorded revision is not what it compiles to alone", env)
				got, err := rev.Document.Hash()
				require.NoError(t, err)
				require.Equal(t, want, got, "environment %s: the document rebuilt from the revisions differs", env)
				// What the agents are given: from this process's compile
				// when it holds the revision, the same document.
				given, err := projections.DocumentForDelivery(ctx, b.pool, env, rev.Number)
				require.NoError(t, err)
				require.Equal(t, rev.Hash, given.Hash)
				gh, err := given.Document.Hash()
				require.NoError(t, err)
				require.Equal(t, want, gh, "environment %s: the document given for delivery differs", env)
				require.True(t, given.CompiledAt.Equal(rev.CompiledAt), "%s: compiled at %s, recorded %s", env, given.CompiledAt, rev.CompiledAt)
				if env == deleted {
					require.Empty(t, rev.Document.Services)
				}
				for _, s := range rev.Document.Services {
					for _, v := range s.Variables {
						if v.Name == "WHO" {
							require.Equal(t, env, v.Value, "a variable of another environment leaked in")
						}
					}
				}
				numbers[env] = rev.Number
			}
		}
		return numbers
	}
	before := check()

	// One change to the project touches its 30 environments in one batch.
	must(b.cmd.Project(ctx, as, org, projects[0].id, domain.DeleteService{ServiceID: projects[0].services[1]}))
	b.catchUp(t)
	after := check()
	for _, env := range projects[0].envs {
		if env != deleted {
			require.Equal(t, before[env]+1, after[env], "environment %s of the changed project has no new revision", env)
		}
	}
	require.Equal(t, before[deleted], after[deleted], "a deleted environment stays empty")
	for _, env := range projects[1].envs {
		require.Equal(t, before[env], after[env], "environment %s of another project got a revision", env)
	}
	rep, err := projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "%+v", rep)
}
