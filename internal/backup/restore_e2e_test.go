package backup_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/lockedbuf"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/transport"
)

// recorder is a transport-level agent: it connects with its credential,
// reports nothing applied at each hello (so every connection is sent the
// environment's latest revision) and keeps what it was sent.
type recorder struct {
	mu       sync.Mutex
	connects int
	got      map[string]transport.DesiredState
}

func (r *recorder) latest(env string) (transport.DesiredState, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[env], r.connects
}

func (r *recorder) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = map[string]transport.DesiredState{}
}

func (r *recorder) run(t *testing.T, ctx context.Context, url, credential string) <-chan error {
	t.Helper()
	c, err := transport.NewClient(transport.ClientConfig{
		URL: url, Credential: credential, AllowPlain: true, Heartbeat: 200 * time.Millisecond,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: 300 * time.Millisecond,
		Hello: func(context.Context) transport.Hello {
			return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.4.0", Arch: "amd64", Applied: map[string]int{}}
		},
		Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.got[ds.EnvironmentID] = ds
			out := []transport.ServiceOutcome{}
			for _, s := range ds.Document.Services {
				out = append(out, transport.ServiceOutcome{Service: s.Name, State: "applied"})
			}
			return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: out}
		},
		OnConnected: func(transport.Welcome) { r.mu.Lock(); r.connects++; r.mu.Unlock() },
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	return done
}

func secretOf(ds transport.DesiredState, service, name string) (string, bool) {
	for _, s := range ds.Document.Services {
		if s.Name != service {
			continue
		}
		for _, v := range s.Variables {
			if v.Name == name {
				return v.Value, v.Secret == nil
			}
		}
	}
	return "", false
}

// burnTransactions moves a PostgreSQL cluster's transaction counter past
// floor: each statement outside a transaction block that asks for its id
// takes one.
func burnTransactions(t *testing.T, u string, floor uint64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for {
		var cur uint64
		require.NoError(t, conn.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&cur))
		if cur > floor {
			return
		}
	}
}

