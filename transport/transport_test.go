package transport_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/transport"
)

// world is a control plane's side for tests: revisions per environment of
// one cluster, and what the hub was told.
type world struct {
	mu         sync.Mutex
	revs       map[string]int // environment -> latest revision
	acks       []transport.Ack
	heartbeats int
	gone       []string
	fetches    int
	// revoked credentials are refused from now on; down makes every check
	// of a credential fail as a database outage would.
	revoked map[string]bool
	down    bool
}

func (w *world) heads(ctx context.Context, clusters []string) (map[string][]transport.Head, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string][]transport.Head{}
	for _, c := range clusters {
		for env, rev := range w.revs {
			out[c] = append(out[c], transport.Head{EnvironmentID: env, Revision: rev})
		}
	}
	return out, nil
}

func (w *world) fetch(ctx context.Context, env string, rev int) (transport.DesiredState, error) {
	w.mu.Lock()
	w.fetches++
	w.mu.Unlock()
	return transport.DesiredState{EnvironmentID: env, Revision: rev, Hash: "h", Document: desiredstate.Document{SchemaVersion: 1, Services: []desiredstate.Service{}}}, nil
}

func startHub(t *testing.T, w *world) (*transport.Hub, *httptest.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hub, err := transport.NewHub(ctx, transport.HubConfig{
		Authenticate: func(r *http.Request) (transport.Peer, error) {
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			w.mu.Lock()
			defer w.mu.Unlock()
			switch {
			case w.down:
				return transport.Peer{}, fmt.Errorf("%w: the database does not answer", transport.ErrUnavailable)
			case !strings.HasPrefix(tok, "good-"):
				return transport.Peer{}, errors.New("unknown credential")
			case w.revoked[tok]:
				return transport.Peer{}, errors.New("the credential was revoked")
			}
			// "good-x@c2" is server good-x@c2 of cluster c2; else cluster c1.
			cluster := "c1"
			if _, c, ok := strings.Cut(tok, "@"); ok {
				cluster = c
			}
			return transport.Peer{ServerID: tok, ClusterID: cluster, Name: tok}, nil
		},
		Heads: w.heads,
		Fetch: w.fetch,
		OnAck: func(ctx context.Context, p transport.Peer, a transport.Ack) {
			w.mu.Lock()
			w.acks = append(w.acks, a)
			w.mu.Unlock()
		},
		OnHeartbeat: func(ctx context.Context, p transport.Peer, h transport.Heartbeat) {
			w.mu.Lock()
			w.heartbeats++
			w.mu.Unlock()
		},
		OnDisconnect: func(ctx context.Context, p transport.Peer, reason string) {
			w.mu.Lock()
			w.gone = append(w.gone, reason)
			w.mu.Unlock()
		},
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(transport.ConnectPath, hub)
	srv := httptest.NewTLSServer(mux)
	t.Cleanup(srv.Close)
	return hub, srv
}

type agent struct {
	mu      sync.Mutex
	applied map[string]int
	got     []int
}

func (a *agent) client(t *testing.T, srv *httptest.Server, cred string) *transport.Client {
	t.Helper()
	return a.clientAt(t, srv, srv.URL, cred)
}

func (a *agent) clientAt(t *testing.T, srv *httptest.Server, url, cred string) *transport.Client {
	t.Helper()
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: cred,
		TLS:       srv.Client().Transport.(*http.Transport).TLSClientConfig,
		Heartbeat: 50 * time.Millisecond, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Hello: func(ctx context.Context) transport.Hello {
			a.mu.Lock()
			defer a.mu.Unlock()
			applied := map[string]int{}
			for k, v := range a.applied {
				applied[k] = v
			}
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: applied}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			a.mu.Lock()
			defer a.mu.Unlock()
			ignored := ds.Revision <= a.applied[ds.EnvironmentID]
			if !ignored {
				a.applied[ds.EnvironmentID] = ds.Revision
			}
			a.got = append(a.got, ds.Revision)
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Ignored: ignored, Services: []transport.ServiceOutcome{}}
		},
	})
	require.NoError(t, err)
	return c
}

