// Package eventmix makes events of the product's real mix, for the rebuild
// benchmark and the decoder's benchmarks: a few organisations, projects,
// environments and services, then cycles of a variable update, its
// release, a deployment's three events and the environment's revision,
// which records the whole document first and then the changed objects.
package eventmix

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/projections"
)

// Add receives each event of the mix, with its stream, organisation ("" for
// none) and actor.
type Add func(stream, org string, actor domain.Actor, e domain.Event)

type env struct{ id, name string }

type project struct {
	id, org string
	envs    []env
	svcs    []string
}

// Generate calls add for at least n events of the mix, in order (the last
// cycle may add a few more than n: callers keep the first n).
func Generate(n int, add Add) error {
	count := 0
	emit := func(stream, org string, actor domain.Actor, e domain.Event) {
		count++
		add(stream, org, actor, e)
	}
	user := uuid.NewString()
	actor := domain.Actor{Kind: domain.ActorUser, ID: user, Name: "ops@example.com"}
	emit(domain.UserStream(user), "", actor, domain.UserRegistered{UserID: user, Email: "ops@example.com", PasswordHash: "x", InstanceAdmin: true})
	var projects []project
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 2, Command: []string{"./server"}}}
	for o := 0; o < 10; o++ {
		org := uuid.NewString()
		emit(domain.OrgStream(org), org, actor, domain.OrganisationCreated{OrgID: org, Name: fmt.Sprintf("org-%d", o)})
		emit(domain.OrgStream(org), org, actor, domain.MemberAdded{OrgID: org, UserID: user, Role: domain.RoleOwner})
		cluster := uuid.NewString()
		emit(domain.ClusterStream(cluster), org, actor, domain.ClusterCreated{ClusterID: cluster, OrgID: org, Name: "eu-1"})
		for p := 0; p < 10; p++ {
			gp := project{id: uuid.NewString(), org: org}
			ps := domain.ProjectStream(gp.id)
			emit(ps, org, actor, domain.ProjectCreated{ProjectID: gp.id, OrgID: org, Name: fmt.Sprintf("project-%d", p)})
			for _, e := range []string{"staging", "production"} {
				en := env{id: uuid.NewString(), name: e}
				gp.envs = append(gp.envs, en)
				emit(ps, org, actor, domain.EnvironmentCreated{EnvironmentID: en.id, Name: e, ClusterID: cluster})
			}
			for s := 0; s < 10; s++ {
				svc := uuid.NewString()
				gp.svcs = append(gp.svcs, svc)
				emit(ps, org, actor, domain.ServiceCreated{ServiceID: svc, Name: fmt.Sprintf("svc-%d", s), Source: domain.Source{Image: "img"}, Processes: web})
			}
			projects = append(projects, gp)
		}
	}
	// A representative document: an environment of five services.
	snap := compiler.Snapshot{OrgID: projects[0].org, OrgName: "org-0", ProjectID: projects[0].id, ProjectName: "project-0",
		EnvironmentID: projects[0].envs[0].id, EnvironmentName: "staging"}
	for i := 0; i < 5; i++ {
		snap.Services = append(snap.Services, compiler.Service{ID: projects[0].svcs[i], Name: fmt.Sprintf("svc-%d", i),
			Release: &compiler.Release{ID: uuid.NewString(), Number: 1, Image: "registry.example.com/a@sha256:" + fmt.Sprintf("%064d", i), Processes: web,
				Variables: []domain.Variable{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"}}}})
	}
	// Revisions record what changed (revision.compiled, schema 2): the first
	// of an environment every object of the document, the next ones the
	// service (its new release) and the variable that changed.
	objs, err := projections.SplitDocument(compiler.Compile(snap))
	if err != nil {
		return err
	}
	var whole []domain.RevisionObject
	for _, k := range slices.Sorted(maps.Keys(objs)) {
		whole = append(whole, domain.RevisionObject{Key: k, Value: objs[k]})
	}
	shellKey := "service/" + projects[0].svcs[0]
	varKey := "variable/" + projects[0].svcs[0] + "/LOG_LEVEL"
	releases, revisions := map[string]int{}, map[string]int{}
	system := domain.System("compiler")
	for i := 0; count < n; i++ {
		gp := projects[i%len(projects)]
		en := gp.envs[i%2]
		svc := gp.svcs[i%len(gp.svcs)]
		ps := domain.ProjectStream(gp.id)
		vars := []domain.Variable{{Name: "LOG_LEVEL", Value: fmt.Sprint("v", i)}, {Name: "PORT", Value: "8080"}}
		rel, dep := uuid.NewString(), uuid.NewString()
		emit(ps, gp.org, actor, domain.VariablesSet{EnvironmentID: en.id, ServiceID: svc, Variables: vars})
		// Releases record the variables that changed since the one before.
		releases[en.id+svc]++
		number := releases[en.id+svc]
		relVars := vars
		if number > 1 {
			relVars = vars[:1]
		}
		emit(ps, gp.org, actor, domain.ReleaseCreated{ReleaseID: rel, EnvironmentID: en.id, ServiceID: svc, Number: number, Base: number - 1,
			Image: "registry.example.com/a@sha256:" + fmt.Sprintf("%064d", i), Processes: web, Variables: relVars, Reason: "variables"})
		emit(ps, gp.org, actor, domain.DeploymentRequested{DeploymentID: dep, ReleaseID: rel, EnvironmentID: en.id, ServiceID: svc})
		emit(ps, gp.org, actor, domain.DeploymentDelivering{DeploymentID: dep})
		emit(ps, gp.org, actor, domain.DeploymentSucceeded{DeploymentID: dep})
		revisions[en.id]++
		rc := domain.RevisionCompiled{EnvironmentID: en.id, ProjectID: gp.id, Number: revisions[en.id], Hash: fmt.Sprintf("sha256:%064x", i), Set: whole}
		if rc.Number > 1 {
			rc.Base = rc.Number - 1
			rc.Set = []domain.RevisionObject{{Key: shellKey, Value: objs[shellKey]},
				{Key: varKey, Value: json.RawMessage(fmt.Sprintf(`{"name":"LOG_LEVEL","value":"v%d"}`, i))}}
		}
		emit(domain.RevisionStream(en.id), gp.org, system, rc)
	}
	return nil
}
