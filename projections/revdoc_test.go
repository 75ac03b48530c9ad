package projections_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/projections"
)

// randomDocument makes a valid document of a few services, each with a
// release or held, processes, domains and variables (some sealed).
func randomDocument(rng *rand.Rand) desiredstate.Document {
	d := desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{OrgID: "o", Org: "acme",
		ProjectID: "p", Project: "shop", ID: "e", Name: "staging", ClusterID: fmt.Sprint("c", rng.IntN(2)), Namespace: "acme-shop-staging"}}
	for i := range rng.IntN(5) {
		s := desiredstate.Service{ID: fmt.Sprint("svc-", i), Name: fmt.Sprint("s", i)}
		if rng.IntN(4) == 0 {
			s.Held, s.HeldReason = true, fmt.Sprint("reason ", rng.IntN(2))
		} else {
			s.Release = &desiredstate.Release{ID: fmt.Sprint("r", rng.IntN(3)), Number: 1 + rng.IntN(3), Image: "img@sha256:x", DeploymentID: fmt.Sprint("d", rng.IntN(3))}
			s.Processes = []desiredstate.Process{{Name: "web", Port: 8080, Replicas: rng.IntN(3)}}
			for j := range rng.IntN(6) {
				v := desiredstate.Variable{Name: fmt.Sprint("V", j), Value: fmt.Sprint(rng.IntN(3), " <&>")}
				if rng.IntN(5) == 0 {
					v = desiredstate.Variable{Name: v.Name, Secret: &desiredstate.Sealed{DataKeyID: "k", Ciphertext: []byte{byte(rng.IntN(3))}}}
				}
				s.Variables = append(s.Variables, v)
			}
			if rng.IntN(2) == 0 {
				s.Domains = []string{fmt.Sprintf("h%d.example.com", i)}
			}
		}
		d.Services = append(d.Services, s)
	}
	return d
}

func hashOf(t *testing.T, d desiredstate.Document) string {
	t.Helper()
	h, err := d.Hash()
	require.NoError(t, err)
	return h
}

// Cutting a document into objects and putting it together again gives the
// same document (by hash); the change between two documents, applied to the
// first, gives the second, and holds only the objects that differ.
func TestDocumentObjectsRoundTripAndDiff(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 500; i++ {
		a, b := randomDocument(rng), randomDocument(rng)
		oa, err := projections.SplitDocument(a)
		require.NoError(t, err)
		ob, err := projections.SplitDocument(b)
		require.NoError(t, err)
		back, err := projections.JoinDocument(oa)
		require.NoError(t, err)
		require.Equal(t, hashOf(t, a), hashOf(t, back), "case %d", i)
		want, err := desiredstate.Decode(mustCanonical(t, a))
		require.NoError(t, err)
		require.Equal(t, want, back, "case %d: joined documents come normalised", i)

		set, removed := projections.DiffObjects(oa, ob)
		got := maps.Clone(oa)
		for _, k := range removed {
			require.Contains(t, oa, k)
			delete(got, k)
		}
		for _, o := range set {
			require.NotEqual(t, string(oa[o.Key]), string(o.Value), "case %d: %s did not change", i, o.Key)
			got[o.Key] = o.Value
		}
		joined, err := projections.JoinDocument(got)
		require.NoError(t, err)
		require.Equal(t, hashOf(t, b), hashOf(t, joined), "case %d", i)

		// One variable changed: one object.
		if len(b.Services) > 0 && len(b.Services[0].Variables) > 0 {
			c := b
			c.Services = append([]desiredstate.Service(nil), b.Services...)
			c.Services[0].Variables = append([]desiredstate.Variable(nil), b.Services[0].Variables...)
			c.Services[0].Variables[0] = desiredstate.Variable{Name: c.Services[0].Variables[0].Name, Value: "changed"}
			oc, err := projections.SplitDocument(c)
			require.NoError(t, err)
			set, removed := projections.DiffObjects(ob, oc)
			require.Empty(t, removed)
			require.Len(t, set, 1)
			require.JSONEq(t, fmt.Sprintf(`{"name":%q,"value":"changed"}`, c.Services[0].Variables[0].Name), string(set[0].Value))
		}
	}
	// Objects read back from jsonb (keys reordered, spaces) mean the same.
	d := randomDocument(rand.New(rand.NewPCG(1, 2)))
	objs, err := projections.SplitDocument(d)
	require.NoError(t, err)
	for k, v := range objs {
		var x any
		require.NoError(t, json.Unmarshal(v, &x))
		re, err := json.MarshalIndent(x, "", "  ")
		require.NoError(t, err)
		objs[k] = re
	}
	back, err := projections.JoinDocument(objs)
	require.NoError(t, err)
	require.Equal(t, hashOf(t, d), hashOf(t, back))
	// A variable of no service is an error, not a silent drop.
	objs["variable/nobody/X"] = json.RawMessage(`{"name":"X","value":"1"}`)
	_, err = projections.JoinDocument(objs)
	require.Error(t, err)
}

func mustCanonical(t *testing.T, d desiredstate.Document) []byte {
	t.Helper()
	b, err := d.Canonical()
	require.NoError(t, err)
	return b
}