func (a *agent) revision(env string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applied[env]
}

func TestDesiredStateReachesTheAgentAndIsAcknowledged(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 3, "e2": 1}}
	hub, srv := startHub(t, w)
	// The agent already has e1 at revision 3: only e2 is sent.
	a := &agent{applied: map[string]int{"e1": 3}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.client(t, srv, "good-1").Run(ctx)
	require.Eventually(t, func() bool { return a.revision("e2") == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { w.mu.Lock(); defer w.mu.Unlock(); return len(w.acks) == 1 && w.heartbeats > 1 }, 5*time.Second, 5*time.Millisecond)
	a.mu.Lock()
	require.Equal(t, []int{1}, a.got, "the hello's applied revisions are not resent")
	a.mu.Unlock()

	// A new revision made anywhere reaches the agent on Refresh.
	w.mu.Lock()
	w.revs["e1"] = 4
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	require.Eventually(t, func() bool { return a.revision("e1") == 4 }, 5*time.Second, 5*time.Millisecond)
	require.Len(t, hub.Connected(), 1)
}

func TestAgentReconnectsAndCatchesUp(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}}
	hub, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newProxy(t, srv.Listener.Addr().String())
	go a.clientAt(t, srv, "https://"+p.addr(), "good-1").Run(ctx)
	require.Eventually(t, func() bool { return a.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)
	p.cut()
	w.mu.Lock()
	w.revs["e1"] = 2
	w.mu.Unlock()
	require.Eventually(t, func() bool { return a.revision("e1") == 2 }, 5*time.Second, 5*time.Millisecond, "on reconnect the agent gets the latest revision")
	_ = hub
}

// A delivery finds its cluster's connections by cluster: every connection
// of the cluster gets it, another cluster's none; a server's newer
// connection takes its older one's place, and one that ended is gone.
func TestDeliverReachesTheClustersConnectionsOnly(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}}
	hub, srv := startHub(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b, c := &agent{applied: map[string]int{}}, &agent{applied: map[string]int{}}, &agent{applied: map[string]int{}}
	actx, stopA := context.WithCancel(ctx)
	go a.client(t, srv, "good-a@c1").Run(actx)
	bctx, stopB := context.WithCancel(ctx)
	go b.client(t, srv, "good-b@c1").Run(bctx)
	go c.client(t, srv, "good-c@c2").Run(ctx)
	require.Eventually(t, func() bool { return a.revision("e1") == 1 && b.revision("e1") == 1 && c.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)
	servers := func(clusters ...string) []string {
		in := map[string]bool{}
		for _, c := range clusters {
			in[c] = true
		}
		var out []string
		for _, p := range hub.ConnectedIn(in) {
			out = append(out, p.ServerID)
		}
		return out
	}
	require.ElementsMatch(t, []string{"good-a@c1", "good-b@c1"}, servers("c1"))
	require.ElementsMatch(t, []string{"good-c@c2"}, servers("c2"))
	require.Empty(t, servers("c3"))

	hub.Deliver(ctx, map[string][]transport.Head{"c1": {{EnvironmentID: "e1", Revision: 2}}})
	require.Eventually(t, func() bool { return a.revision("e1") == 2 && b.revision("e1") == 2 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, c.revision("e1"), "another cluster's agent is sent nothing")

	// The same server connects again as its older connection ends: whichever
	// comes first, its newer connection is the one listed and delivered to.
	w.mu.Lock()
	w.revs["e1"] = 2
	w.mu.Unlock()
	stopA()
	a2 := &agent{applied: map[string]int{"e1": 2}}
	go a2.client(t, srv, "good-a@c1").Run(ctx)
	require.Eventually(t, func() bool { return hub.Count() == 3 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // the older connection's end, if it comes last
	require.ElementsMatch(t, []string{"good-a@c1", "good-b@c1"}, servers("c1"), "listed once, by its newer connection")
	w.mu.Lock()
	w.revs["e1"] = 3
	w.mu.Unlock()
	hub.Deliver(ctx, map[string][]transport.Head{"c1": {{EnvironmentID: "e1", Revision: 3}}})
	require.Eventually(t, func() bool { return a2.revision("e1") == 3 && b.revision("e1") == 3 }, 5*time.Second, 5*time.Millisecond)

	stopB()
	require.Eventually(t, func() bool { return len(servers("c1")) == 1 }, 5*time.Second, 5*time.Millisecond, "an ended connection is no longer listed")
	require.Equal(t, []string{"good-a@c1"}, servers("c1"))
}

func TestRefusedCredentialStopsTheAgent(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{}}
	_, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	err := a.client(t, srv, "bad").Run(context.Background())
	require.ErrorIs(t, err, transport.ErrRefused)
}

func TestRevokedServerIsDisconnectedAtOnce(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{}}
	hub, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	done := make(chan error, 1)
	go func() { done <- a.client(t, srv, "good-r").Run(context.Background()) }()
	require.Eventually(t, func() bool { return len(hub.Connected()) == 1 }, 5*time.Second, 5*time.Millisecond)
	require.True(t, hub.Disconnect("good-r", "credential revoked by an operator"))
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrRefused)
	case <-time.After(5 * time.Second):
		t.Fatal("the agent did not stop")
	}
}

