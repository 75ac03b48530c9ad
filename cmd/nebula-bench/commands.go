package main

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
)

// benchDeployLatency measures a deploy command's latency (load, decide,
// append) in a project with 100,000 earlier events against one with 100:
// command handling must not grow with a stream's history.
func benchDeployLatency(ctx context.Context, pool *pgxpool.Pool, runs int) (result, error) {
	store := eventstore.New(pool, nil)
	h, err := dispatch.New(dispatch.Config{Store: store})
	if err != nil {
		return result{}, err
	}
	measure := func(history int) (float64, error) {
		p, err := projectWithHistory(ctx, store, history)
		if err != nil {
			return 0, err
		}
		// The first command after a bulk load folds the whole stream once and
		// keeps a snapshot; every later one starts from a snapshot.
		if _, err := p.deploy(ctx, h); err != nil {
			return 0, err
		}
		var ms []float64
		for i := 0; i < runs; i++ {
			d, err := p.deploy(ctx, h)
			if err != nil {
				return 0, err
			}
			ms = append(ms, float64(d.Microseconds())/1000)
		}
		sort.Float64s(ms)
		return ms[len(ms)/2], nil
	}
	log.Printf("deploy latency: a project with 100 earlier events")
	small, err := measure(100)
	if err != nil {
		return result{}, err
	}
	log.Printf("deploy latency: a project with 100,000 earlier events")
	big, err := measure(100_000)
	if err != nil {
		return result{}, err
	}
	ratio := big / small
	return result{
		name:     "deploy command latency, 100,000 earlier events in the project (median ms)",
		measured: fmt.Sprintf("%.2f ms", big),
		baseline: fmt.Sprintf("%.2f ms with 100 earlier events", small),
		ratio:    fmt.Sprintf("%.2f×", ratio),
		target:   "≤ 1.5×",
		verdict:  verdict(ratio <= 1.5, fmt.Sprintf("%.2f× over", ratio-1.5)),
	}, nil
}

type benchProject struct {
	org, id, env, svc string
	actor             dispatch.Context
	n                 int
}

func (p *benchProject) deploy(ctx context.Context, h *dispatch.Handler) (time.Duration, error) {
	p.n++
	cmd := domain.Deploy{EnvironmentID: p.env, ServiceID: p.svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
		Image: fmt.Sprintf("registry.example.com/api@sha256:%064x", p.n)}
	start := time.Now()
	_, err := h.Project(ctx, p.actor, p.org, p.id, cmd)
	return time.Since(start), err
}

// projectWithHistory makes a project whose stream holds about events events:
// deploys and variable changes of a few services, decided by the real domain
// and appended a thousand events at a time.
func projectWithHistory(ctx context.Context, store *eventstore.Store, events int) (*benchProject, error) {
	p := &benchProject{org: uuid.NewString(), id: uuid.NewString(), env: uuid.NewString()}
	user := uuid.NewString()
	p.actor = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: user, Name: "bench@example.com"}, Person: user}
	state := domain.NewProject()
	version := 0
	var pendingRecords []eventstore.Record
	now := time.Now().UTC()
	flush := func() error {
		if len(pendingRecords) == 0 {
			return nil
		}
		_, err := store.Append(ctx, eventstore.AppendRequest{StreamID: domain.ProjectStream(p.id), ExpectedVersion: version, OrgID: p.org,
			Actor: p.actor.Actor, RequestID: "bench", OccurredAt: now, Records: pendingRecords})
		version += len(pendingRecords)
		pendingRecords = nil
		return err
	}
	decide := func(cmd domain.ProjectCommand, i int) error {
		dec, err := state.Decide(cmd, domain.Meta{Actor: p.actor.Actor, Person: p.actor.Person, CommandID: fmt.Sprintf("bench-%d", i), Now: now})
		if err != nil {
			return err
		}
		for _, e := range dec.Events {
			state.Apply(e)
			typ, v, payload, err := domain.Encode(e)
			if err != nil {
				return err
			}
			pendingRecords = append(pendingRecords, eventstore.Record{Type: typ, SchemaVersion: v, Payload: payload})
		}
		if len(pendingRecords) >= 1000 {
			return flush()
		}
		return nil
	}
	cluster := uuid.NewString()
	if err := decide(domain.CreateProject{ProjectID: p.id, OrgID: p.org, Name: "shop"}, 0); err != nil {
		return nil, err
	}
	// The claim of the project's name is not needed here: the bench appends
	// the creation as an ordinary event.
	if err := decide(domain.CreateEnvironment{EnvironmentID: p.env, Name: "production", ClusterID: cluster}, 1); err != nil {
		return nil, err
	}
	var services []string
	for s := 0; s < 5; s++ {
		id := uuid.NewString()
		services = append(services, id)
		if err := decide(domain.CreateService{ServiceID: id, Name: fmt.Sprintf("svc-%d", s), Source: domain.Source{Image: "api:1"},
			Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}}, 2+s); err != nil {
			return nil, err
		}
	}
	p.svc = services[0]
	for i := 0; version+len(pendingRecords) < events; i++ {
		svc := services[i%len(services)]
		var cmd domain.ProjectCommand
		if i%4 == 3 {
			cmd = domain.SetVariables{EnvironmentID: p.env, ServiceID: svc, Variables: []domain.Variable{{Name: "BUILD", Value: fmt.Sprint(i)}}}
		} else {
			cmd = domain.Deploy{EnvironmentID: p.env, ServiceID: svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
				Image: fmt.Sprintf("registry.example.com/svc@sha256:%064x", i)}
		}
		if err := decide(cmd, 100+i); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return p, nil
}
