package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// nebula server upgrade and server list against a real control plane of
// version 1.5.0, with a protocol-level agent (the transport client the real
// agent uses) that answers an agent_upgrade by connecting again as 1.5.0.
func TestServerUpgradeCommands(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv(envURL, "")
	t.Setenv(envToken, "")
	t.Setenv(envContext, "")
	bins := t.TempDir()
	for _, arch := range agentbin.Arches {
		require.NoError(t, os.WriteFile(filepath.Join(bins, agentbin.FileName(arch)), []byte("agent "+arch), 0o600))
	}
	srv := servertest.Start(t, servertest.Options{Version: "1.5.0", AgentBinaries: agentbin.Dir(bins)})
	token := srv.Setup(t, "ada@example.com", "acme")
	c := cliRun{t: t}
	c.ok("login", "--url", srv.URL, "--token", token, "--context", "main")
	c.ok("settings", "set", "--agent-auto-upgrade=false")
	var created api.ClusterResponse
	require.NoError(t, json.Unmarshal([]byte(c.ok("cluster", "create", "acme/eu-1", "-o", "json")), &created))

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	reg, err := transport.Register(ctx, srv.URL, nil, transport.RegisterRequest{JoinToken: created.JoinToken.Token, Name: "node-1"})
	require.NoError(t, err)
	var mu sync.Mutex
	version := "1.4.0"
	yes := true
	var agentCancel context.CancelFunc
	var agentDone chan struct{}
	var start func()
	start = func() {
		actx, acancel := context.WithCancel(ctx)
		var agent *transport.Client
		agent, err = transport.NewClient(transport.ClientConfig{
			URL: srv.URL, Credential: reg.Credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond,
			MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
			Hello: func(context.Context) transport.Hello {
				mu.Lock()
				defer mu.Unlock()
				return transport.Hello{Protocol: transport.ProtocolVersion, Version: version, Arch: "amd64", Applied: map[string]int{}, Upgradable: &yes}
			},
			Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
				return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash}
			},
			Upgrade: func(u transport.AgentUpgrade) {
				go func() {
					_ = agent.Send(transport.TypeAgentUpgradeResult, transport.AgentUpgradeResult{ID: u.ID, Version: u.Version, OK: true, Step: transport.UpgradeStepReplace})
					mu.Lock()
					stop, done := agentCancel, agentDone
					mu.Unlock()
					stop()
					<-done
					mu.Lock()
					version = u.Version
					mu.Unlock()
					start()
				}()
			},
		})
		require.NoError(t, err)
		done := make(chan struct{})
		mu.Lock()
		agentCancel, agentDone = acancel, done
		mu.Unlock()
		go func() {
			defer close(done)
			_ = agent.Run(actx)
		}()
	}
	start()
	defer func() {
		mu.Lock()
		stop, done := agentCancel, agentDone
		mu.Unlock()
		stop()
		<-done
	}()

	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^\S+\s+node-1\s+Connected\s+1\.4\.0\s+Behind 1\.5\.0\s+-\s`).MatchString(c.ok("server", "list", "acme/eu-1"))
	}, 20*time.Second, 100*time.Millisecond, "server list shows the skew, and no last upgrade yet")

	// Wrong shapes are usage errors.
	r := c.run("", "server", "upgrade", "acme/eu-1")
	require.Equal(t, exitUsage, exitCode(r.failed), r.err)
	r = c.run("", "server", "upgrade", "acme/eu-1/nope")
	require.Equal(t, exitNotFound, exitCode(r.failed), r.err)

	out := c.ok("server", "upgrade", "acme/eu-1/node-1")
	require.Contains(t, out, "Upgrading the agent of acme/eu-1/node-1 from 1.4.0 to 1.5.0")
	require.Eventually(t, func() bool {
		return regexp.MustCompile(`(?m)^\S+\s+node-1\s+Connected\s+1\.5\.0\s+-\s+succeeded 1\.5\.0\s`).MatchString(c.ok("server", "list", "acme/eu-1"))
	}, 30*time.Second, 100*time.Millisecond, "server list shows the upgrade succeeded")

	// The agent is current now: single upgrade and rollout are refused
	// with the conflict exit code.
	r = c.run("", "server", "upgrade", "acme/eu-1/node-1")
	require.Equal(t, exitConflict, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "already runs 1.5.0")
	r = c.run("", "server", "upgrade", "--all", "acme")
	require.Equal(t, exitConflict, exitCode(r.failed), r.err)
	require.Contains(t, r.err, "can be upgraded")
}
