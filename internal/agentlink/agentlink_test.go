package agentlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func call(t *testing.T, method, url, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(t, json.Unmarshal(b, out), string(b))
	}
	return resp.StatusCode
}

// itemsOf decodes the items of a list's page ({"items": [...], "next"}) into v.
func itemsOf(v any) any {
	return &struct {
		Items any `json:"items"`
	}{v}
}

// fakeAgent is a protocol client that records what it receives: the agent's
// reconcile is tested against a real API server elsewhere; here the subject
// is the control plane's side of the link.
type fakeAgent struct {
	mu      sync.Mutex
	applied map[string]int
	docs    map[string]transport.DesiredState
}

func (f *fakeAgent) run(t *testing.T, ctx context.Context, url, cred string) <-chan error {
	t.Helper()
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: cred, AllowPlain: true, Heartbeat: 100 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			f.mu.Lock()
			defer f.mu.Unlock()
			applied := map[string]int{}
			for k, v := range f.applied {
				applied[k] = v
			}
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: applied}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.applied[ds.EnvironmentID] = ds.Revision
			f.docs[ds.EnvironmentID] = ds
			out := []transport.ServiceOutcome{}
			for _, s := range ds.Document.Services {
				out = append(out, transport.ServiceOutcome{Service: s.Name, State: "applied"})
			}
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: out}
		},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return done
}

func (f *fakeAgent) revision(env string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.applied[env]
}

