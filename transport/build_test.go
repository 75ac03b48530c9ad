package transport_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/transport"
)

// The builds a cluster should run reach an agent that runs builds: after
// each connect the first set goes out even when it is empty (the agent may
// run Jobs of builds that ended while it was away, which it stops then);
// the same set is not sent twice on a connection; an agent that predates
// builds is sent none.
func TestBuildSetsReachAgentsThatRunBuilds(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{}, revoked: map[string]bool{}}
	hub, srv := startHub(t, w)
	var mu sync.Mutex
	var sets []transport.Builds
	c, err := transport.NewClient(transport.ClientConfig{
		URL: srv.URL, Credential: "good-builder", TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig,
		Heartbeat: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}, Builds: true}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack { return transport.Ack{} },
		Builds: func(b transport.Builds) {
			mu.Lock()
			sets = append(sets, b)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	old := (&agent{applied: map[string]int{}}).client(t, srv, "good-old")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = c.Run(ctx) }()
	go func() { _ = old.Run(ctx) }()
	send := func(server, key string, b transport.Builds) error {
		var err error
		require.Eventually(t, func() bool {
			err = hub.SendBuilds(ctx, server, key, b)
			return !errors.Is(err, transport.ErrNotConnected)
		}, 10*time.Second, 20*time.Millisecond)
		return err
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(sets) }

	require.NoError(t, send("good-builder", "", transport.Builds{}))
	require.Eventually(t, func() bool { return count() == 1 }, 5*time.Second, 10*time.Millisecond, "the first set, empty, is sent")
	require.NoError(t, send("good-builder", "", transport.Builds{}))
	one := transport.Builds{Builds: []transport.BuildSpec{{ID: "b1", Service: "web", Repository: "https://git.example.com/a/b", Branch: "main"}}}
	require.NoError(t, send("good-builder", "k1", one))
	require.NoError(t, send("good-builder", "k1", one))
	require.Eventually(t, func() bool { return count() == 2 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 2, count(), "the same set is sent once")
	mu.Lock()
	require.Equal(t, "b1", sets[1].Builds[0].ID)
	mu.Unlock()
	require.ErrorIs(t, send("good-old", "k1", one), transport.ErrNoBuilds, "an agent that predates builds is sent none")
}
