package transport_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/transport"
)

// upgradeWorld records what the hub heard of upgrades.
type upgradeWorld struct {
	mu      sync.Mutex
	hellos  map[string]transport.Hello
	results []transport.AgentUpgradeResult
}

func startUpgradeHub(t *testing.T, uw *upgradeWorld) (*transport.Hub, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{revs: map[string]int{}}
	hub, err := transport.NewHub(ctx, transport.HubConfig{
		Authenticate: func(r *http.Request) (transport.Peer, error) {
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !strings.HasPrefix(tok, "good-") {
				return transport.Peer{}, errors.New("unknown credential")
			}
			return transport.Peer{ServerID: tok, ClusterID: "c1", Name: tok}, nil
		},
		Heads: w.heads, Fetch: w.fetch,
		OnHello: func(ctx context.Context, p transport.Peer, h transport.Hello) {
			uw.mu.Lock()
			uw.hellos[p.ServerID] = h
			uw.mu.Unlock()
		},
		OnUpgradeResult: func(ctx context.Context, p transport.Peer, r transport.AgentUpgradeResult) {
			uw.mu.Lock()
			uw.results = append(uw.results, r)
			uw.mu.Unlock()
		},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(transport.ConnectPath, hub)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return hub, srv
}

// The upgrade frames both ways: the hub sends agent_upgrade only to a
// server that is connected (ErrNotConnected otherwise), the agent gets it
// whole and answers with agent_upgrade_result on the same link; an agent
// without an upgrade handler answers that it cannot upgrade itself instead
// of closing the link; the hello's upgradable fields and the facts'
// agentUpgrade reach the control plane.
func TestUpgradeFramesBothWays(t *testing.T) {
	uw := &upgradeWorld{hellos: map[string]transport.Hello{}}
	hub, srv := startUpgradeHub(t, uw)
	require.ErrorIs(t, hub.SendUpgrade(context.Background(), "good-nobody", transport.AgentUpgrade{ID: "u0", Version: "1.5.0"}), transport.ErrNotConnected)

	got := make(chan transport.AgentUpgrade, 1)
	var c *transport.Client
	yes := true
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	mk := func(cred string, upgrade func(transport.AgentUpgrade), hello transport.Hello) *transport.Client {
		cl, err := transport.NewClient(transport.ClientConfig{
			URL: srv.URL, Credential: cred, TLS: srv.Client().Transport.(*http.Transport).TLSClientConfig,
			Heartbeat: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
			Hello: func(context.Context) transport.Hello { return hello },
			Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
				return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Services: []transport.ServiceOutcome{}}
			},
			Upgrade: upgrade,
		})
		require.NoError(t, err)
		return cl
	}
	c = mk("good-a", func(u transport.AgentUpgrade) {
		got <- u
		go func() {
			_ = c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
		}()
	}, transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.4.0", Arch: "amd64", Upgradable: &yes,
		Facts: transport.Facts{AgentUpgrade: &transport.UpgradeFacts{From: "1.3.0", To: "1.4.0", State: transport.UpgradeRolledBack, Reason: "not connected within 5 minutes", At: at}}})
	old := mk("good-old", nil, transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.3.0", Arch: "arm64"})
	require.ErrorIs(t, c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{}), transport.ErrOffline, "nothing is sent before the welcome")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- c.Run(ctx) }()
	go func() { done <- old.Run(ctx) }()

	require.Eventually(t, func() bool {
		uw.mu.Lock()
		defer uw.mu.Unlock()
		return len(uw.hellos) == 2
	}, 5*time.Second, 10*time.Millisecond)
	uw.mu.Lock()
	ha, hold := uw.hellos["good-a"], uw.hellos["good-old"]
	uw.mu.Unlock()
	require.NotNil(t, ha.Upgradable)
	require.True(t, *ha.Upgradable)
	require.Equal(t, &transport.UpgradeFacts{From: "1.3.0", To: "1.4.0", State: "rolled_back", Reason: "not connected within 5 minutes", At: at}, ha.Facts.AgentUpgrade)
	require.Nil(t, hold.Upgradable, "an agent that sends no upgradable field predates upgrades")

	want := transport.AgentUpgrade{ID: "u1", Version: "1.5.0", SHA256: strings.Repeat("ab", 32), Force: true}
	require.Eventually(t, func() bool { return hub.SendUpgrade(ctx, "good-a", want) == nil }, 5*time.Second, 10*time.Millisecond)
	select {
	case u := <-got:
		require.Equal(t, want, u)
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not receive the agent_upgrade")
	}
	require.NoError(t, hub.SendUpgrade(ctx, "good-old", transport.AgentUpgrade{ID: "u2", Version: "1.5.0"}))
	require.Eventually(t, func() bool {
		uw.mu.Lock()
		defer uw.mu.Unlock()
		return len(uw.results) == 2
	}, 5*time.Second, 10*time.Millisecond)
	uw.mu.Lock()
	byID := map[string]transport.AgentUpgradeResult{}
	for _, r := range uw.results {
		byID[r.ID] = r
	}
	uw.mu.Unlock()
	require.Equal(t, transport.AgentUpgradeResult{ID: "u1", Version: "1.5.0", OK: true, Step: 5}, byID["u1"])
	require.False(t, byID["u2"].OK)
	require.Equal(t, "this agent cannot upgrade itself", byID["u2"].Error)
	// Both links are still up: neither frame closed a connection.
	require.NoError(t, hub.SendUpgrade(ctx, "good-old", transport.AgentUpgrade{ID: "u3", Version: "1.5.0"}))
	cancel()
	<-done
	<-done
}
