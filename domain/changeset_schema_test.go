package domain_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

// recorded is testdata/changesets-schema1.json: the events the code before
// change-set payloads wrote (schema 1 change sets, whose changes were the
// commands), recorded once and never regenerated, and the outcome that code
// gave to the approval of each change set.
type recorded struct {
	ChangeSets map[string]string `json:"changeSets"`
	Appends    []struct {
		Stream     string           `json:"stream"`
		OccurredAt time.Time        `json:"occurredAt"`
		Records    []recordedRecord `json:"records"`
	} `json:"appends"`
	Approvals []struct {
		ChangeSet string           `json:"changeSet"`
		Person    string           `json:"person"`
		CommandID string           `json:"commandId"`
		Version   int              `json:"version"`
		At        time.Time        `json:"at"`
		Events    []recordedRecord `json:"events"`
		Error     string           `json:"error"`
	} `json:"approvals"`
}

type recordedRecord struct {
	Type          string          `json:"type"`
	SchemaVersion int             `json:"schemaVersion"`
	Payload       json.RawMessage `json:"payload"`
}

func loadRecorded(t *testing.T) recorded {
	t.Helper()
	b, err := os.ReadFile("testdata/changesets-schema1.json")
	require.NoError(t, err)
	var r recorded
	require.NoError(t, json.Unmarshal(b, &r))
	require.NotEmpty(t, r.Appends)
	return r
}

func compact(t *testing.T, raw []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, json.Compact(&b, raw))
	return b.Bytes()
}

// projectStream is the recorded project's events, decoded, with when they
// happened; reencode writes the change-set events again in the current
// schema and decodes them from that.
func projectStream(t *testing.T, r recorded, reencode bool) ([]domain.Event, []time.Time) {
	t.Helper()
	var events []domain.Event
	var times []time.Time
	for _, a := range r.Appends {
		if kind, _ := domain.StreamID(a.Stream); kind != "project" {
			continue
		}
		for _, rec := range a.Records {
			e, err := domain.Decode(rec.Type, rec.SchemaVersion, compact(t, rec.Payload))
			require.NoError(t, err, rec.Type)
			if reencode {
				typ, v, payload, err := domain.Encode(e)
				require.NoError(t, err)
				e, err = domain.Decode(typ, v, payload)
				require.NoError(t, err, typ)
			}
			events, times = append(events, e), append(times, a.OccurredAt)
		}
	}
	return events, times
}

func foldProject(events []domain.Event, times []time.Time) *domain.Project {
	p := domain.NewProject()
	for i, e := range events {
		p.ApplyAt(e, times[i])
	}
	return p
}

// Every change-set event the code before change-set payloads wrote still
// decodes; written again it is schema 2, an envelope of kind, payload version
// and payload per change, and reads back as the same value; and its changes
// render for the read model as exactly the JSON schema 1 held.
func TestRecordedSchema1ChangeSetEventsDecode(t *testing.T) {
	t.Parallel()
	r := loadRecorded(t)
	kinds := map[string]bool{}
	n := 0
	for _, a := range r.Appends {
		for _, rec := range a.Records {
			payload := compact(t, rec.Payload)
			e, err := domain.Decode(rec.Type, rec.SchemaVersion, payload)
			require.NoError(t, err, "%s: %s", rec.Type, payload)
			var changes domain.ChangeList
			switch e := e.(type) {
			case domain.ChangeSetOpened:
				changes = e.Changes
			case domain.ChangeSetChanged:
				changes = e.Changes
			default:
				continue
			}
			n++
			require.Equal(t, 1, rec.SchemaVersion, "the recording holds schema 1 change sets")
			for _, c := range changes {
				kinds[c.Kind()] = true
			}

			// The read model's view is schema 1's changes, byte for byte.
			var schema1 struct {
				Changes json.RawMessage `json:"changes"`
			}
			require.NoError(t, json.Unmarshal(payload, &schema1))
			view, err := json.Marshal(changes.View())
			require.NoError(t, err)
			require.Equal(t, string(schema1.Changes), string(view))

			// Written again: schema 2, with no command in it.
			typ, v, again, err := domain.Encode(e)
			require.NoError(t, err)
			require.Equal(t, rec.Type, typ)
			require.Equal(t, 2, v)
			var schema2 struct {
				Changes []map[string]json.RawMessage `json:"changes"`
			}
			require.NoError(t, json.Unmarshal(again, &schema2))
			require.Len(t, schema2.Changes, len(changes))
			for i, env := range schema2.Changes {
				require.Len(t, env, 3, "kind, version, payload")
				require.JSONEq(t, `"`+changes[i].Kind()+`"`, string(env["kind"]))
				require.JSONEq(t, `1`, string(env["version"]))
				// Version 1 of a payload is the change's JSON of schema 1.
				var one []map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(schema1.Changes, &one))
				require.Equal(t, string(one[i][changes[i].Kind()]), string(env["payload"]))
			}
			back, err := domain.Decode(typ, v, again)
			require.NoError(t, err)
			require.Equal(t, e, back)
		}
	}
	require.Equal(t, 13, n, "change-set events in the recording")
	got := make([]string, 0, len(kinds))
	for k := range kinds {
		got = append(got, k)
	}
	sort.Strings(got)
	require.Equal(t, []string{"addDomain", "deleteEnvironment", "deleteProject", "deleteService", "deploy", "removeDomain",
		"rollback", "scale", "setVariables", "unsetVariables", "updateEnvironment"}, got, "the recording covers every kind")
	require.Equal(t, got, domain.ChangeKinds())
}

