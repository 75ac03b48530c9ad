package transport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/transport"
)

// rewindWorld is a control plane restored from a backup: its latest
// revisions and their hashes.
type rewindWorld struct {
	mu     sync.Mutex
	heads  map[string]transport.AppliedRevision
	hashes int // RevisionHash calls
}

func (w *rewindWorld) hash(env string, rev int) string { return fmt.Sprintf("%s-%d", env, rev) }

func startRewindHub(t *testing.T, w *rewindWorld) (*transport.Hub, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hub, err := transport.NewHub(ctx, transport.HubConfig{
		Authenticate: func(r *http.Request) (transport.Peer, error) {
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			return transport.Peer{ServerID: tok, ClusterID: "c1", Name: tok}, nil
		},
		Heads: func(ctx context.Context, clusters []string) (map[string][]transport.Head, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			out := map[string][]transport.Head{}
			for env, h := range w.heads {
				out["c1"] = append(out["c1"], transport.Head{EnvironmentID: env, Revision: h.Revision})
			}
			return out, nil
		},
		Fetch: func(ctx context.Context, env string, rev int) (transport.DesiredState, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return transport.DesiredState{EnvironmentID: env, Revision: rev, Hash: w.heads[env].Hash,
				Document: desiredstate.Document{SchemaVersion: 1, Services: []desiredstate.Service{}}}, nil
		},
		RevisionHash: func(ctx context.Context, env string, rev int) (string, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.hashes++
			if h := w.heads[env]; h.Revision == rev {
				return h.Hash, nil
			}
			return "", fmt.Errorf("no revision %d of %s", rev, env)
		},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(transport.ConnectPath, hub)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return hub, srv
}

// received is one desired state as an agent got it.
type received struct {
	Env    string
	Rev    int
	Rewind bool
}

// rewindAgent says in its hello what its namespaces record (or nothing, as
// an agent that predates rewinds), and keeps what it is sent.
type rewindAgent struct {
	mu       sync.Mutex
	recorded map[string]transport.AppliedRevision
	noRecord bool
	got      []received
}

func (a *rewindAgent) run(t *testing.T, ctx context.Context, srv *httptest.Server, cred string) {
	t.Helper()
	c, err := transport.NewClient(transport.ClientConfig{
		URL: srv.URL, Credential: cred,
		TLS:       srv.Client().Transport.(*http.Transport).TLSClientConfig,
		Heartbeat: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Hello: func(ctx context.Context) transport.Hello {
			a.mu.Lock()
			defer a.mu.Unlock()
			h := transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}}
			if !a.noRecord {
				h.Recorded = map[string]transport.AppliedRevision{}
			}
			for env, r := range a.recorded {
				h.Applied[env] = r.Revision
				if !a.noRecord {
					h.Recorded[env] = r
				}
			}
			return h
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.got = append(a.got, received{ds.EnvironmentID, ds.Revision, ds.Rewind})
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
		},
	})
	require.NoError(t, err)
	go func() { _ = c.Run(ctx) }()
}

func (a *rewindAgent) received() []received {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]received(nil), a.got...)
}

// A control plane restored from a backup taken before the agent applied its
// last revisions (issue 17, item 7): an environment the agent records ahead
// (a higher number, or the same number with another document) is sent the
// control plane's latest marked Rewind, once per connection; one level with
// it gets nothing; one behind gets the latest as usual; an agent that says
// nothing of what it records (it predates rewinds) is never sent a rewind,
// which it would refuse as an unknown field.
func TestARestoredControlPlaneRewindsAnAgentThatIsAhead(t *testing.T) {
	t.Parallel()
	w := &rewindWorld{heads: map[string]transport.AppliedRevision{}}
	for env, rev := range map[string]int{"ahead": 5, "forked": 3, "level": 4, "behind": 6} {
		w.heads[env] = transport.AppliedRevision{Revision: rev, Hash: w.hash(env, rev)}
	}
	_, srv := startRewindHub(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a := &rewindAgent{recorded: map[string]transport.AppliedRevision{
		"ahead":  {Revision: 7, Hash: "ahead-7"},
		"forked": {Revision: 3, Hash: "another document"},
		"level":  {Revision: 4, Hash: w.hash("level", 4)},
		"behind": {Revision: 2, Hash: w.hash("behind", 2)},
	}}
	a.run(t, ctx, srv, "current")
	want := []received{{"ahead", 5, true}, {"behind", 6, false}, {"forked", 3, true}}
	sorted := func(rs []received) []received {
		out := append([]received(nil), rs...)
		for i := range out {
			for j := i + 1; j < len(out); j++ {
				if out[j].Env < out[i].Env {
					out[i], out[j] = out[j], out[i]
				}
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(a.received()) >= len(want) }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, want, sorted(a.received()), "only what the agent is ahead of is rewound; the level environment gets nothing")

	// An agent that predates rewinds: nothing it could refuse.
	old := &rewindAgent{noRecord: true, recorded: map[string]transport.AppliedRevision{
		"ahead": {Revision: 7}, "forked": {Revision: 3}, "level": {Revision: 4}, "behind": {Revision: 6},
	}}
	old.run(t, ctx, srv, "old")
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, old.received())
}

// After the rewind, a newer revision goes out as usual (the agent has been
// sent the rewound one), and an agent that reconnects still ahead (the
// rewind did not get through) is rewound again.
func TestARewindIsDecidedAgainOnEveryConnection(t *testing.T) {
	t.Parallel()
	w := &rewindWorld{heads: map[string]transport.AppliedRevision{"e": {Revision: 5, Hash: "e-5"}}}
	hub, srv := startRewindHub(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	a := &rewindAgent{recorded: map[string]transport.AppliedRevision{"e": {Revision: 9, Hash: "e-9"}}}
	a.run(t, ctx, srv, "current")
	require.Eventually(t, func() bool { return len(a.received()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, received{"e", 5, true}, a.received()[0])
	require.NoError(t, hub.Refresh(ctx))
	w.mu.Lock()
	w.heads["e"] = transport.AppliedRevision{Revision: 6, Hash: "e-6"}
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	require.Eventually(t, func() bool { return len(a.received()) == 2 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, received{"e", 6, false}, a.received()[1], "a refresh does not rewind again; the newer revision goes out as usual")
	cancel()
	w.mu.Lock()
	w.heads["e"] = transport.AppliedRevision{Revision: 5, Hash: "e-5"}
	w.mu.Unlock()

	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	a.run(t, ctx2, srv, "current")
	require.Eventually(t, func() bool { return len(a.received()) == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, received{"e", 5, true}, a.received()[2], "the agent still records 9: rewound again")
}
