package httpapi_test

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/stretchr/testify/require"
)

// Scaling a process is a change like any other: a new release of what runs,
// through a change set in a protected environment, refused with a clear
// error for a bad count or an unknown process, changing nothing then.
func TestScaleAProcessInOneEnvironment(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	c := r.c
	r.deploy()

	var rs []api.ProcessReplicas
	r.must(c.do("GET", target+"/replicas", r.root, nil), 200).items(t, &rs)
	require.Equal(t, []api.ProcessReplicas{{Process: "web", Replicas: 1}}, rs, "the service's default before any scaling")

	var before []api.Release
	r.must(c.do("GET", target+"/releases", r.root, nil), 200).items(t, &before)

	var out api.ReplicasResponse
	r.must(c.do("PUT", target+"/replicas", r.root, map[string]any{"replicas": 3}), 200).json(t, &out)
	require.Equal(t, []api.ProcessReplicas{{Process: "web", Replicas: 3, Scaled: true}}, out.Replicas)

	var after []api.Release
	r.must(c.do("GET", target+"/releases", r.root, nil), 200).items(t, &after)
	require.Len(t, after, len(before)+1, "scaling makes a new release")
	var newest api.Release
	for _, rel := range after {
		if rel.Number > newest.Number {
			newest = rel
		}
	}
	require.Equal(t, "scale", newest.Reason)

	// Bad input changes nothing.
	for _, bad := range []struct {
		body   map[string]any
		status int
	}{
		{map[string]any{}, 422},
		{map[string]any{"replicas": 1001}, 422},
		{map[string]any{"replicas": -1}, 422},
		{map[string]any{"replicas": "3"}, 400},
		{map[string]any{"process": "nope", "replicas": 2}, 404},
	} {
		r.must(c.do("PUT", target+"/replicas", r.root, bad.body), bad.status)
	}
	r.must(c.do("GET", target+"/replicas", r.root, nil), 200).items(t, &rs)
	require.Equal(t, []api.ProcessReplicas{{Process: "web", Replicas: 3, Scaled: true}}, rs)

	// In the protected environment it waits for someone else.
	const prod = "/api/v1/orgs/acme/projects/shop/environments/production/services/api"
	var cs api.ChangeSet
	r.must(c.do("PUT", prod+"/replicas", r.root, map[string]any{"process": "web", "replicas": 5}), 202).json(t, &cs)
	require.Equal(t, "open", cs.Status)
	r.must(c.do("GET", prod+"/replicas", r.root, nil), 200).items(t, &rs)
	require.Equal(t, []api.ProcessReplicas{{Process: "web", Replicas: 1}}, rs, "nothing changes before approval")
}