// The control plane's side of the link, end to end: a server registers with
// the cluster's join token, connects, receives each environment's desired
// state with its secrets opened (also when the revision was made on another
// replica), acknowledges it; heartbeats keep the cluster Connected; without
// them it shows Disconnected and pending deployments get the delivery
// blocker; revoking the server disconnects it at once.
func TestAgentLink(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	reg := httptest.NewServer(registry.New())
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	img, err := random.Image(256, 1)
	require.NoError(t, err)
	ref, err := name.ParseReference(host+"/api:v1", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.Write(ref, img))
	a := servertest.Start(t, servertest.Options{Now: now, Insecure: []string{host}})
	b := servertest.Start(t, servertest.Options{DatabaseURL: a.DatabaseURL, SecretKey: a.SecretKey, Now: now, Insecure: []string{host}})
	root := a.Setup(t, "root@example.com", "acme")
	org := a.URL + "/api/v1/orgs/acme"
	var cluster api.ClusterResponse
	require.Equal(t, 201, call(t, "POST", org+"/clusters", root, map[string]string{"name": "eu-1"}, &cluster))
	for _, step := range []struct {
		path string
		body any
	}{
		{"/projects", map[string]string{"name": "shop"}},
		{"/projects/shop/environments", map[string]string{"name": "staging", "cluster": "eu-1"}},
		{"/projects/shop/services", map[string]any{"name": "api", "image": "nginx:1", "port": 8080}},
	} {
		require.Equal(t, 201, call(t, "POST", org+step.path, root, step.body, nil), step.path)
	}
	var env api.Environment
	require.Equal(t, 200, call(t, "GET", org+"/projects/shop/environments/staging", root, nil, &env))

	// Registration: a bad token is refused, the right one gives a credential.
	_, err = transport.Register(context.Background(), a.URL, nil, transport.RegisterRequest{JoinToken: "nbl_nope", Name: "agent-0"})
	require.Error(t, err)
	srv, err := transport.Register(context.Background(), a.URL, nil, transport.RegisterRequest{JoinToken: cluster.JoinToken.Token, Name: "agent-0"})
	require.NoError(t, err)
	require.Equal(t, cluster.ID, srv.ClusterID)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := &fakeAgent{applied: map[string]int{}, docs: map[string]transport.DesiredState{}}
	done := agent.run(t, ctx, a.URL, srv.Credential)
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v", err)
		default:
		}
		return agent.revision(env.ID) >= 1
	}, 10*time.Second, 10*time.Millisecond, "the agent receives the environment's desired state")

	// A secret set through the other replica reaches the agent opened.
	require.Equal(t, 200, call(t, "PUT", b.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/services/api/variables", root,
		map[string]any{"variables": []map[string]any{{"name": "TOKEN", "value": "s3cret-value-123", "secret": true}}}, nil))
	var deploy api.DeployResponse
	require.Equal(t, 202, call(t, "POST", b.URL+"/api/v1/orgs/acme/projects/shop/environments/staging/services/api/deployments", root,
		map[string]string{"image": host + "/api:v1"}, &deploy))
	require.Eventually(t, func() bool {
		agent.mu.Lock()
		defer agent.mu.Unlock()
		ds := agent.docs[env.ID]
		for _, svc := range ds.Document.Services {
			for _, v := range svc.Variables {
				if v.Name == "TOKEN" {
					return v.Value == "s3cret-value-123" && v.Secret == nil
				}
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the deployment made on the other replica reaches the agent, its secret opened")

	var acks []api.Acknowledgement
	require.Eventually(t, func() bool {
		call(t, "GET", org+"/projects/shop/environments/staging/acknowledgements", root, nil, itemsOf(&acks))
		return len(acks) == 1 && acks[0].Revision == agent.revision(env.ID) && acks[0].Server == "agent-0"
	}, 10*time.Second, 20*time.Millisecond, "acknowledgements are recorded")

	var cl api.ClusterResponse
	require.Eventually(t, func() bool {
		call(t, "GET", org+"/clusters/eu-1", root, nil, &cl)
		return cl.Status.State == api.StateConnected
	}, 10*time.Second, 20*time.Millisecond)

	// 61 seconds without a heartbeat (by the injected clock): Disconnected,
	// and a deployment still on its way shows the blocker "delivery".
	var deps []api.DeploymentView
	require.Equal(t, 200, call(t, "GET", org+"/projects/shop/environments/staging/services/api/deployments", root, nil, itemsOf(&deps)))
	require.Len(t, deps, 1)
	require.Empty(t, deps[0].Blockers, "the cluster is connected")
	// The fake agent keeps sending heartbeats, stamped by the same clock: one
	// that lands between the jump and the reads makes the cluster connected
	// again, so the clock jumps again (a few times at most).
	for try := 1; ; try++ {
		offset.Store(int64(time.Duration(try) * 61 * time.Second))
		call(t, "GET", org+"/clusters/eu-1", root, nil, &cl)
		require.Equal(t, 200, call(t, "GET", org+"/projects/shop/environments/staging/services/api/deployments", root, nil, itemsOf(&deps)))
		if cl.Status.State == api.StateDisconnected && len(deps[0].Blockers) == 1 || try == 3 {
			break
		}
	}
	require.Equal(t, api.StateDisconnected, cl.Status.State)
	require.Equal(t, []string{"delivery"}, deps[0].Blockers)
	offset.Store(0)

	// The audit log tells of the registration and the connection.
	var page api.AuditPage
	require.Equal(t, 200, call(t, "GET", org+"/audit?action=server.*", root, nil, &page))
	actions := map[string]bool{}
	for _, e := range page.Items {
		actions[e.Action] = true
	}
	require.True(t, actions["server.register"], "%v", actions)
	require.True(t, actions["server.agent.connect"], "%v", actions)

	// Revoking the server disconnects it at once and refuses it afterwards.
	require.Equal(t, 204, call(t, "DELETE", org+"/clusters/eu-1/servers/"+srv.ServerID, root, nil, nil))
	select {
	case err := <-done:
		require.ErrorIs(t, err, transport.ErrRefused)
	case <-time.After(15 * time.Second):
		t.Fatal("the revoked agent was not disconnected")
	}
	err = <-agent.run(t, ctx, a.URL, srv.Credential)
	require.ErrorIs(t, err, transport.ErrRefused)
}

// A connection opened with a valid credential that says hello only after
// the server was revoked receives no desired state (which carries opened
// secrets): the credential is checked again at the hello and before each
// desired state, not only at the upgrade.
func TestRevokedBeforeTheHelloGetsNoDesiredState(t *testing.T) {
	t.Parallel()
	a := servertest.Start(t, servertest.Options{})
	root := a.Setup(t, "root@example.com", "acme")
	org := a.URL + "/api/v1/orgs/acme"
	var cluster api.ClusterResponse
	require.Equal(t, 201, call(t, "POST", org+"/clusters", root, map[string]string{"name": "eu-1"}, &cluster))
	require.Equal(t, 201, call(t, "POST", org+"/projects", root, map[string]string{"name": "shop"}, nil))
	require.Equal(t, 201, call(t, "POST", org+"/projects/shop/environments", root, map[string]string{"name": "staging", "cluster": "eu-1"}, nil))
	srv, err := transport.Register(context.Background(), a.URL, nil, transport.RegisterRequest{JoinToken: cluster.JoinToken.Token, Name: "agent-0"})
	require.NoError(t, err)

	// Before the revocation, a hello is answered with the welcome and the
	// environment's desired state.
	dial := func() *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(a.URL, "http")+transport.ConnectPath,
			http.Header{"Authorization": {"Bearer " + srv.Credential}})
		require.NoError(t, err)
		t.Cleanup(func() { ws.Close() })
		return ws
	}
	hello := []byte(`{"type":"hello","payload":{"protocol":1,"version":"1.0.0","arch":"amd64","applied":{}}}`)
	read := func(ws *websocket.Conn, until time.Time) (string, error) {
		_ = ws.SetReadDeadline(until)
		_, b, err := ws.ReadMessage()
		if err != nil {
			return "", err
		}
		env, err := transport.Decode(b)
		require.NoError(t, err)
		return env.Type, nil
	}
	before := dial()
	require.NoError(t, before.WriteMessage(websocket.TextMessage, hello))
	var types []string
	for !slices.Contains(types, transport.TypeDesiredState) {
		typ, err := read(before, time.Now().Add(10*time.Second))
		require.NoError(t, err, "frames so far: %v", types)
		types = append(types, typ)
	}
	before.Close()

	// Connected, then revoked, then hello.
	late := dial()
	require.Equal(t, 204, call(t, "DELETE", org+"/clusters/eu-1/servers/"+srv.ServerID, root, nil, nil))
	require.NoError(t, late.WriteMessage(websocket.TextMessage, hello))
	types = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		typ, err := read(late, deadline)
		if err != nil {
			var ce *websocket.CloseError
			require.True(t, errors.As(err, &ce), "the control plane closes the connection, got %v", err)
			break
		}
		types = append(types, typ)
	}
	require.NotContains(t, types, transport.TypeDesiredState, "nothing secret reaches a revoked credential")
	require.NotContains(t, types, transport.TypeWelcome)
}
