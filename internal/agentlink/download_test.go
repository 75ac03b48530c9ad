package agentlink_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/agentlink"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// get fetches a download path with a credential; it returns the status, the
// body and the error code of a JSON error.
func get(t *testing.T, url, cred string) (int, http.Header, []byte, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	require.NoError(t, err)
	if cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var e struct{ Error struct{ Code string } }
	if resp.StatusCode >= 400 {
		require.NoError(t, json.Unmarshal(b, &e), string(b))
	}
	return resp.StatusCode, resp.Header, b, e.Error.Code
}

// The agent binary is served at /agent/v1/download/<arch> to an agent's own
// valid credential only, with its SHA-256 (header and .sha256); an unknown
// architecture and one the control plane was built without are told apart
// (unknown_architecture, no_agent_binary); a revoked credential gets
// nothing. A control plane of a plain go build serves no binary at all.
func TestAgentBinaryDownload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := []byte("\x7fELF pretend agent binary for amd64")
	require.NoError(t, os.WriteFile(filepath.Join(dir, agentbin.FileName("amd64")), bin, 0o644))
	s := servertest.Start(t, servertest.Options{AgentBinaries: agentbin.Dir(dir)})
	root := s.Setup(t, "root@example.com", "acme")
	org := s.URL + "/api/v1/orgs/acme"
	var cluster api.ClusterResponse
	require.Equal(t, 201, call(t, "POST", org+"/clusters", root, map[string]string{"name": "eu-1"}, &cluster))
	srv, err := transport.Register(context.Background(), s.URL, nil, transport.RegisterRequest{JoinToken: cluster.JoinToken.Token, Name: "agent-0"})
	require.NoError(t, err)
	base := s.URL + transport.DownloadPath

	want := sha256.Sum256(bin)
	status, h, body, _ := get(t, base+"amd64", srv.Credential)
	require.Equal(t, 200, status)
	require.Equal(t, bin, body)
	require.Equal(t, hex.EncodeToString(want[:]), h.Get("X-Checksum-Sha256"))
	require.Equal(t, "application/octet-stream", h.Get("Content-Type"))
	status, _, body, _ = get(t, base+"amd64.sha256", srv.Credential)
	require.Equal(t, 200, status)
	require.Equal(t, hex.EncodeToString(want[:])+"  nebulactrl-agent-linux-amd64\n", string(body))
	b, err := s.Link.Binary("amd64")
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(want[:]), b.SHA256, "the link gives the SHA-256 that goes into an agent_upgrade")

	for _, c := range []struct {
		path, cred string
		status     int
		code       string
	}{
		{"amd64", "", 401, "unauthorized"},
		{"amd64", root, 401, "unauthorized"}, // a person's token is not an agent's credential
		{"amd64", srv.Credential + "x", 401, "unauthorized"},
		{"arm64", srv.Credential, 404, "no_agent_binary"},
		{"arm64.sha256", srv.Credential, 404, "no_agent_binary"},
		{"riscv64", srv.Credential, 404, "unknown_architecture"},
		{"..%2f..%2fetc%2fpasswd", srv.Credential, 404, "unknown_architecture"},
	} {
		status, _, _, code := get(t, base+c.path, c.cred)
		require.Equal(t, c.status, status, c.path)
		require.Equal(t, c.code, code, c.path)
	}

	require.Equal(t, 204, call(t, "DELETE", org+"/clusters/eu-1/servers/"+srv.ServerID, root, nil, nil))
	status, _, _, code := get(t, base+"amd64", srv.Credential)
	require.Equal(t, 401, status, "a revoked server downloads nothing")
	require.Equal(t, "unauthorized", code)

	// A plain build embeds no binary.
	_, err = agentbin.Embedded().Binary("amd64")
	require.ErrorIs(t, err, agentbin.ErrNoBinary)
	_, err = agentbin.Embedded().Binary("mips")
	require.ErrorIs(t, err, agentbin.ErrUnknownArch)
}

// Link.SendUpgrade reaches a connected server's agent, whose answer comes
// back through OnUpgradeResult; a server that is not connected is
// ErrServerOffline.
func TestSendUpgradeAndItsResult(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	root := s.Setup(t, "root@example.com", "acme")
	org := s.URL + "/api/v1/orgs/acme"
	var cluster api.ClusterResponse
	require.Equal(t, 201, call(t, "POST", org+"/clusters", root, map[string]string{"name": "eu-1"}, &cluster))
	srv, err := transport.Register(context.Background(), s.URL, nil, transport.RegisterRequest{JoinToken: cluster.JoinToken.Token, Name: "agent-0"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = s.Link.SendUpgrade(ctx, srv.ServerID, transport.AgentUpgrade{ID: "u1", Version: "2.0.0", SHA256: strings.Repeat("0", 64)})
	require.True(t, errors.Is(err, agentlink.ErrServerOffline), "%v", err)

	var mu sync.Mutex
	var results []transport.AgentUpgradeResult
	s.Link.OnUpgradeResult = func(ctx context.Context, serverID string, r transport.AgentUpgradeResult) {
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, srv.ServerID, serverID)
		results = append(results, r)
	}
	var c *transport.Client
	yes := true
	c, err = transport.NewClient(transport.ClientConfig{URL: s.URL, Credential: srv.Credential, AllowPlain: true,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}, Upgradable: &yes}
		},
		Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Services: []transport.ServiceOutcome{}}
		},
		Upgrade: func(u transport.AgentUpgrade) {
			go func() {
				_ = c.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, Step: 2, Error: "the download's SHA-256 differs"})
			}()
		},
	})
	require.NoError(t, err)
	go func() { _ = c.Run(ctx) }()
	require.Eventually(t, func() bool {
		return s.Link.SendUpgrade(ctx, srv.ServerID, transport.AgentUpgrade{ID: "u2", Version: "2.0.0", SHA256: strings.Repeat("0", 64)}) == nil
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) > 0
	}, 10*time.Second, 20*time.Millisecond)
	mu.Lock()
	require.Equal(t, transport.AgentUpgradeResult{ID: "u2", Version: "2.0.0", Step: 2, Error: "the download's SHA-256 differs"}, results[0])
	mu.Unlock()
}