func currentTransaction(t *testing.T, u string) uint64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var cur uint64
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT pg_current_xact_id()::text::bigint`).Scan(&cur))
	return cur
}

// A restore you can trust (issue 17, item 7), as the runbook in
// docs/operations.md does it: a control plane of 1.4.0 runs on database A
// with an organisation, a cluster with a connected agent, a project whose
// environment has a service with a secret variable, and a few deployments;
// 1.5.0 starts on A and takes its pre-upgrade backup (manifest, SHA-256).
// That dump is restored, as `nebula backup restore` does, into B, a new
// database on a new PostgreSQL (a new machine's: its transaction counter
// starts low), and 1.4.0 starts on B with the same master key at the same
// address. The agent reconnects with its credential and is sent the
// environment's latest revision, the same number, hash and document as on A,
// its secret opened; what happens next on B (the agent's connect, a new
// deployment) is projected and reaches the agent; nebula audit replay is
// equal and the audit chain verifies. Restored with another key, the server
// says the sealed values are unreadable and the secret's service is held.
func TestRestoredPreUpgradeBackupServes(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "backups")
	t.Setenv(backup.EnvDir, dir)

	// The new machine's PostgreSQL, started first: its transaction counter
	// is where a new cluster's is. Not t.TempDir: PostgreSQL runs as another
	// user when the tests run as root.
	data, err := os.MkdirTemp("", "nebula-restore-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(data) })
	bURL, cluster, err := database.Managed(ctx, data, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Stop(context.Background()) })
	// A's PostgreSQL has run far more transactions than B's (as a
	// production one has): every event of A has a transaction id above
	// what B's next transactions get.
	aURL := pgtest.URL(t)
	burnTransactions(t, aURL, currentTransaction(t, bURL)+5_000)

	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	host := registrytest.Start(t, "api:v1", "api:v2")
	a := servertest.Start(t, servertest.Options{DatabaseURL: aURL, SecretKey: key, Version: "1.4.0", Insecure: []string{host}})
	addr := strings.TrimPrefix(a.URL, "http://")
	token := a.Setup(t, "ada@example.com", "acme")
	cl, err := client.New(a.URL, token)
	require.NoError(t, err)
	created, err := cl.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	require.NoError(t, err)
	reg, err := transport.Register(ctx, a.URL, nil, transport.RegisterRequest{JoinToken: created.JoinToken.Token, Name: "node-1"})
	require.NoError(t, err)
	agentCtx, stopAgent := context.WithCancel(ctx)
	defer stopAgent()
	agent := &recorder{got: map[string]transport.DesiredState{}}
	agentDone := agent.run(t, agentCtx, a.URL, reg.Credential)

	_, err = cl.CreateProject(ctx, "acme", "shop")
	require.NoError(t, err)
	env, err := cl.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"})
	require.NoError(t, err)
	port := 8080
	_, err = cl.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "api", Image: host + "/api:v1", Port: &port})
	require.NoError(t, err)
	secret := "s3cret-restored-value"
	_, err = cl.SetVariables(ctx, "acme", "shop", "staging", "api", []api.VariableInput{
		{Name: "DB_PASSWORD", Value: secret, Secret: true}, {Name: "LOG_LEVEL", Value: "info"}})
	require.NoError(t, err)
	for _, img := range []string{"api:v1", "api:v2", "api:v1"} {
		_, err = cl.Deploy(ctx, "acme", "shop", "staging", "api", host+"/"+img)
		require.NoError(t, err)
	}
	// The environment's latest revision, once the agent has it.
	var before api.Revision
	require.Eventually(t, func() bool {
		before, err = cl.State(ctx, "acme", "shop", "staging", client.StateQuery{})
		require.NoError(t, err)
		ds, _ := agent.latest(env.ID)
		rel := ""
		for _, s := range before.Document.Services {
			if s.Release != nil {
				rel = s.Release.Image
			}
		}
		return before.Number >= 3 && strings.Contains(rel, "@sha256:") && ds.Revision == before.Number && ds.Hash == before.Hash
	}, 30*time.Second, 50*time.Millisecond, "the agent has A's latest revision")
	onA, _ := agent.latest(env.ID)
	v, ok := secretOf(onA, "api", "DB_PASSWORD")
	require.True(t, ok)
	require.Equal(t, secret, v)
	releasesA, err := cl.Releases(ctx, "acme", "shop", "staging", "api")
	require.NoError(t, err)
	require.Len(t, releasesA, 3)
	require.Eventually(t, func() bool {
		c, err := cl.Cluster(ctx, "acme", "eu-1")
		require.NoError(t, err)
		return c.Status.State == api.StateConnected
	}, 20*time.Second, 50*time.Millisecond)

	// The upgrade: 1.5.0 starts on A and backs up before migrating.
	a.Stop()
	a2 := servertest.Start(t, servertest.Options{DatabaseURL: aURL, SecretKey: key, Version: "1.5.0", Listen: addr, Insecure: []string{host}})
	list, err := backup.List(dir)
	require.NoError(t, err)
	require.Len(t, list, 1, "1.5.0 took a pre-upgrade backup at start")
	m := list[0]
	require.Equal(t, backup.TriggerBeforeUpgrade, m.Trigger)
	require.Equal(t, "1.5.0", m.TargetVersion)
	require.NoError(t, backup.Verify(dir, m))
	aPool := open(t, aURL)
	last, err := backup.LastPreUpgrade(ctx, aPool)
	require.NoError(t, err)
	require.True(t, last.Succeeded)
	require.Equal(t, backup.SourceStartup, last.Source)
	require.Equal(t, "1.4.0", last.FromVersion)
	require.Equal(t, m.Dump, last.Dump)
	require.Equal(t, m.SHA256, last.SHA256)
	a2.Stop()

	// The restore, as `nebula backup restore DUMP --database-url B` calls
	// it, into B on the new PostgreSQL.
	dump := filepath.Join(dir, m.Dump)
	got, err := backup.Restore(ctx, "", dump, bURL)
	require.NoError(t, err)
	require.Equal(t, m, got)
	// Restoring again into B (no longer empty) is refused.
	_, err = backup.Restore(ctx, "", dump, bURL)
	require.ErrorIs(t, err, backup.ErrNotEmpty)

	// The version the database was at starts on B, with the same key, where
	// the control plane was: it needs no backup (the stored version is its
	// own), and the agent finds it.
	agent.forget()
	_, connectsBefore := agent.latest(env.ID)
	b := servertest.Start(t, servertest.Options{DatabaseURL: bURL, SecretKey: key, Version: "1.4.0", Listen: addr, Insecure: []string{host}})
	bPool := open(t, bURL)
	stored, err := backup.StoredVersion(ctx, bPool)
	require.NoError(t, err)
	require.Equal(t, "1.4.0", stored)
	require.Len(t, dumps(t, dir), 1, "no backup of the restored database at start")
	require.Eventually(t, func() bool {
		select {
		case err := <-agentDone:
			t.Fatalf("the agent stopped: %v (its credential refused?)", err)
		default:
		}
		ds, connects := agent.latest(env.ID)
		return connects > connectsBefore && ds.Revision != 0
	}, 30*time.Second, 50*time.Millisecond, "the agent reconnects to the restored control plane and is sent its revision")
	onB, _ := agent.latest(env.ID)
	require.Equal(t, before.Number, onB.Revision, "the latest revision's number as on A")
	require.Equal(t, before.Hash, onB.Hash, "the latest revision's hash as on A")
	require.Equal(t, onA.Document, onB.Document)
	v, ok = secretOf(onB, "api", "DB_PASSWORD")
	require.True(t, ok, "the secret is opened")
	require.Equal(t, secret, v)

	clB, err := client.New(b.URL, token)
	require.NoError(t, err, "A's API token works on B")
	after, err := clB.State(ctx, "acme", "shop", "staging", client.StateQuery{})
	require.NoError(t, err)
	require.Equal(t, before.Number, after.Number)
	require.Equal(t, before.Hash, after.Hash)
	releasesB, err := clB.Releases(ctx, "acme", "shop", "staging", "api")
	require.NoError(t, err)
	require.Equal(t, releasesA, releasesB)

	// What happens on B is projected: the agent's connect makes the cluster
	// Connected, and a new deployment compiles the next revision, which
	// reaches the agent.
	require.Eventually(t, func() bool {
		c, err := clB.Cluster(ctx, "acme", "eu-1")
		require.NoError(t, err)
		return c.Status.State == api.StateConnected
	}, 20*time.Second, 50*time.Millisecond, "B projects the agent's connect")
	_, err = clB.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ds, _ := agent.latest(env.ID)
		return ds.Revision == before.Number+1
	}, 30*time.Second, 50*time.Millisecond, "a deployment on B compiles the next revision and reaches the agent")
	next, _ := agent.latest(env.ID)
	v, _ = secretOf(next, "api", "DB_PASSWORD")
	require.Equal(t, secret, v)

	// nebula audit replay on B: every projection equal, the chain intact.
	rep, err := projections.Replay(ctx, bPool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "replay on the restored database: %+v", rep)
	require.Positive(t, rep.Events)
	chain, err := projections.Verify(ctx, bPool)
	require.NoError(t, err)
	require.True(t, chain.OK, "the audit chain: %+v", chain)
	b.Stop()
	stopAgent()

	// Restored with another master key (the .env lost): the server starts,
	// says that the sealed values are unreadable, and the service whose
	// variable needs one is held at its next revision.
	conn, err := pgx.Connect(ctx, cluster.URL("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE DATABASE nebula_wrong_key")
	require.NoError(t, err)
	conn.Close(ctx)
	cURL := cluster.URL("nebula_wrong_key")
	_, err = backup.Restore(ctx, "", dump, cURL)
	require.NoError(t, err)
	other, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	var logs lockedbuf.Buffer
	c := servertest.Start(t, servertest.Options{DatabaseURL: cURL, SecretKey: other, Version: "1.4.0", Insecure: []string{host},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	require.Contains(t, logs.String(), "sealed with another master key: they are unreadable")
	clC, err := client.New(c.URL, token)
	require.NoError(t, err)
	_, err = clC.Deploy(ctx, "acme", "shop", "staging", "api", host+"/api:v2")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r, err := clC.State(ctx, "acme", "shop", "staging", client.StateQuery{})
		require.NoError(t, err)
		return r.Number == before.Number+1 && len(r.Document.Services) == 1 && r.Document.Services[0].Held &&
			strings.Contains(r.Document.Services[0].HeldReason, "DB_PASSWORD")
	}, 30*time.Second, 50*time.Millisecond, "with another key the secret's service is held")
}

// The renumbering on its own, with more restored transactions than the
// target PostgreSQL has counted yet: its counter is moved past them first;
// the order of the events is kept, and a checkpoint still names the same
// event; on ids already below the counter it changes nothing.
func TestRenumberRestoredTransactionIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.URL(t)
	conn, err := pgx.Connect(ctx, u)
	require.NoError(t, err)
	defer conn.Close(ctx)
	n := currentTransaction(t, u) + 500
	base := currentTransaction(t, u) + 10_000_000
	_, err = conn.Exec(ctx, `INSERT INTO events (transaction_id, stream_id, stream_version, event_type, schema_version, payload,
		actor_kind, actor_id, actor_name, occurred_at)
		SELECT ($1::bigint + 2 * i)::text::xid8, 'restored', i, 'test.event', 1, '{}', 'system', 'test', 'test', now()
		FROM generate_series(1, $2::bigint) i`, base, n)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO subscription_checkpoints (name, transaction_id, position, events)
		SELECT 'restored-test', transaction_id, position, stream_version FROM events WHERE stream_id = 'restored' AND stream_version = 100`)
	require.NoError(t, err)

	got, err := eventstore.RenumberRestored(ctx, conn)
	require.NoError(t, err)
	require.EqualValues(t, n, got)
	var highest, next int64
	var ordered bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT max(transaction_id::text::bigint), pg_current_xact_id()::text::bigint,
		bool_and(ok) FROM (SELECT transaction_id, (row_number() OVER (ORDER BY transaction_id)) = stream_version AS ok FROM events) e`).
		Scan(&highest, &next, &ordered))
	require.Less(t, highest, next, "every restored id is below the counter")
	require.True(t, ordered, "the events keep their order")
	var version int
	require.NoError(t, conn.QueryRow(ctx, `SELECT e.stream_version FROM subscription_checkpoints c
		JOIN events e ON e.transaction_id = c.transaction_id AND e.position = c.position WHERE c.name = 'restored-test'`).Scan(&version))
	require.Equal(t, 100, version, "the checkpoint names the same event")

	got, err = eventstore.RenumberRestored(ctx, conn)
	require.NoError(t, err)
	require.Zero(t, got, "ids below the counter stay")
}
