package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

// A cluster's link records transitions only: the first live agent, and
// none left; the same state again records nothing, and a cluster never
// connected is not "disconnected".
func TestClusterLinkRecordsTransitionsOnly(t *testing.T) {
	t.Parallel()
	m := domain.Meta{Actor: domain.System("cluster-links"), CommandID: "c", Now: now}
	l := domain.NewClusterLink()
	obs := func(n int) []domain.Event {
		d, err := l.Decide(domain.ObserveClusterLink{ClusterID: clusterID, OrgID: orgID, LiveAgents: n}, m)
		require.NoError(t, err)
		for _, e := range d.Events {
			l.Apply(e)
		}
		return d.Events
	}
	require.Empty(t, obs(0), "never connected: nothing to say")
	evs := obs(2)
	require.Equal(t, []domain.Event{domain.ClusterLinkChanged{ClusterID: clusterID, OrgID: orgID, Connected: true, Agents: 2, At: now}}, evs)
	require.Empty(t, obs(1), "still connected")
	evs = obs(0)
	require.Len(t, evs, 1)
	require.False(t, evs[0].(domain.ClusterLinkChanged).Connected)
	require.Equal(t, "cluster.disconnect", domain.Audit(evs[0]).Action)
	require.Empty(t, obs(0))
	_, err := l.Decide(domain.ObserveClusterLink{ClusterID: "x", OrgID: orgID}, m)
	require.ErrorIs(t, err, domain.ErrInvalid)
}

// Rotating keeps the previous secret for 24 hours; disabling twice and
// enabling an enabled endpoint change nothing; an unknown endpoint is not
// found.
func TestOutHookCommands(t *testing.T) {
	t.Parallel()
	m := domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: now}
	h := domain.NewOutHooks()
	apply := func(cmd domain.OutHookCommand) []domain.Event {
		t.Helper()
		d, err := h.Decide(orgID, cmd, m)
		require.NoError(t, err)
		for _, e := range d.Events {
			h.Apply(e)
		}
		return d.Events
	}
	s1 := domain.SealedValue{DataKeyID: "k1", Ciphertext: []byte{1}}
	require.Len(t, apply(domain.CreateOutHook{OrgID: orgID, EndpointID: dep1, URL: "https://h.example.com/x", EventTypes: []string{"build.failed"}, Secret: s1}), 1)
	require.Empty(t, apply(domain.CreateOutHook{OrgID: orgID, EndpointID: dep1, URL: "https://h.example.com/x", EventTypes: []string{"build.failed"}, Secret: s1}),
		"the same create again changes nothing")
	apply(domain.RotateOutHookSecret{EndpointID: dep1, Secret: domain.SealedValue{DataKeyID: "k2", Ciphertext: []byte{2}}})
	ep := h.Endpoints[dep1]
	require.Equal(t, s1, *ep.Previous)
	require.Equal(t, now.Add(24*time.Hour), *ep.PreviousUntil)
	require.Len(t, apply(domain.DisableOutHook{EndpointID: dep1, Reason: "410"}), 1)
	require.Empty(t, apply(domain.DisableOutHook{EndpointID: dep1, Reason: "410"}))
	require.Len(t, apply(domain.EnableOutHook{EndpointID: dep1}), 1)
	require.Empty(t, apply(domain.EnableOutHook{EndpointID: dep1}))
	_, err := h.Decide(orgID, domain.DeleteOutHook{EndpointID: rel1}, m)
	require.ErrorIs(t, err, domain.ErrNotFound)
	require.True(t, domain.OutHookWants([]string{"*"}, "agent.upgraded"))
	require.False(t, domain.OutHookWants([]string{"build.failed"}, "agent.upgraded"))
}
