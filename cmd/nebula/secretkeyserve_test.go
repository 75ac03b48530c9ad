package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/transport"
)

// deliveries is a transport-level agent that keeps the secret value of
// every desired state it is sent.
type deliveries struct {
	mu  sync.Mutex
	got map[int]string // revision -> DB_PASSWORD as delivered
}

func (d *deliveries) at(rev int) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.got[rev]
	return v, ok
}

func (d *deliveries) run(t *testing.T, ctx context.Context, url, credential string) {
	t.Helper()
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: "amd64", Applied: map[string]int{}}
		},
		Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
			d.mu.Lock()
			defer d.mu.Unlock()
			v := "(no such variable)"
			for _, s := range ds.Document.Services {
				if s.Held {
					v = "(held: " + s.HeldReason + ")"
				}
				for _, vr := range s.Variables {
					if vr.Name == "DB_PASSWORD" {
						v = vr.Value
					}
				}
			}
			d.got[ds.Revision] = v
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
		},
	})
	require.NoError(t, err)
	go func() { _ = c.Run(ctx) }()
}

// Secrets stay deliverable throughout a rotation (issue 17, item 5), through
// a serving control plane: a secret set while the old key was the only one
// is sent, opened, to the cluster's agent in every revision compiled while
// `nebula secret-key rotate` runs under a control plane holding both keys,
// while it is killed with SIGKILL and while the second run finishes; then a
// control plane with the new key alone still delivers it.
func TestSecretsReachAgentsThroughoutARotation(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nebula")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nebulactrl/nebulactrl/cmd/nebula").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	dbURL := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	gen := func() (string, seal.MasterKey) {
		s, err := seal.GenerateMasterKey()
		require.NoError(t, err)
		k, err := seal.ParseMasterKey(s)
		require.NoError(t, err)
		return s, k
	}
	oldEnc, oldKey := gen()
	newEnc, newKey := gen()

	// Under the old key alone: the organisation, its agent, and the secret.
	host := registrytest.Start(t, "api:v1", "api:v2")
	addr := freeListenAddr(t)
	a := servertest.Start(t, servertest.Options{DatabaseURL: dbURL, SecretKey: oldEnc, Listen: addr, Insecure: []string{host}})
	token := a.Setup(t, "ada@example.com", "acme")
	cl, err := client.New(a.URL, token)
	require.NoError(t, err)
	created, err := cl.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	reg, err := transport.Register(ctx, a.URL, nil, transport.RegisterRequest{JoinToken: created.JoinToken.Token, Name: "node-1"})
	require.NoError(t, err)
	_, err = cl.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	_, err = cl.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	_, err = cl.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "api", Image: host + "/api:v1"})
	require.NoError(t, err)
	const secret = "s3cret-through-the-rotation"
	_, err = cl.SetVariables(ctx, "acme", "shop", "staging", "api", []api.VariableInput{{Name: "DB_PASSWORD", Value: secret, Secret: true}})
	require.NoError(t, err)
	// Data keys enough for the rotation to take a while.
	{
		s := seal.New(pool, oldKey, nil)
		for i := range 600 {
			_, err := s.Seal(ctx, "", fmt.Appendf(nil, "filler %d", i))
			require.NoError(t, err)
		}
	}
	a.Stop()

	// Both keys, as the runbook says, and the agent connected.
	b := servertest.Start(t, servertest.Options{DatabaseURL: dbURL, SecretKey: newEnc, PreviousSecretKey: oldEnc, Listen: addr, Insecure: []string{host}})
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agent := &deliveries{got: map[int]string{}}
	agent.run(t, agentCtx, b.URL, reg.Credential)

	// deploy compiles the next revision and waits for the agent to have
	// it; the secret must arrive opened.
	img := 0
	deploy := func(c *client.Client, when string) {
		t.Helper()
		img++
		_, err := c.Deploy(ctx, "acme", "shop", "staging", "api", fmt.Sprintf("%s/api:v%d", host, 1+img%2))
		require.NoError(t, err)
		var rev api.Revision
		require.Eventually(t, func() bool {
			rev, err = c.State(ctx, "acme", "shop", "staging", client.StateQuery{})
			if err != nil {
				return false
			}
			_, ok := agent.at(rev.Number)
			return ok && rev.Document.Services[0].Release != nil
		}, 30*time.Second, 20*time.Millisecond, "%s: the revision reaches the agent", when)
		v, _ := agent.at(rev.Number)
		require.Equal(t, secret, v, "%s: revision %d carries the secret, opened", when, rev.Number)
	}
	clB, err := client.New(b.URL, token)
	require.NoError(t, err)
	deploy(clB, "both keys, before the rotation")

	p := keyProc{t: t, bin: bin, dir: dir, dbURL: dbURL, current: newEnc, previous: oldEnc}
	rotated := func() int {
		cs, err := seal.CountByMasterKey(ctx, pool)
		require.NoError(t, err)
		for _, c := range cs {
			if c.MasterKeyID == newKey.ID() {
				return c.DataKeys
			}
		}
		return 0
	}
	rot := p.cmd("secret-key", "rotate", "--batch-size", "5", "--pause", "50ms")
	var rotOut strings.Builder
	rot.Stdout, rot.Stderr = &rotOut, &rotOut
	require.NoError(t, rot.Start())
	started := rotated()
	deadline := time.Now().Add(time.Minute)
	for deploys := 0; deploys < 3 || rotated() < started+50; deploys++ {
		require.True(t, time.Now().Before(deadline), "the rotation made no progress: %s", rotOut.String())
		deploy(clB, "during the rotation")
	}
	require.NoError(t, rot.Process.Signal(os.Kill))
	require.Error(t, rot.Wait())
	mid := rotated()
	cs, err := seal.CountByMasterKey(ctx, pool)
	require.NoError(t, err)
	require.Len(t, cs, 2, "killed in the middle: data keys under both master keys")
	deploy(clB, "after the rotation was killed")

	stdout, stderr, code := p.run("secret-key", "rotate", "--batch-size", "10")
	require.Zero(t, code, stdout+stderr)
	require.Contains(t, stdout, "rotation finished")
	require.Greater(t, rotated(), mid)
	deploy(clB, "after the rotation finished, both keys")
	b.Stop()

	// The new key alone.
	c := servertest.Start(t, servertest.Options{DatabaseURL: dbURL, SecretKey: newEnc, Listen: addr, Insecure: []string{host}})
	clC, err := client.New(c.URL, token)
	require.NoError(t, err)
	deploy(clC, "the new key alone")
	cs, err = seal.CountByMasterKey(ctx, pool)
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, newKey.ID(), cs[0].MasterKeyID, "every data key is under the new key")
}

func freeListenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
