package console_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

func meshKey(t *testing.T) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(b)
}

// The Mesh page in headless Chromium against a real control plane, with a
// cluster's agent over the real protocol reporting two mesh nodes: each
// node with the address the control plane gave it, its key fingerprint and
// endpoint, Unreachable with the reason (no handshake yet); Rotate keys of
// the cluster asks both nodes for new keys (the API says so, the audit log
// says mesh.key.rotate, the page marks them rotating). axe-core runs on it.
func TestMeshPageInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	shots := screenshots(t)
	srv := servertest.Start(t, servertest.Options{})
	root := srv.Setup(t, "ada@example.com", "acme")
	var cl api.ClusterResponse
	require.Equal(t, http.StatusCreated, apiCall(t, "POST", srv.URL+"/api/v1/orgs/acme/clusters", root, map[string]any{"name": "eu-1"}, &cl))
	reg, err := transport.Register(t.Context(), srv.URL, nil, transport.RegisterRequest{JoinToken: cl.JoinToken.Token, Name: "eu-1-a"})
	require.NoError(t, err)
	connected := make(chan struct{}, 1)
	c, err := transport.NewClient(transport.ClientConfig{URL: srv.URL, Credential: reg.Credential, AllowPlain: true,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}, Mesh: true}
		},
		Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
		},
		MeshState:   func(transport.MeshState) {},
		OnConnected: func(transport.Welcome) { connected <- struct{}{} },
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = c.Run(ctx) }()
	select {
	case <-connected:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not connect")
	}
	k1, k2 := meshKey(t), meshKey(t)
	require.NoError(t, c.Send(transport.TypeMeshReport, transport.MeshReport{
		Nodes: []transport.MeshNodeReport{
			{Node: "n1", PublicKey: k1, Endpoints: []string{"203.0.113.1:51820"}},
			{Node: "n2", PublicKey: k2, Endpoints: []string{"203.0.113.2:51820"}},
		},
		ClusterNodes: []transport.MeshClusterNode{{Name: "n1"}, {Name: "n2"}},
	}))
	var m api.Mesh
	require.Eventually(t, func() bool {
		require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/mesh", root, nil, &m))
		return len(m.Nodes) == 2
	}, 20*time.Second, 50*time.Millisecond, "the control plane took the report")

	b := startBrowser(t, chrome, srv.URL, shots)
	b.signIn("ada@example.com", "/o/acme/mesh", `tr[data-node="eu-1/n1"]`)
	b.visit("mesh")
	row := b.text(`tr[data-node="eu-1/n1"]`)
	require.Contains(t, row, "100.96.0.1")
	require.Contains(t, row, k1[:8])
	require.Contains(t, row, "203.0.113.1:51820")
	require.Contains(t, row, "Unreachable")
	require.Contains(t, row, "no handshake with any peer yet")
	require.Contains(t, b.text(`tr[data-node="eu-1/n2"]`), "100.96.0.2")
	require.Equal(t, "100.96.0.0/12", b.text("#mesh-network"))

	b.submit(`button.rotate[data-cluster="eu-1"]`, ".notice")
	require.Contains(t, b.text(".notice"), "New keys asked of the nodes of eu-1")
	require.Contains(t, b.text(`tr[data-node="eu-1/n1"]`), "rotating")
	require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/orgs/acme/mesh", root, nil, &m))
	for _, n := range m.Nodes {
		require.True(t, n.RotateRequested, n.Node)
	}
	require.Eventually(t, func() bool {
		var pg struct {
			Items []api.AuditEntry `json:"items"`
		}
		require.Equal(t, http.StatusOK, apiCall(t, "GET", srv.URL+"/api/v1/audit?limit=1000", root, nil, &pg))
		n := 0
		for _, e := range pg.Items {
			if e.Action == "mesh.key.rotate" && strings.Contains(e.Detail, "rotation requested (request)") {
				n++
			}
		}
		return n == 2
	}, 30*time.Second, 100*time.Millisecond, "the audit log has both requests, as mesh.key.rotate")
}