// The recorded stream folds into the same open change sets whether its
// change sets are read in schema 1 or written again in schema 2, and each
// change set approved on its own has exactly the outcome the code before
// change-set payloads gave it (the recorded events, byte for byte).
func TestRecordedSchema1ChangeSetsFoldAndApproveAsBefore(t *testing.T) {
	t.Parallel()
	r := loadRecorded(t)
	old, oldTimes := projectStream(t, r, false)
	cur, curTimes := projectStream(t, r, true)
	require.Equal(t, old, cur)
	p1, p2 := foldProject(old, oldTimes), foldProject(cur, curTimes)
	require.Len(t, p1.ChangeSets, 6)
	require.Equal(t, p1.ChangeSets, p2.ChangeSets)
	require.Equal(t, 8, p1.ChangeSets[r.ChangeSets["alice"]].Version)
	require.Len(t, p1.ChangeSets[r.ChangeSets["alice"]].Changes, 8)

	require.Len(t, r.Approvals, 6)
	for _, a := range r.Approvals {
		require.Empty(t, a.Error, a.ChangeSet)
		for _, fold := range [][]domain.Event{old, cur} {
			p := foldProject(fold, oldTimes)
			m := domain.Meta{Actor: domain.Actor{Kind: domain.ActorUser, ID: a.Person, Name: "b2@example.com"}, Person: a.Person, CommandID: a.CommandID, Now: a.At}
			d, err := p.Decide(domain.ApproveChangeSet{ChangeSetID: r.ChangeSets[a.ChangeSet], Version: a.Version}, m)
			require.NoError(t, err, a.ChangeSet)
			require.Len(t, d.Events, len(a.Events), a.ChangeSet)
			for i, e := range d.Events {
				typ, v, payload, err := domain.Encode(e)
				require.NoError(t, err)
				want := a.Events[i]
				require.Equal(t, want.Type, typ, "%s event %d", a.ChangeSet, i)
				require.Equal(t, want.SchemaVersion, v, "%s event %d", a.ChangeSet, i)
				require.Equal(t, string(compact(t, want.Payload)), string(payload), "%s event %d", a.ChangeSet, i)
			}
		}
	}
}