func TestMalformedFramesCloseOnlyThatConnection(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}}
	hub, srv := startHub(t, w)
	good := &agent{applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go good.client(t, srv, "good-ok").Run(ctx)
	require.Eventually(t, func() bool { return good.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)

	dialer := websocket.Dialer{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test server
	url := "wss" + strings.TrimPrefix(srv.URL, "https") + transport.ConnectPath
	for name, frames := range map[string][][]byte{
		"not json":      {[]byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`), []byte("garbage")},
		"unknown type":  {[]byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`), []byte(`{"type":"launch_missiles"}`)},
		"no hello":      {[]byte(`{"type":"heartbeat","payload":{}}`)},
		"wrong version": {[]byte(`{"type":"hello","payload":{"protocol":99,"applied":{}}}`)},
		"extra field":   {[]byte(`{"type":"hello","payload":{"protocol":1,"applied":{},"evil":1}}`)},
		"oversized":     {[]byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`), []byte(`{"type":"ack","payload":"` + strings.Repeat("x", transport.MaxFrame+1) + `"}`)},
	} {
		ws, _, err := dialer.Dial(url, http.Header{"Authorization": {"Bearer good-" + strings.ReplaceAll(name, " ", "-")}})
		require.NoError(t, err, name)
		for _, f := range frames {
			_ = ws.WriteMessage(websocket.TextMessage, f)
		}
		var closeErr error
		for closeErr == nil {
			_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _, closeErr = ws.ReadMessage()
		}
		var ce *websocket.CloseError
		require.True(t, errors.As(closeErr, &ce), "%s: closed with a close frame, got %v", name, closeErr)
		if ce.Code != websocket.CloseMessageTooBig {
			require.NotEmpty(t, ce.Text, "%s: the close frame carries a reason", name)
		}
		ws.Close()
	}
	// The well-behaved agent is still connected and still served.
	w.mu.Lock()
	w.revs["e1"] = 2
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	require.Eventually(t, func() bool { return good.revision("e1") == 2 }, 5*time.Second, 5*time.Millisecond)
}

func TestPlainHTTPNeedsAnExplicitFlag(t *testing.T) {
	t.Parallel()
	cfg := transport.ClientConfig{URL: "http://127.0.0.1:1", Credential: "x",
		Hello: func(context.Context) transport.Hello { return transport.Hello{} },
		Apply: func(context.Context, transport.DesiredState) transport.Ack { return transport.Ack{} }}
	_, err := transport.NewClient(cfg)
	require.ErrorContains(t, err, "plain HTTP")
	cfg.AllowPlain = true
	_, err = transport.NewClient(cfg)
	require.NoError(t, err)

	// --insecure-plain-http is for loopback: another host needs its own,
	// explicit flag.
	cfg.URL = "http://nebula.example.com"
	_, err = transport.NewClient(cfg)
	require.ErrorContains(t, err, "not loopback")
	require.ErrorContains(t, err, "--insecure-plain-http-remote")
	cfg.AllowPlain, cfg.AllowPlainRemote = false, true
	_, err = transport.NewClient(cfg)
	require.NoError(t, err)
}

func TestLoopbackHosts(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "localhost.": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true, "[::1]": true,
		"::ffff:127.0.0.1": true,
		"10.0.0.1":         false, "0.0.0.0": false, "::": false, "nebula.example.com": false, "localhost.example.com": false,
		"127.0.0.1.nip.io": false, "": false,
	} {
		require.Equal(t, want, transport.IsLoopback(host), host)
	}
}

// The join token is sent neither over plain HTTP to another host nor to
// where a redirect points.
func TestRegisterKeepsTheJoinTokenOffPlainHTTP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, err := transport.Register(ctx, "http://nebula.example.com", nil, transport.RegisterRequest{JoinToken: "nbl_x", Name: "a"})
	require.ErrorContains(t, err, "not loopback")

	var got []string
	var mu sync.Mutex
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"serverId":"s","clusterId":"c","credential":"nbl_y"}`))
	}))
	t.Cleanup(plain.Close)
	redirecting := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirecting.Close)
	tlsCfg := redirecting.Client().Transport.(*http.Transport).TLSClientConfig
	_, err = transport.Register(ctx, redirecting.URL, tlsCfg, transport.RegisterRequest{JoinToken: "nbl_secret", Name: "a"})
	require.ErrorContains(t, err, "redirects")
	mu.Lock()
	require.Empty(t, got, "nothing reached the redirect's target")
	mu.Unlock()

	// On loopback, plain HTTP is development.
	reg, err := transport.Register(ctx, plain.URL, nil, transport.RegisterRequest{JoinToken: "nbl_secret", Name: "a"})
	require.NoError(t, err)
	require.Equal(t, "nbl_y", reg.Credential)
}

