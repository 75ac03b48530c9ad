package projections_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// One-off recorder (issue 16, item 6): the change-set events that the code
// before change-set payloads wrote (schema 1), with the read model and the
// approval outcomes they give. It is removed once the files are committed.

const (
	rAlice   = "00000000-0000-4000-8000-0000000000a1"
	rBob     = "00000000-0000-4000-8000-0000000000b2"
	rCarol   = "00000000-0000-4000-8000-0000000000c3"
	rDave    = "00000000-0000-4000-8000-0000000000d4"
	rErin    = "00000000-0000-4000-8000-0000000000e5"
	rFrank   = "00000000-0000-4000-8000-0000000000f6"
	rOrg     = "00000000-0000-4000-8000-000000000001"
	rCluster = "00000000-0000-4000-8000-000000000002"
	rProject = "00000000-0000-4000-8000-000000000003"
	rStaging = "00000000-0000-4000-8000-000000000004"
	rProd    = "00000000-0000-4000-8000-000000000005"
	rAPI     = "00000000-0000-4000-8000-000000000006"
	rWorker  = "00000000-0000-4000-8000-000000000007"
	rBuild   = "00000000-0000-4000-8000-000000000008"
)

func rid(n int) string { return fmt.Sprintf("00000000-0000-4000-9000-%012d", n) }

type recAppend struct {
	Stream          string       `json:"stream"`
	ExpectedVersion int          `json:"expectedVersion"`
	OrgID           string       `json:"orgId,omitempty"`
	Actor           domain.Actor `json:"actor"`
	RequestID       string       `json:"requestId,omitempty"`
	OccurredAt      time.Time    `json:"occurredAt"`
	Records         []recRecord  `json:"records"`
}

type recRecord struct {
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schemaVersion"`
	Payload       json.RawMessage `json:"payload"`
}

type recDecision struct {
	ChangeSet string      `json:"changeSet"`
	Command   string      `json:"command"`
	Person    string      `json:"person"`
	CommandID string      `json:"commandId"`
	Version   int         `json:"version,omitempty"`
	At        time.Time   `json:"at"`
	Events    []recRecord `json:"events"`
	Error     string      `json:"error,omitempty"`
}