// A project's state, change sets included, survives the JSON of a snapshot;
// a snapshot written before change-set payloads (its changes in schema 1's
// form) still loads as the same change sets.
func TestChangeSetsSurviveSnapshots(t *testing.T) {
	t.Parallel()
	r := loadRecorded(t)
	events, times := projectStream(t, r, false)
	p := foldProject(events, times)
	b, err := json.Marshal(p)
	require.NoError(t, err)
	back := domain.NewProject()
	require.NoError(t, json.Unmarshal(b, back))
	require.Equal(t, p.ChangeSets, back.ChangeSets)

	cs := p.ChangeSets[r.ChangeSets["alice"]]
	old, err := json.Marshal(cs.Changes.View())
	require.NoError(t, err)
	var fromOld domain.ChangeList
	require.NoError(t, json.Unmarshal(old, &fromOld))
	require.Equal(t, cs.Changes, fromOld)
	var none domain.ChangeList
	require.NoError(t, json.Unmarshal([]byte(`null`), &none))
	require.Nil(t, none)
}

// Change-set events decode strictly, in both schemas.
func TestChangeSetEventsDecodeStrictly(t *testing.T) {
	t.Parallel()
	scale := `{"environmentId":"e","serviceId":"s","process":"web","replicas":2}`
	ok := []struct {
		version int
		payload string
	}{
		{1, `{"changeSetId":"c","environmentId":"e","description":"d","changes":[{"scale":` + scale + `}],"openedBy":"u"}`},
		{2, `{"changeSetId":"c","environmentId":"e","description":"d","changes":[{"kind":"scale","version":1,"payload":` + scale + `}],"openedBy":"u"}`},
	}
	var values []domain.Event
	for _, tc := range ok {
		e, err := domain.Decode("changeset.opened", tc.version, []byte(tc.payload))
		require.NoError(t, err, tc.payload)
		values = append(values, e)
	}
	require.Equal(t, values[0], values[1], "a schema 1 change is version 1 of its payload")
	require.Equal(t, domain.ChangeList{domain.ScalePayload{EnvironmentID: "e", ServiceID: "s", Process: "web", Replicas: 2}}, values[0].(domain.ChangeSetOpened).Changes)

	for _, tc := range []struct {
		version int
		changes string
	}{
		{1, `[{"scale":` + scale + `,"deploy":{}}]`}, // two kinds in one change
		{1, `[{}]`},             // none
		{1, `[null]`},           // none
		{1, `[{"scale":null}]`}, // no payload
		{1, `[{"resize":{}}]`},  // an unknown kind
		{1, `[{"scale":{"environmentId":"e","replicas":"2"}}]`},       // a wrong type
		{1, `[{"scale":{"environmentId":"e","nodes":2}}]`},            // an unknown field
		{1, `[{"kind":"scale","version":1,"payload":` + scale + `}]`}, // schema 2's form in schema 1
		{2, `[{"scale":` + scale + `}]`},                              // schema 1's form in schema 2
		{2, `[{"kind":"scale","version":2,"payload":` + scale + `}]`}, // a payload version from the future
		{2, `[{"kind":"scale","version":0,"payload":` + scale + `}]`},
		{2, `[{"kind":"scale","payload":` + scale + `}]`},
		{2, `[{"kind":"scale","version":1}]`},
		{2, `[{"kind":"scale","version":1,"payload":null}]`},
		{2, `[{"kind":"resize","version":1,"payload":{}}]`},
		{2, `[{"kind":"scale","version":1,"payload":{"nodes":2}}]`},
		{2, `[{"kind":"scale","version":1,"payload":` + scale + `,"extra":1}]`},
		{2, `[null]`},
	} {
		payload := `{"changeSetId":"c","version":2,"description":"d","changes":` + tc.changes + `}`
		_, err := domain.Decode("changeset.changed", tc.version, []byte(payload))
		require.Error(t, err, "schema %d: %s", tc.version, tc.changes)
	}
	_, err := domain.Decode("changeset.opened", 3, []byte(`{"changes":[]}`))
	require.Error(t, err, "a schema from the future is refused")
	_, err = domain.Decode("changeset.opened", 1, []byte(`{"changes":[],"approvedBy":"x"}`))
	require.Error(t, err, "an unknown field is refused")
}