// rawAgent dials the hub with a credential and says nothing yet.
func rawAgent(t *testing.T, srv *httptest.Server, cred string) *websocket.Conn {
	t.Helper()
	dialer := websocket.Dialer{TLSClientConfig: srv.Client().Transport.(*http.Transport).TLSClientConfig}
	ws, _, err := dialer.Dial("wss"+strings.TrimPrefix(srv.URL, "https")+transport.ConnectPath, http.Header{"Authorization": {"Bearer " + cred}})
	require.NoError(t, err)
	t.Cleanup(func() { ws.Close() })
	return ws
}

// framesUntilClose reads a connection's frames until it is closed.
func framesUntilClose(t *testing.T, ws *websocket.Conn, within time.Duration) (types []string, errs []transport.ErrorMessage) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_ = ws.SetReadDeadline(deadline)
		_, b, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			require.True(t, errors.As(err, &ce), "the connection is closed with a close frame, got %v (frames %v)", err, types)
			return types, errs
		}
		env, err := transport.Decode(b)
		require.NoError(t, err)
		types = append(types, env.Type)
		if env.Type == transport.TypeError {
			var em transport.ErrorMessage
			require.NoError(t, transport.DecodePayload(env, &em))
			errs = append(errs, em)
		}
	}
}

// A connection opened with a valid credential that says hello only after
// the credential was revoked gets no desired state (no secret), even before
// the control plane's revocation sweep has found it.
func TestRevokedBeforeTheHelloGetsNoDesiredState(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}, revoked: map[string]bool{}}
	hub, srv := startHub(t, w)
	ws := rawAgent(t, srv, "good-late")
	w.mu.Lock()
	w.revoked["good-late"] = true
	w.mu.Unlock()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`)))
	types, errs := framesUntilClose(t, ws, 5*time.Second)
	require.NotContains(t, types, transport.TypeDesiredState)
	require.NotContains(t, types, transport.TypeWelcome)
	require.Len(t, errs, 1)
	require.Equal(t, "credential_revoked", errs[0].Code)
	require.Empty(t, hub.Connected())
	w.mu.Lock()
	require.Zero(t, w.fetches, "no revision was even loaded for it")
	w.mu.Unlock()
}

// Revoking a server closes its connections at once, also one that has not
// said hello yet.
func TestRevocationClosesAConnectionBeforeItsHello(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}, revoked: map[string]bool{}}
	hub, srv := startHub(t, w)
	ws := rawAgent(t, srv, "good-quiet")
	require.Eventually(t, func() bool {
		for _, p := range hub.Connected() {
			if p.ServerID == "good-quiet" {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "the revocation sweep finds a connection that has not said hello")
	w.mu.Lock()
	w.revoked["good-quiet"] = true
	w.mu.Unlock()
	began := time.Now()
	require.True(t, hub.Disconnect("good-quiet", "the server's credential was revoked"))
	types, errs := framesUntilClose(t, ws, 5*time.Second)
	require.Less(t, time.Since(began), 2*time.Second, "closed at once, not at the read timeout")
	require.Equal(t, []string{transport.TypeError}, types)
	require.Equal(t, "credential_revoked", errs[0].Code)
	require.Eventually(t, func() bool { return len(hub.Connected()) == 0 }, 5*time.Second, 5*time.Millisecond)
}

// Each desired state is sent only to a credential valid at that moment: a
// revocation the sweep has not acted on yet already stops the next one.
func TestRevokedCredentialGetsNoFurtherDesiredState(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}, revoked: map[string]bool{}}
	hub, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.client(t, srv, "good-rev").Run(ctx) }()
	require.Eventually(t, func() bool { return a.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)
	w.mu.Lock()
	w.revoked["good-rev"] = true
	w.revs["e1"] = 2
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrRefused)
	case <-time.After(5 * time.Second):
		t.Fatal("the revoked agent was not disconnected")
	}
	require.Equal(t, 1, a.revision("e1"), "revision 2 and its secrets never reached the revoked agent")
}

// When credentials cannot be checked (the database is down), nothing secret
// is sent, nobody is told they are revoked, and delivery resumes after.
func TestCredentialsThatCannotBeCheckedHoldDeliveries(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}, revoked: map[string]bool{}}
	hub, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.client(t, srv, "good-db").Run(ctx) }()
	require.Eventually(t, func() bool { return a.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)
	w.mu.Lock()
	w.down = true
	w.revs["e1"] = 2
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, 1, a.revision("e1"), "not sent while the credential cannot be checked")
	require.Len(t, hub.Connected(), 1, "and not disconnected either")

	// A new connection meanwhile is answered 503, which the agent retries.
	resp, err := srv.Client().Get(srv.URL + transport.ConnectPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	// A hello while credentials cannot be checked waits for the check.
	w.mu.Lock()
	w.down = false
	w.mu.Unlock()
	ws := rawAgent(t, srv, "good-waits")
	w.mu.Lock()
	w.down = true
	w.mu.Unlock()
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`)))
	_ = ws.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, _, err = ws.ReadMessage()
	require.Error(t, err, "no welcome while the credential cannot be checked")
	ws.Close()

	w.mu.Lock()
	w.down = false
	w.mu.Unlock()
	require.NoError(t, hub.Refresh(ctx))
	require.Eventually(t, func() bool { return a.revision("e1") == 2 }, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("the agent stopped: %v", err)
	default:
	}
	ws = rawAgent(t, srv, "good-later")
	require.NoError(t, ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"hello","payload":{"protocol":1,"applied":{}}}`)))
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, b, err := ws.ReadMessage()
	require.NoError(t, err)
	require.Contains(t, string(b), transport.TypeWelcome)
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"hello","payload":{"protocol":1,"version":"1.0.0","arch":"amd64","applied":{"e":1},"facts":{"leader":true}}}`))
	f.Add([]byte(`{"type":"hello","payload":{"protocol":1,"version":"1.0.0","arch":"amd64","applied":{"e":1},"recorded":{"e":{"revision":2,"hash":"h\u0000"}},"facts":{"leader":true}}}`))
	f.Add([]byte(`{"type":"ack","payload":{"environmentId":"e","revision":2,"hash":"h","services":[{"service":"api","state":"failed","reason":"x"}]}}`))
	f.Add([]byte(`{"type":"heartbeat","payload":{"time":"2026-11-30T00:00:00Z","leader":false}}`))
	f.Add([]byte(`{"type":"stage","payload":{"environmentId":"e","deploymentId":"d","service":"api","release":2,"stage":"probing","ready":1,"desired":2,"detail":"x\u0000","time":"2026-11-30T00:00:00Z"}}`))
	f.Add([]byte(`{"type":"status","payload":{"nodes":[{"name":"n","ready":true,"cpu":"1","memory":"1Gi","kubeletVersion":"v1"}],"workloads":[],"events":[]}}`))
	f.Add([]byte(`{"type":"logs","payload":{"environmentId":"e","service":"api","release":1,"pod":"p","container":"c","lines":[{"time":"2026-11-30T00:00:00Z","text":"\xff"}]}}`))
	f.Add([]byte(`{"type":"build_report","payload":{"buildId":"b","state":"failed","exitCode":3,"reason":"exit code: 3\u0000","logTail":["a","\ud800"],"time":"2026-11-30T00:00:00Z"}}`))
	f.Add([]byte(`{"type":"build_logs","payload":{"buildId":"b","container":"build","lines":[{"time":"2026-11-30T00:00:00Z","stream":"stdout","text":"#5 CACHED"}]}}`))
	f.Add([]byte(`{"type":"mesh_report","payload":{"nodes":[{"node":"n1","publicKey":"YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE=","endpoints":["10.0.0.1:51820"],"revision":1}],"clusterNodes":[{"name":"n1","podCIDRs":["10.42.0.0/24"]}]}}`))
	f.Add([]byte(`{"type":"mesh_state","payload":{"clusterId":"c","revision":1,"hash":"h","network":"100.96.0.0/12","nodes":[{"name":"n1","address":"100.96.0.1"}],"peers":[]}}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		env, err := transport.Decode(frame)
		if err != nil {
			return
		}
		var v transport.Validator
		switch env.Type {
		case transport.TypeHello:
			v = &transport.Hello{}
		case transport.TypeAck:
			v = &transport.Ack{}
		case transport.TypeHeartbeat:
			v = &transport.Heartbeat{}
		case transport.TypeStage:
			v = &transport.StageReport{}
		case transport.TypeStatus:
			v = &transport.Status{}
		case transport.TypeLogs:
			v = &transport.Logs{}
		case transport.TypeAgentUpgradeResult:
			v = &transport.AgentUpgradeResult{}
		case transport.TypeBuildReport:
			v = &transport.BuildReport{}
		case transport.TypeBuildLogs:
			v = &transport.BuildLogs{}
		case transport.TypeMeshReport:
			v = &transport.MeshReport{}
		case transport.TypeMeshState:
			v = &transport.MeshState{}
		default:
			return
		}
		if transport.DecodeValid(env, v) != nil {
			return
		}
		// What is accepted is storable: valid UTF-8 without NUL anywhere
		// (re-encoded, a NUL would be \u0000; invalid bytes would be
		// replaced, so compare with the payload as sent).
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("an accepted %s does not encode: %v", env.Type, err)
		}
		if !utf8.Valid(env.Payload) || bytes.Contains(out, []byte(`\u0000`)) {
			t.Fatalf("an accepted %s holds text a table cannot store: %s", env.Type, out)
		}
	})
}

// proxy forwards TCP to a server and can cut every connection, as a network
// outage does.
type proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln}
	t.Cleanup(func() { ln.Close(); p.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestStoppingTheAgentEndsItsConnection(t *testing.T) {
	t.Parallel()
	w := &world{revs: map[string]int{"e1": 1}}
	hub, srv := startHub(t, w)
	a := &agent{applied: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.client(t, srv, "good-stop").Run(ctx) }()
	require.Eventually(t, func() bool { return a.revision("e1") == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	require.Eventually(t, func() bool { return len(hub.Connected()) == 0 }, 5*time.Second, 10*time.Millisecond)
}
