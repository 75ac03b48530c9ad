package projections_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/projections"
)

// The recordings of issue 16, item 6, made by the code before change-set
// payloads and never regenerated: ../domain/testdata/changesets-schema1.json
// holds the events (change sets of schema 1, whose changes were the
// commands), testdata/changesets-readmodel.json the read model and API shape
// they projected to and the decisions taken on them.

type recordedAppend struct {
	Stream          string         `json:"stream"`
	ExpectedVersion int            `json:"expectedVersion"`
	OrgID           string         `json:"orgId,omitempty"`
	Actor           domain.Actor   `json:"actor"`
	RequestID       string         `json:"requestId,omitempty"`
	OccurredAt      time.Time      `json:"occurredAt"`
	Records         []recordedItem `json:"records"`
}

type recordedItem struct {
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schemaVersion"`
	Payload       json.RawMessage `json:"payload"`
}

type recordedDecision struct {
	ChangeSet string         `json:"changeSet"`
	Command   string         `json:"command"`
	Person    string         `json:"person"`
	CommandID string         `json:"commandId"`
	Version   int            `json:"version,omitempty"`
	At        time.Time      `json:"at"`
	Events    []recordedItem `json:"events"`
	Error     string         `json:"error,omitempty"`
}

type recordedEvents struct {
	ChangeSets map[string]string `json:"changeSets"`
	Appends    []recordedAppend  `json:"appends"`
}

// recordedReadModel is what the test reads of the second file.
type recordedReadModel struct {
	Note      string             `json:"note"`
	Decisions []recordedDecision `json:"decisions"`
}

var recordedOrder = []string{"alice", "carol", "dave", "erin", "frank", "system"}

func compactJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, raw))
	return b.Bytes()
}

// changeSetsAPI is what the API serves of the recorded environment's change
// sets: the list (each change set with its redacted changes), each one's
// diff against the environment, and the changes column as stored.
func changeSetsAPI(t *testing.T, pool eventstore.Querier, env string, ids map[string]string) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	list, err := query.ChangeSets(ctx, pool, env, "")
	require.NoError(t, err)
	out["list"] = list
	diffs := map[string]any{}
	for _, who := range recordedOrder {
		got, err := query.ChangeSetByID(ctx, pool, ids[who])
		require.NoError(t, err)
		diff, err := query.ChangeSetDiff(ctx, pool, got)
		require.NoError(t, err)
		diffs[who] = diff
	}
	out["diffs"] = diffs
	var stored []json.RawMessage
	rows, err := pool.Query(ctx, `SELECT changes::text FROM changesets ORDER BY id`)
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

func indentJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	return string(b)
}

// Change sets written by the code before change-set payloads (schema 1) and
// the same change sets written again in schema 2 decode, project to exactly
// the read model and API responses recorded from that code (secrets
// redacted as before), are decided with the recorded outcomes, project those
// as recorded, and replay to the live tables.
func TestRecordedSchema1ChangeSetsProjectDecideAndReplayAsBefore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../domain/testdata/changesets-schema1.json")
	require.NoError(t, err)
	var rec recordedEvents
	require.NoError(t, json.Unmarshal(raw, &rec))
	wantFile, err := os.ReadFile("testdata/changesets-readmodel.json")
	require.NoError(t, err)
	var want recordedReadModel
	require.NoError(t, json.Unmarshal(wantFile, &want))
	require.Len(t, want.Decisions, 5)
	const org, project, prod = "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000003", "00000000-0000-4000-8000-000000000005"

	for _, schema := range []int{1, 2} {
		t.Run(map[int]string{1: "schema1", 2: "schema2"}[schema], func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			changeSetEvents := 0
			for _, a := range rec.Appends {
				req := eventstore.AppendRequest{StreamID: a.Stream, ExpectedVersion: a.ExpectedVersion, OrgID: a.OrgID, Actor: a.Actor,
					RequestID: a.RequestID, OccurredAt: a.OccurredAt}
				for _, r := range a.Records {
					item := eventstore.Record{Type: r.Type, SchemaVersion: r.SchemaVersion, Payload: compactJSON(t, r.Payload)}
					if r.Type == "changeset.opened" || r.Type == "changeset.changed" {
						changeSetEvents++
						require.Equal(t, 1, r.SchemaVersion)
						if schema == 2 {
							e, err := domain.Decode(item.Type, item.SchemaVersion, item.Payload)
							require.NoError(t, err)
							item.Type, item.SchemaVersion, item.Payload, err = domain.Encode(e)
							require.NoError(t, err)
							require.Equal(t, 2, item.SchemaVersion)
						}
					}
					req.Records = append(req.Records, item)
				}
				_, err := b.store.Append(ctx, req)
				require.NoError(t, err, a.Stream)
			}
			require.Equal(t, 13, changeSetEvents)
			b.catchUp(t)

			// The file again, as the recorder wrote it.
			got := map[string]any{"note": want.Note, "open": changeSetsAPI(t, b.pool, prod, rec.ChangeSets)}
			var decisions []recordedDecision

			for _, d := range want.Decisions {
				b.clock.Set(d.At.Add(-time.Minute))
				var cmd domain.ProjectCommand = domain.ApproveChangeSet{ChangeSetID: rec.ChangeSets[d.ChangeSet], Version: d.Version}
				if d.Command == "reject" {
					cmd = domain.RejectChangeSet{ChangeSetID: rec.ChangeSets[d.ChangeSet], Reason: "not now"}
				}
				c := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: d.Person, Name: d.Person[len(d.Person)-2:] + "@example.com"},
					Person: d.Person, CommandID: d.CommandID}
				res, err := b.cmd.Project(ctx, c, org, project, cmd)
				require.NoError(t, err, d.ChangeSet)
				out := recordedDecision{ChangeSet: d.ChangeSet, Command: d.Command, Person: d.Person, CommandID: d.CommandID, Version: d.Version, At: d.At, Events: []recordedItem{}}
				for _, e := range res.Events {
					typ, v, payload, err := domain.Encode(e)
					require.NoError(t, err)
					out.Events = append(out.Events, recordedItem{Type: typ, SchemaVersion: v, Payload: payload})
				}
				decisions = append(decisions, out)
				b.catchUp(t)
			}
			got["decisions"] = decisions
			got["decided"] = changeSetsAPI(t, b.pool, prod, rec.ChangeSets)
			// The API's JSON, the read model and the decisions' events are
			// those recorded, byte for byte.
			require.Equal(t, string(wantFile), indentJSON(t, got)+"\n")

			rep, err := projections.Replay(ctx, b.pool)
			require.NoError(t, err)
			require.True(t, rep.Equal(), "replay differs from live: %+v", rep)
		})
	}
}