func TestRecordChangeSetsSchema1(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	n := 0
	tick := func() {
		n++
		b.clock.mu.Lock()
		b.clock.t = at.Add(time.Duration(n) * time.Hour)
		b.clock.mu.Unlock()
	}
	as := func(person string) dispatch.Context {
		tick()
		return dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: person, Name: person[len(person)-2:] + "@example.com"}, Person: person, CommandID: rid(n)}
	}
	must := func(_ dispatch.Result, err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(b.cmd.User(ctx, as(rAlice), rAlice, domain.RegisterUser{UserID: rAlice, Email: "a1@example.com", PasswordHash: "$2a$x"}))
	must(b.cmd.Organisation(ctx, as(rAlice), rOrg, domain.CreateOrganisation{OrgID: rOrg, Name: "acme", Owner: rAlice}))
	must(b.cmd.Cluster(ctx, as(rAlice), rOrg, rCluster, domain.CreateCluster{ClusterID: rCluster, OrgID: rOrg, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: rid(900), TokenHash: "hash", ExpiresAt: at.Add(24 * time.Hour)}}))
	proj := func(c dispatch.Context, cmd domain.ProjectCommand) dispatch.Result {
		t.Helper()
		res, err := b.cmd.Project(ctx, c, rOrg, rProject, cmd)
		require.NoError(t, err)
		return res
	}
	web := []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}
	proj(as(rAlice), domain.CreateProject{ProjectID: rProject, OrgID: rOrg, Name: "shop"})
	proj(as(rAlice), domain.CreateEnvironment{EnvironmentID: rStaging, Name: "staging", ClusterID: rCluster})
	proj(as(rAlice), domain.CreateEnvironment{EnvironmentID: rProd, Name: "production", ClusterID: rCluster})
	proj(as(rAlice), domain.CreateService{ServiceID: rAPI, Name: "api", Source: domain.Source{Image: "api:1"}, Processes: web})
	proj(as(rAlice), domain.CreateService{ServiceID: rWorker, Name: "worker", Source: domain.Source{Image: "worker:1"}, Processes: web})
	// Production before it is protected: variables, two releases of api, a
	// release of worker, a domain.
	proj(as(rAlice), domain.SetVariables{EnvironmentID: rProd, ServiceID: rAPI, Variables: []domain.Variable{{Name: "OLD", Value: "1"}, {Name: "KEEP", Value: "x"}}})
	proj(as(rAlice), domain.Deploy{EnvironmentID: rProd, ServiceID: rAPI, ReleaseID: rid(101), DeploymentID: rid(201), Image: digestOf("api1")})
	proj(as(rAlice), domain.Deploy{EnvironmentID: rProd, ServiceID: rAPI, ReleaseID: rid(102), DeploymentID: rid(202), Image: digestOf("api22")})
	proj(as(rAlice), domain.Deploy{EnvironmentID: rProd, ServiceID: rWorker, ReleaseID: rid(103), DeploymentID: rid(203), Image: digestOf("worker1")})
	proj(as(rAlice), domain.AddDomain{EnvironmentID: rProd, ServiceID: rAPI, Host: "old.example.com"})
	proj(as(rAlice), domain.UpdateEnvironment{EnvironmentID: rProd, ClusterID: rCluster, Protected: true})

	// Change sets: alice's holds every command kind, one after another.
	secret := domain.SealedValue{DataKeyID: rid(950), Ciphertext: []byte("sealed-not-a-real-seal")}
	cs := map[string]string{}
	opened := func(res dispatch.Result) string {
		for _, e := range res.Events {
			switch e := e.(type) {
			case domain.ChangeSetOpened:
				return e.ChangeSetID
			case domain.ChangeSetChanged:
				return e.ChangeSetID
			}
		}
		t.Fatalf("no change set in %v", res.Events)
		return ""
	}
	cs["alice"] = opened(proj(as(rAlice), domain.SetVariables{EnvironmentID: rProd, ServiceID: rAPI, Variables: []domain.Variable{{Name: "S", Secret: &secret}, {Name: "B", Value: "2"}}}))
	proj(as(rAlice), domain.SetVariables{EnvironmentID: rProd, Variables: []domain.Variable{{Name: "REGION", Value: "eu"}}})
	proj(as(rAlice), domain.UnsetVariables{EnvironmentID: rProd, ServiceID: rAPI, Names: []string{"OLD"}})
	proj(as(rAlice), domain.AddDomain{EnvironmentID: rProd, ServiceID: rAPI, Host: "new.example.com"})
	proj(as(rAlice), domain.RemoveDomain{EnvironmentID: rProd, Host: "old.example.com"})
	proj(as(rAlice), domain.Scale{EnvironmentID: rProd, ServiceID: rAPI, Process: "web", Replicas: 3})
	proj(as(rAlice), domain.Deploy{EnvironmentID: rProd, ServiceID: rAPI, ReleaseID: rid(104), DeploymentID: rid(204), Image: digestOf("api333")})
	proj(as(rAlice), domain.Rollback{EnvironmentID: rProd, ServiceID: rAPI, ReleaseID: rid(101), DeploymentID: rid(205),
		Release: domain.ReleaseRef{EnvironmentID: rProd, ServiceID: rAPI, Number: 1, Image: digestOf("api1")}})
	cs["carol"] = opened(proj(as(rCarol), domain.DeleteService{ServiceID: rWorker}))
	cs["dave"] = opened(proj(as(rDave), domain.UpdateEnvironment{EnvironmentID: rProd, ClusterID: rCluster, Protected: false}))
	cs["erin"] = opened(proj(as(rErin), domain.DeleteEnvironment{EnvironmentID: rProd}))
	cs["frank"] = opened(proj(as(rFrank), domain.DeleteProject{}))
	// A build's automatic deploy opens a change set of the system's.
	tick()
	sys := dispatch.Context{Actor: domain.System("build"), CommandID: rid(n)}
	cs["system"] = opened(proj(sys, domain.Deploy{EnvironmentID: rProd, ServiceID: rAPI, ReleaseID: rid(106), DeploymentID: rid(206),
		Image: digestOf("api4444"), Automatic: true, BuildID: rBuild, ClusterID: rCluster}))
	b.catchUp(t)

	// The events, as appended (revision streams are the compiler's: it
	// makes them again from these).
	all, err := eventstore.ReadAll(ctx, b.pool, eventstore.Cursor{}, 10000)
	require.NoError(t, err)
	var appends []recAppend
	var lastTx uint64
	for _, e := range all {
		if kind, _ := domain.StreamID(e.StreamID); kind == "revision" {
			continue
		}
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, e.Payload))
		require.Equal(t, string(e.Payload), compact.String())
		r := recRecord{Type: e.Type, SchemaVersion: e.SchemaVersion, Payload: json.RawMessage(e.Payload)}
		if len(appends) > 0 && e.TxID == lastTx && appends[len(appends)-1].Stream == e.StreamID {
			appends[len(appends)-1].Records = append(appends[len(appends)-1].Records, r)
			continue
		}
		lastTx = e.TxID
		appends = append(appends, recAppend{Stream: e.StreamID, ExpectedVersion: e.StreamVersion - 1, OrgID: e.OrgID, Actor: e.Actor,
			RequestID: e.RequestID, OccurredAt: e.OccurredAt.UTC(), Records: []recRecord{r}})
	}

	// Each change set approved on its own, by the domain alone.
	var stream []domain.Event
	var times []time.Time
	for _, a := range appends {
		if a.Stream != domain.ProjectStream(rProject) {
			continue
		}
		for _, r := range a.Records {
			e, err := domain.Decode(r.Type, r.SchemaVersion, r.Payload)
			require.NoError(t, err)
			stream, times = append(stream, e), append(times, a.OccurredAt)
		}
	}
	fold := func() *domain.Project {
		p := domain.NewProject()
		for i, e := range stream {
			p.ApplyAt(e, times[i])
		}
		return p
	}
	encode := func(evs []domain.Event) []recRecord {
		out := []recRecord{}
		for _, e := range evs {
			typ, v, payload, err := domain.Encode(e)
			require.NoError(t, err)
			out = append(out, recRecord{Type: typ, SchemaVersion: v, Payload: payload})
		}
		return out
	}
	var alone []recDecision
	for i, who := range []string{"alice", "carol", "dave", "erin", "frank", "system"} {
		p := fold()
		set := p.ChangeSets[cs[who]]
		require.NotNil(t, set, who)
		m := domain.Meta{Actor: domain.Actor{Kind: domain.ActorUser, ID: rBob, Name: "b2@example.com"}, Person: rBob, CommandID: rid(500 + i), Now: at.Add(1000 * time.Hour)}
		d, err := p.Decide(domain.ApproveChangeSet{ChangeSetID: set.ID, Version: set.Version}, m)
		rec := recDecision{ChangeSet: who, Command: "approve", Person: rBob, CommandID: m.CommandID, Version: set.Version, At: m.Now, Events: encode(d.Events)}
		if err != nil {
			rec.Error = err.Error()
		}
		alone = append(alone, rec)
	}

	// The read model and the API's view of it, with every change set open.
	readModel := func() map[string]any {
		out := map[string]any{}
		list, err := query.ChangeSets(ctx, b.pool, rProd, "")
		require.NoError(t, err)
		out["list"] = list
		diffs := map[string]any{}
		for _, who := range []string{"alice", "carol", "dave", "erin", "frank", "system"} {
			got, err := query.ChangeSetByID(ctx, b.pool, cs[who])
			require.NoError(t, err)
			diff, err := query.ChangeSetDiff(ctx, b.pool, got)
			require.NoError(t, err)
			diffs[who] = diff
		}
		out["diffs"] = diffs
		var stored []json.RawMessage
		rows, err := b.pool.Query(ctx, `SELECT changes::text FROM changesets ORDER BY id`)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			stored = append(stored, json.RawMessage(s))
		}
		require.NoError(t, rows.Err())
		out["storedChanges"] = stored
		return out
	}
	before := readModel()

	// Decided one after another through the command handler: approvals,
	// a rejection, one left open.
	var decided []recDecision
	decide := func(who, person, command string) {
		c := as(person)
		set, err := query.ChangeSetByID(ctx, b.pool, cs[who])
		require.NoError(t, err)
		var cmd domain.ProjectCommand = domain.ApproveChangeSet{ChangeSetID: cs[who], Version: set.Version}
		if command == "reject" {
			cmd = domain.RejectChangeSet{ChangeSetID: cs[who], Reason: "not now"}
		}
		b.clock.mu.Lock()
		now := b.clock.t.Add(time.Minute)
		b.clock.mu.Unlock()
		res, err := b.cmd.Project(ctx, c, rOrg, rProject, cmd)
		require.NoError(t, err, who)
		decided = append(decided, recDecision{ChangeSet: who, Command: command, Person: person, CommandID: c.CommandID, Version: set.Version, At: now, Events: encode(res.Events)})
		b.catchUp(t)
	}
	decide("alice", rBob, "approve")
	decide("system", rBob, "approve")
	decide("carol", rBob, "approve")
	decide("dave", rBob, "approve")
	decide("erin", rBob, "reject")
	after := readModel()

	write := func(path string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		b = append(b, '\n')
		if os.Getenv("NEBULA_RECORD_CHANGESETS") == "1" {
			require.NoError(t, os.WriteFile(path, b, 0o644))
			return
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, string(want), string(b), path)
	}
	write("../domain/testdata/changesets-schema1.json", map[string]any{
		"note":       "Recorded (issue 16, item 6) from the code before change-set payloads: change-set events of schema 1, whose changes are the commands themselves. Never regenerate: these are what old databases hold.",
		"changeSets": cs,
		"appends":    appends,
		"approvals":  alone,
	})
	write("testdata/changesets-readmodel.json", map[string]any{
		"note":      "Recorded (issue 16, item 6) from the code before change-set payloads: the change sets' read model and API shape for domain/testdata/changesets-schema1.json, with every change set open (open) and after the decisions (decisions, decided).",
		"open":      before,
		"decided":   after,
		"decisions": decided,
	})
}
