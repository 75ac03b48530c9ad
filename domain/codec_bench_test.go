package domain_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/projections"
)

// storedEvent is an event as the store holds it.
type storedEvent struct {
	typ     string
	version int
	payload []byte
}

// replayMix makes n stored events of the mix that the rebuild benchmark
// replays (generate in cmd/nebula-bench/rebuild.go): a few organisations,
// projects, environments and services, then cycles of a variable update, its
// release, a deployment's three events and the environment's revision, which
// records the whole document first and then the changed objects.
func replayMix(tb testing.TB, n int) []storedEvent {
	tb.Helper()
	var out []storedEvent
	add := func(e domain.Event) {
		typ, v, payload, err := domain.Encode(e)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, storedEvent{typ, v, payload})
	}
	user := uuid.NewString()
	add(domain.UserRegistered{UserID: user, Email: "ops@example.com", PasswordHash: "x", InstanceAdmin: true})
	type env struct{ id string }
	type project struct {
		id, org string
		envs    []env
		svcs    []string
	}
	var projects []project
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 2, Command: []string{"./server"}}}
	for o := 0; o < 10; o++ {
		org := uuid.NewString()
		add(domain.OrganisationCreated{OrgID: org, Name: fmt.Sprintf("org-%d", o)})
		add(domain.MemberAdded{OrgID: org, UserID: user, Role: domain.RoleOwner})
		cluster := uuid.NewString()
		add(domain.ClusterCreated{ClusterID: cluster, OrgID: org, Name: "eu-1"})
		for p := 0; p < 10; p++ {
			gp := project{id: uuid.NewString(), org: org}
			add(domain.ProjectCreated{ProjectID: gp.id, OrgID: org, Name: fmt.Sprintf("project-%d", p)})
			for _, name := range []string{"staging", "production"} {
				e := env{id: uuid.NewString()}
				gp.envs = append(gp.envs, e)
				add(domain.EnvironmentCreated{EnvironmentID: e.id, Name: name, ClusterID: cluster})
			}
			for s := 0; s < 10; s++ {
				svc := uuid.NewString()
				gp.svcs = append(gp.svcs, svc)
				add(domain.ServiceCreated{ServiceID: svc, Name: fmt.Sprintf("svc-%d", s), Source: domain.Source{Image: "img"}, Processes: web})
			}
			projects = append(projects, gp)
		}
	}
	snap := compiler.Snapshot{OrgID: projects[0].org, OrgName: "org-0", ProjectID: projects[0].id, ProjectName: "project-0",
		EnvironmentID: projects[0].envs[0].id, EnvironmentName: "staging"}
	for i := 0; i < 5; i++ {
		snap.Services = append(snap.Services, compiler.Service{ID: projects[0].svcs[i], Name: fmt.Sprintf("svc-%d", i),
			Release: &compiler.Release{ID: uuid.NewString(), Number: 1, Image: "registry.example.com/a@sha256:" + fmt.Sprintf("%064d", i), Processes: web,
				Variables: []domain.Variable{{Name: "LOG_LEVEL", Value: "info"}, {Name: "PORT", Value: "8080"}}}})
	}
	objs, err := projections.SplitDocument(compiler.Compile(snap))
	if err != nil {
		tb.Fatal(err)
	}
	var whole []domain.RevisionObject
	for _, k := range slices.Sorted(maps.Keys(objs)) {
		whole = append(whole, domain.RevisionObject{Key: k, Value: objs[k]})
	}
	shellKey := "service/" + projects[0].svcs[0]
	varKey := "variable/" + projects[0].svcs[0] + "/LOG_LEVEL"
	releases := map[string]int{}
	revisions := map[string]int{}
	for i := 0; len(out) < n; i++ {
		gp := projects[i%len(projects)]
		e := gp.envs[i%2]
		svc := gp.svcs[i%len(gp.svcs)]
		vars := []domain.Variable{{Name: "LOG_LEVEL", Value: fmt.Sprint("v", i)}, {Name: "PORT", Value: "8080"}}
		rel, dep := uuid.NewString(), uuid.NewString()
		add(domain.VariablesSet{EnvironmentID: e.id, ServiceID: svc, Variables: vars})
		releases[e.id+svc]++
		number := releases[e.id+svc]
		relVars := vars
		if number > 1 {
			relVars = vars[:1]
		}
		add(domain.ReleaseCreated{ReleaseID: rel, EnvironmentID: e.id, ServiceID: svc, Number: number, Base: number - 1,
			Image: "registry.example.com/a@sha256:" + fmt.Sprintf("%064d", i), Processes: web, Variables: relVars, Reason: "variables"})
		add(domain.DeploymentRequested{DeploymentID: dep, ReleaseID: rel, EnvironmentID: e.id, ServiceID: svc})
		add(domain.DeploymentDelivering{DeploymentID: dep})
		add(domain.DeploymentSucceeded{DeploymentID: dep})
		revisions[e.id]++
		rc := domain.RevisionCompiled{EnvironmentID: e.id, ProjectID: gp.id, Number: revisions[e.id], Hash: fmt.Sprintf("sha256:%064x", i), Set: whole}
		if rc.Number > 1 {
			rc.Base = rc.Number - 1
			rc.Set = []domain.RevisionObject{{Key: shellKey, Value: objs[shellKey]},
				{Key: varKey, Value: json.RawMessage(fmt.Sprintf(`{"name":"LOG_LEVEL","value":"v%d"}`, i))}}
		}
		add(rc)
	}
	return out[:n]
}

// mixSize is how many events the decode benchmarks cycle through: the
// rebuild benchmark's first 60,000, where the setup and the whole documents
// weigh more than in its 1,000,000 (so the figure errs on the slow side).
const mixSize = 60_000

// BenchmarkDecodeReplayMix decodes the rebuild's events with domain.Decode;
// an op is one event.
func BenchmarkDecodeReplayMix(b *testing.B) {
	mix := replayMix(b, mixSize)
	var bytes int64
	for _, e := range mix {
		bytes += int64(len(e.payload))
	}
	b.SetBytes(bytes / int64(len(mix)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := mix[i%len(mix)]
		if _, err := domain.Decode(e.typ, e.version, e.payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeByType decodes each event type of the mix alone.
func BenchmarkDecodeByType(b *testing.B) {
	mix := replayMix(b, mixSize)
	byType := map[string][]storedEvent{}
	for _, e := range mix {
		byType[e.typ] = append(byType[e.typ], e)
	}
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		evs := byType[typ]
		if len(evs) < 100 {
			continue // the setup's few events: not what a replay spends on
		}
		b.Run(typ, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				e := evs[i%len(evs)]
				if _, err := domain.Decode(e.typ, e.version, e.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
