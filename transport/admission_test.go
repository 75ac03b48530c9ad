package transport_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/transport"
)

// The reconnect backoff doubles from MinBackoff to MaxBackoff with jitter
// (half to one and a half times the backoff), and a 503's Retry-After is
// waited, spread over as long again, without doubling the backoff: agents
// dropped together (a restart) come back spread out instead of in
// lockstep, and as soon as the control plane can take them.
func TestReconnectWaitsAreJitteredAndHonourRetryAfter(t *testing.T) {
	var mu sync.Mutex
	attempts := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		if n <= 2 {
			w.Header().Set("Retry-After", "3")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	defer srv.Close()
	c, err := transport.NewClient(transport.ClientConfig{URL: srv.URL, Credential: "good-1",
		TLS:        srv.Client().Transport.(*http.Transport).TLSClientConfig,
		MinBackoff: time.Second, MaxBackoff: 8 * time.Second,
		Hello: func(context.Context) transport.Hello { return transport.Hello{Protocol: transport.ProtocolVersion} },
		Apply: func(context.Context, transport.DesiredState) transport.Ack { return transport.Ack{} }})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	// The jitter's draws, in order: the top (T) or the bottom (B) of their
	// range; a 503's wait draws twice (the backoff's, then the spread's).
	draws := "TBBTBTBT"
	draw := 0
	transport.SetClock(c, func(ctx context.Context, d time.Duration) bool {
		waits = append(waits, d)
		if len(waits) == 6 {
			cancel()
			return false
		}
		return true
	}, func(n int64) int64 {
		top := draws[draw%len(draws)] == 'T'
		draw++
		if top {
			return n - 1
		}
		return 0
	})
	require.NoError(t, c.Run(ctx))
	require.Len(t, waits, 6)
	s := time.Second
	// Busy: the backoff's draw (under 1.5 s, then under 3 s) is shorter
	// than the 3 s asked for, which is spread over 3..6 s.
	require.Equal(t, 3*s, waits[0], "first 503: 3 s and the bottom of the spread")
	require.Equal(t, 6*s-1, waits[1], "second 503: 3 s and the top of the spread")
	// Not busy: backoff/2 + a draw in [0, backoff), the backoff doubling
	// from 1 s (the 503s did not double it) to the 8 s cap.
	require.Equal(t, s/2, waits[2], "backoff 1 s, bottom")
	require.Equal(t, 3*s-1, waits[3], "backoff 2 s, top")
	require.Equal(t, 2*s, waits[4], "backoff 4 s, bottom")
	require.Equal(t, 12*s-1, waits[5], "backoff 8 s (the cap), top")
}

// A hub admitting as many connections as MaxHandshakes at once makes one
// more wait AdmitWait for a place, then answers 503 with its Retry-After,
// touching nothing; once a connection says hello and is welcomed, its place
// is free again.
func TestHubAnswersBusyBeyondItsHandshakes(t *testing.T) {
	hub, dial := admissionHub(t, transport.HubConfig{MaxHandshakes: 1, AdmitWait: 100 * time.Millisecond, BusyRetryAfter: 3 * time.Second})

	// The first connection holds the one place until its hello.
	first, _, err := dial("good-1")
	require.NoError(t, err)
	defer first.Close()
	t0 := time.Now()
	_, resp, err := dial("good-2")
	require.Error(t, err)
	require.GreaterOrEqual(t, time.Since(t0), 100*time.Millisecond, "it waited for a place first")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "3", resp.Header.Get("Retry-After"))
	// The first is listed once the hub has taken it in; the refused one
	// never is.
	require.Eventually(t, func() bool { return len(hub.Connected()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, "good-1", hub.Connected()[0].ServerID, "the refused connection is not kept")

	hello, err := transport.Encode(transport.TypeHello, "", transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}})
	require.NoError(t, err)
	require.NoError(t, first.WriteMessage(websocket.TextMessage, hello))
	_, frame, err := first.ReadMessage()
	require.NoError(t, err)
	env, err := transport.Decode(frame)
	require.NoError(t, err)
	require.Equal(t, transport.TypeWelcome, env.Type)

	second, _, err := dial("good-2")
	require.NoError(t, err, "welcomed, the first connection no longer counts")
	second.Close()
}

