package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/projections"
)

// generator makes events of the product's real mix, encoded by the domain.
type generator struct {
	rows     [][]any
	versions map[string]int
	at       time.Time
}

func (g *generator) add(stream, org string, actor domain.Actor, e domain.Event) {
	typ, v, payload, err := domain.Encode(e)
	if err != nil {
		panic(err)
	}
	g.versions[stream]++
	g.at = g.at.Add(time.Millisecond)
	g.rows = append(g.rows, []any{stream, int32(g.versions[stream]), nullUUID(org), typ, int16(v), string(payload),
		string(actor.Kind), actor.ID, actor.Name, "bench", g.at})
}

func nullUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

type genEnv struct{ id, name string }
type genProject struct {
	id, org string
	envs    []genEnv
	svcs    []string
}

func generate(n int) [][]any {
	g := &generator{versions: map[string]int{}, at: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	user := uuid.NewString()
	actor := domain.Actor{Kind: domain.ActorUser, ID: user, Name: "ops@example.com"}
	g.add(domain.UserStream(user), "", actor, domain.UserRegistered{UserID: user, Email: "ops@example.com", PasswordHash: "x", InstanceAdmin: true})
	var projects []genProject
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 2, Command: []string{"./server"}}}
	for o := 0; o < 10; o++ {
		org := uuid.NewString()
		g.add(domain.OrgStream(org), org, actor, domain.OrganisationCreated{OrgID: org, Name: fmt.Sprintf("org-%d", o)})
		g.add(domain.OrgStream(org), org, actor, domain.MemberAdded{OrgID: org, UserID: user, Role: domain.RoleOwner})
		cluster := uuid.NewString()
		g.add(domain.ClusterStream(cluster), org, actor, domain.ClusterCreated{ClusterID: cluster, OrgID: org, Name: "eu-1"})
		for p := 0; p < 10; p++ {
			gp := genProject{id: uuid.NewString(), org: org}
			ps := domain.ProjectStream(gp.id)
			g.add(ps, org, actor, domain.ProjectCreated{ProjectID: gp.id, OrgID: org, Name: fmt.Sprintf("project-%d", p)})
			for _, e := range []string{"staging", "production"} {
				env := genEnv{id: uuid.NewString(), name: e}
				gp.envs = append(gp.envs, env)
				g.add(ps, org, actor, domain.EnvironmentCreated{EnvironmentID: env.id, Name: e, ClusterID: cluster})
			}
			for s := 0; s < 10; s++ {
				svc := uuid.NewString()
				gp.svcs = append(gp.svcs, svc)
				g.add(ps, org, actor, domain.ServiceCreated{ServiceID: svc, Name: fmt.Sprintf("svc-%d", s), Source: domain.Source{Image: "img"}, Processes: web})
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
		panic(err)
	}
	var whole []domain.RevisionObject
	for _, k := range slices.Sorted(maps.Keys(objs)) {
		whole = append(whole, domain.RevisionObject{Key: k, Value: objs[k]})
	}
	shellKey := "service/" + projects[0].svcs[0]
	varKey := "variable/" + projects[0].svcs[0] + "/LOG_LEVEL"
	releases := map[string]int{}
	system := domain.System("compiler")
	for i := 0; len(g.rows) < n; i++ {
		gp := projects[i%len(projects)]
		env := gp.envs[i%2]
		svc := gp.svcs[i%len(gp.svcs)]
		ps := domain.ProjectStream(gp.id)
		vars := []domain.Variable{{Name: "LOG_LEVEL", Value: fmt.Sprint("v", i)}, {Name: "PORT", Value: "8080"}}
		rel, dep := uuid.NewString(), uuid.NewString()
		g.add(ps, gp.org, actor, domain.VariablesSet{EnvironmentID: env.id, ServiceID: svc, Variables: vars})
		// Releases record the variables that changed since the one before.
		releases[env.id+svc]++
		number := releases[env.id+svc]
		relVars := vars
		if number > 1 {
			relVars = vars[:1]
		}
		g.add(ps, gp.org, actor, domain.ReleaseCreated{ReleaseID: rel, EnvironmentID: env.id, ServiceID: svc, Number: number, Base: number - 1,
			Image: "registry.example.com/a@sha256:" + fmt.Sprintf("%064d", i), Processes: web, Variables: relVars, Reason: "variables"})
		g.add(ps, gp.org, actor, domain.DeploymentRequested{DeploymentID: dep, ReleaseID: rel, EnvironmentID: env.id, ServiceID: svc})
		g.add(ps, gp.org, actor, domain.DeploymentDelivering{DeploymentID: dep})
		g.add(ps, gp.org, actor, domain.DeploymentSucceeded{DeploymentID: dep})
		rs := domain.RevisionStream(env.id)
		rc := domain.RevisionCompiled{EnvironmentID: env.id, ProjectID: gp.id, Number: g.versions[rs] + 1, Hash: fmt.Sprintf("sha256:%064x", i), Set: whole}
		if rc.Number > 1 {
			rc.Base = rc.Number - 1
			rc.Set = []domain.RevisionObject{{Key: shellKey, Value: objs[shellKey]},
				{Key: varKey, Value: json.RawMessage(fmt.Sprintf(`{"name":"LOG_LEVEL","value":"v%d"}`, i))}}
		}
		g.add(rs, gp.org, system, rc)
	}
	return g.rows[:n]
}

func benchRebuild(ctx context.Context, pool *pgxpool.Pool, f flags) (result, error) {
	rows := generate(f.events)
	cols := []string{"stream_id", "stream_version", "org_id", "event_type", "schema_version", "payload", "actor_kind", "actor_id", "actor_name", "request_id", "occurred_at"}
	if _, err := pool.CopyFrom(ctx, pgx.Identifier{"events"}, cols, pgx.CopyFromRows(rows)); err != nil {
		return result{}, fmt.Errorf("loading events: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE events`); err != nil {
		return result{}, err
	}
	// The live projection stands at the last event: the rebuild reads them all.
	if _, err := pool.Exec(ctx, `INSERT INTO subscription_checkpoints (name, transaction_id, position, events)
		SELECT $1, max(transaction_id), max(position), count(*) FROM events`, projections.SubscriptionName); err != nil {
		return result{}, err
	}
	var reads, rebuilds []float64
	for run := 0; run < f.runs; run++ {
		start := time.Now()
		var after eventstore.Cursor
		read := 0
		for {
			evs, err := eventstore.ReadAll(ctx, pool, after, 10_000)
			if err != nil {
				return result{}, err
			}
			if len(evs) == 0 {
				break
			}
			read += len(evs)
			after = evs[len(evs)-1].Cursor()
		}
		reads = append(reads, float64(read)/time.Since(start).Seconds())
		start = time.Now()
		n, err := projections.Rebuild(ctx, pool, 10_000)
		if err != nil {
			return result{}, fmt.Errorf("rebuilding: %w", err)
		}
		rebuilds = append(rebuilds, float64(n)/time.Since(start).Seconds())
	}
	m := median(rebuilds)
	return result{
		name:     fmt.Sprintf("projection rebuild from %d events (events/s)", f.events),
		measured: fmt.Sprintf("%.0f (runs %s)", m, spread(rebuilds)),
		baseline: fmt.Sprintf("%.0f reading the events only (runs %s)", median(reads), spread(reads)),
		ratio:    fmt.Sprintf("%.0f %%", m/median(reads)*100),
		target:   "≥ 100,000 events/s",
		verdict:  verdict(m >= 100_000, fmt.Sprintf("%.0f %% of the target", m/1000)),
	}, nil
}