// Every payload converts to its command and back without loss: what waits
// in a change set is what was asked for.
func TestChangePayloadsKeepTheirCommands(t *testing.T) {
	t.Parallel()
	sealed := &domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1, 2}}
	views := []domain.Change{
		{SetVariables: &domain.SetVariables{EnvironmentID: "e", ServiceID: "s", Variables: []domain.Variable{{Name: "A", Value: "1"}, {Name: "S", Secret: sealed}}}},
		{UnsetVariables: &domain.UnsetVariables{EnvironmentID: "e", Names: []string{"A"}}},
		{AddDomain: &domain.AddDomain{EnvironmentID: "e", ServiceID: "s", Host: "a.example.com"}},
		{RemoveDomain: &domain.RemoveDomain{EnvironmentID: "e", Host: "a.example.com"}},
		{Scale: &domain.Scale{EnvironmentID: "e", ServiceID: "s", Process: "web", Replicas: 3}},
		{Deploy: &domain.Deploy{EnvironmentID: "e", ServiceID: "s", ReleaseID: "r", DeploymentID: "d", Image: "i", Automatic: true, BuildID: "b", ClusterID: "c"}},
		{Rollback: &domain.Rollback{EnvironmentID: "e", ServiceID: "s", ReleaseID: "r", DeploymentID: "d", Release: domain.ReleaseRef{EnvironmentID: "e", ServiceID: "s", Number: 2, Image: "i"}}},
		{DeleteService: &domain.DeleteServiceChange{EnvironmentID: "e", ServiceID: "s"}},
		{DeleteEnvironment: &domain.DeleteEnvironment{EnvironmentID: "e"}},
		{DeleteProject: &domain.DeleteProjectChange{EnvironmentID: "e"}},
		{UpdateEnvironment: &domain.UpdateEnvironment{EnvironmentID: "e", ClusterID: "c", Protected: true}},
	}
	raw, err := json.Marshal(views)
	require.NoError(t, err)
	var list domain.ChangeList
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list, len(views))
	require.Equal(t, views, list.View())
	kinds := []string{}
	for i, c := range list {
		require.Equal(t, views[i].Describe(), c.Describe())
		kinds = append(kinds, c.Kind())
	}
	slices.Sort(kinds)
	require.Equal(t, domain.ChangeKinds(), kinds)
	encoded, err := json.Marshal(list)
	require.NoError(t, err)
	var back domain.ChangeList
	require.NoError(t, json.Unmarshal(encoded, &back))
	require.Equal(t, list, back)
}

// FuzzDecodeChangeSetEvent starts from every recorded change-set event, in
// both schemas: whatever decodes encodes again, decodes to the same value
// and renders the same view.
func FuzzDecodeChangeSetEvent(f *testing.F) {
	b, err := os.ReadFile("testdata/changesets-schema1.json")
	if err != nil {
		f.Fatal(err)
	}
	var r recorded
	if err := json.Unmarshal(b, &r); err != nil {
		f.Fatal(err)
	}
	for _, a := range r.Appends {
		for _, rec := range a.Records {
			if rec.Type != "changeset.opened" && rec.Type != "changeset.changed" {
				continue
			}
			var c bytes.Buffer
			if err := json.Compact(&c, rec.Payload); err != nil {
				f.Fatal(err)
			}
			f.Add(rec.Type, 1, c.Bytes())
			e, err := domain.Decode(rec.Type, 1, c.Bytes())
			if err != nil {
				f.Fatal(err)
			}
			typ, v, payload, err := domain.Encode(e)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(typ, v, payload)
		}
	}
	f.Fuzz(func(t *testing.T, typ string, version int, payload []byte) {
		if typ != "changeset.opened" && typ != "changeset.changed" {
			return
		}
		e, err := domain.Decode(typ, version, payload)
		if err != nil {
			return
		}
		typ2, v2, p2, err := domain.Encode(e)
		if err != nil {
			t.Fatalf("decoded %s does not encode: %v", typ, err)
		}
		back, err := domain.Decode(typ2, v2, p2)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", typ, err)
		}
		require.Equal(t, e, back)
		view := func(e domain.Event) []byte {
			var l domain.ChangeList
			switch e := e.(type) {
			case domain.ChangeSetOpened:
				l = e.Changes
			case domain.ChangeSetChanged:
				l = e.Changes
			}
			out, err := json.Marshal(l.View())
			require.NoError(t, err)
			return out
		}
		require.Equal(t, string(view(e)), string(view(back)))
	})
}