// BuildsToSend lists the welcomed connections whose agent runs builds and
// does not have its cluster's set as key says it is now: after a set is
// sent, that connection is no longer listed until the key changes.
func TestBuildsToSendListsOnlyTheConnectionsThatLackTheirSet(t *testing.T) {
	w := &world{revs: map[string]int{}}
	hub, srv := startHub(t, w)
	d := websocket.Dialer{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	url := "wss" + strings.TrimPrefix(srv.URL, "https") + transport.ConnectPath
	connect := func(cred string, builds bool) *websocket.Conn {
		ws, _, err := d.Dial(url, http.Header{"Authorization": {"Bearer " + cred}})
		require.NoError(t, err)
		t.Cleanup(func() { ws.Close() })
		hello, err := transport.Encode(transport.TypeHello, "", transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}, Builds: builds})
		require.NoError(t, err)
		require.NoError(t, ws.WriteMessage(websocket.TextMessage, hello))
		_, _, err = ws.ReadMessage() // the welcome
		require.NoError(t, err)
		return ws
	}
	connect("good-builder", true)
	connect("good-old", false)
	require.Eventually(t, func() bool { return hub.Count() == 2 }, 5*time.Second, 5*time.Millisecond)
	ids := func(key string) []string {
		var out []string
		for _, p := range hub.BuildsToSend(func(string) string { return key }) {
			out = append(out, p.ServerID)
		}
		return out
	}
	require.Equal(t, []string{"good-builder"}, ids(""), "a new connection lacks even the empty set; one that runs no builds is never listed")
	require.NoError(t, hub.SendBuilds(context.Background(), "good-builder", "", transport.Builds{Builds: []transport.BuildSpec{}}))
	require.Empty(t, ids(""), "sent the set, it has it")
	require.Equal(t, []string{"good-builder"}, ids("k2"), "its cluster's builds changed")
}

// A peer that upgrades and then only answers pings (its pongs move the read
// deadline on) is closed ReadTimeout after the upgrade without a hello, and
// its admission place is free again: 32 such peers would otherwise keep
// every other agent out.
func TestHubClosesAPeerThatSaysNoHelloInTime(t *testing.T) {
	_, dial := admissionHub(t, transport.HubConfig{MaxHandshakes: 1, AdmitWait: 50 * time.Millisecond,
		ReadTimeout: 400 * time.Millisecond, PingEvery: 50 * time.Millisecond})
	silent, _, err := dial("good-silent")
	require.NoError(t, err)
	defer silent.Close()
	pings := 0
	silent.SetPingHandler(func(data string) error {
		pings++
		return silent.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	t0 := time.Now()
	closed := make(chan error, 1)
	go func() {
		for {
			if _, _, err := silent.ReadMessage(); err != nil {
				closed <- err
				return
			}
		}
	}()
	select {
	case err := <-closed:
		require.Error(t, err)
		require.Less(t, time.Since(t0), 3*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("a peer that answers pings but sends no hello kept its connection")
	}
	require.Greater(t, pings, 2, "the peer answered pings, which moved the read deadline on")
	next, _, err := dial("good-next")
	require.NoError(t, err, "the silent peer's place is free again")
	next.Close()
}

// admissionHub starts a hub with cfg's admission settings (every bearer
// token is a good credential naming its server) behind TLS, and returns it
// with a dialer of its connect path.
func admissionHub(t *testing.T, cfg transport.HubConfig) (*transport.Hub, func(cred string) (*websocket.Conn, *http.Response, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := &world{revs: map[string]int{}}
	cfg.Authenticate = func(r *http.Request) (transport.Peer, error) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		return transport.Peer{ServerID: tok, ClusterID: "c1", Name: tok}, nil
	}
	cfg.Heads, cfg.Fetch = w.heads, w.fetch
	hub, err := transport.NewHub(ctx, cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(transport.ConnectPath, hub)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	url := "wss" + strings.TrimPrefix(srv.URL, "https") + transport.ConnectPath
	d := websocket.Dialer{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	return hub, func(cred string) (*websocket.Conn, *http.Response, error) {
		return d.Dial(url, http.Header{"Authorization": {"Bearer " + cred}})
	}
}
