package projections_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/projections"
)

// small builds a project with one deployed service and returns its ids.
func small(t *testing.T, b *bundle) (org, project, env, svc string) {
	t.Helper()
	ctx := context.Background()
	user := id()
	c := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: user, Name: "ops@example.com"}, Person: user}
	org, project, env, svc = id(), id(), id(), id()
	steps := []func() (dispatch.Result, error){
		func() (dispatch.Result, error) {
			return b.cmd.User(ctx, c, user, domain.RegisterUser{UserID: user, Email: "ops@example.com", PasswordHash: "x"})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Organisation(ctx, c, org, domain.CreateOrganisation{OrgID: org, Name: "acme", Owner: user})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Project(ctx, c, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Project(ctx, c, org, project, domain.CreateEnvironment{EnvironmentID: env, Name: "staging", ClusterID: id()})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Project(ctx, c, org, project, domain.CreateService{ServiceID: svc, Name: "api", Source: domain.Source{Image: "api"},
				Processes: []domain.Process{{Name: "web", Port: 80, Replicas: 1}}})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Project(ctx, c, org, project, domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: []domain.Variable{{Name: "A", Value: "1"}}})
		},
		func() (dispatch.Result, error) {
			return b.cmd.Project(ctx, c, org, project, domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: id(), DeploymentID: id(), Image: digestOf("api")})
		},
	}
	for _, s := range steps {
		_, err := s()
		require.NoError(t, err)
	}
	b.catchUp(t)
	return org, project, env, svc
}

func TestReplayNamesTheFirstEditedRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, _, env, svc := small(t, b)

	_, err := b.pool.Exec(ctx, `UPDATE variables SET value = 'tampered' WHERE environment_id = $1 AND service_id = $2 AND name = 'A'`, env, svc)
	require.NoError(t, err)
	rep, err := projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, rep.Equal())
	for _, p := range rep.Projections {
		if p.Projection != "read-models" {
			require.True(t, p.Equal, p.Projection)
			continue
		}
		require.False(t, p.Equal)
		for _, tr := range p.Tables {
			if tr.Table == "variables" {
				require.False(t, tr.Equal)
				require.Contains(t, tr.FirstDifference, "environment_id="+env)
				require.Contains(t, tr.FirstDifference, "name=A")
			} else {
				require.True(t, tr.Equal, tr.Table)
			}
		}
	}
	require.True(t, rep.Chain.OK, "the audit chain is untouched")

	// A row nobody's event made is named too.
	_, err = b.pool.Exec(ctx, `INSERT INTO domains VALUES ('evil.example.com', $1, $1, $1, $1, now())`, id())
	require.NoError(t, err)
	rep, err = projections.Replay(ctx, b.pool)
	require.NoError(t, err)
	for _, p := range rep.Projections {
		for _, tr := range p.Tables {
			if tr.Table == "domains" {
				require.Contains(t, tr.FirstDifference, "evil.example.com")
			}
		}
	}
}

func TestAuditChainDetectsEditsAndDeletions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	small(t, b)
	rep, err := projections.VerifyChain(ctx, b.pool)
	require.NoError(t, err)
	require.True(t, rep.OK, rep.Problem)

	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `UPDATE audit_log SET actor_name = 'mallory@example.com' WHERE seq = 3`)
	require.NoError(t, err)
	rep, err = projections.VerifyChain(ctx, tx)
	require.NoError(t, err)
	require.False(t, rep.OK)
	require.Contains(t, rep.Problem, "seq 3")
	require.Contains(t, rep.Problem, "changed")
	require.NoError(t, tx.Rollback(ctx))

	// Deleting the tail leaves a valid-looking chain; the head is checked
	// against the number of events projected.
	_, err = b.pool.Exec(ctx, `DELETE FROM audit_log WHERE seq > (SELECT max(seq) - 2 FROM audit_log)`)
	require.NoError(t, err)
	rep, err = projections.VerifyChain(ctx, b.pool)
	require.NoError(t, err)
	require.False(t, rep.OK)
	require.Contains(t, rep.Problem, "last 2 rows were deleted")

	// A deleted row in the middle breaks the sequence.
	_, err = b.pool.Exec(ctx, `DELETE FROM audit_log WHERE seq = 2`)
	require.NoError(t, err)
	rep, err = projections.VerifyChain(ctx, b.pool)
	require.NoError(t, err)
	require.Contains(t, rep.Problem, "seq 3 follows seq 1")
}

// A database opened with another master key keeps all its data, and every
// sealed value in it is reported unreadable: the services that need one are
// held, with the reason, and nothing crashes.
func TestWrongMasterKeyHoldsServicesWithSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	org, project, env, svc := small(t, b)
	c := dispatch.Context{Actor: domain.System("test")}
	sealed, err := b.sealer.Seal(ctx, org, []byte("s3cret"))
	require.NoError(t, err)
	_, err = b.cmd.Project(ctx, c, org, project, domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: []domain.Variable{{Name: "TOKEN", Secret: &sealed}}})
	require.NoError(t, err)

	other, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	otherKey, err := seal.ParseMasterKey(other)
	require.NoError(t, err)
	wrong := seal.New(b.pool, otherKey, nil)
	_, err = wrong.Open(ctx, sealed)
	require.ErrorIs(t, err, seal.ErrUnreadable)

	b.proj, err = projections.New(projections.Config{Store: b.store, Keys: wrong, Now: b.clock.Now})
	require.NoError(t, err)
	b.catchUp(t)
	rev, err := projections.RevisionNumber(ctx, b.pool, env, 0)
	require.NoError(t, err)
	require.Len(t, rev.Document.Services, 1)
	require.True(t, rev.Document.Services[0].Held)
	require.Contains(t, rev.Document.Services[0].HeldReason, "TOKEN")
	var n int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM variables WHERE secret IS NOT NULL`).Scan(&n))
	require.Equal(t, 1, n, "the data is kept")
}

// A known secret set through the command path is found nowhere in clear: not
// in a full pg_dump, not in the PostgreSQL server log with log_statement=all,
// not in the process's debug log.
func TestSecretIsNeverWrittenInClear(t *testing.T) {
	t.Parallel()
	cluster := pgtest.Cluster(t, map[string]string{"log_statement": "'all'", "log_min_messages": "debug1"})
	pool := pgtest.MigratedDB(t, cluster, "secrets")
	ctx := context.Background()
	var debug bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))

	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	b := &bundle{pool: pool, store: eventstore.New(pool, logger), clock: testclock.Stepping(time.Now(), time.Minute)}
	b.sealer = seal.New(pool, mk, logger)
	b.cmd, err = dispatch.New(dispatch.Config{Store: b.store, Now: b.clock.Now, Logger: logger})
	require.NoError(t, err)
	b.proj, err = projections.New(projections.Config{Store: b.store, Keys: b.sealer, Now: b.clock.Now, Logger: logger})
	require.NoError(t, err)
	org, project, env, svc := small(t, b)

	const secret = "Tr0ub4dor-and-3-horses-NEBULA"
	sealed, err := b.sealer.Seal(ctx, org, []byte(secret))
	require.NoError(t, err)
	_, err = b.cmd.Project(ctx, dispatch.Context{Actor: domain.System("test")}, org, project,
		domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: []domain.Variable{{Name: "PASSWORD", Secret: &sealed}}})
	require.NoError(t, err)
	b.catchUp(t)
	opened, err := b.sealer.Open(ctx, sealed)
	require.NoError(t, err)
	require.Equal(t, secret, string(opened), "the secret is there, sealed")

	dump, err := cluster.Run(ctx, "pg_dump", "--dbname", cluster.URL("secrets"))
	require.NoError(t, err, string(dump))
	require.Contains(t, string(dump), "PASSWORD", "the dump holds the variable")
	serverLog, err := os.ReadFile(filepath.Join(cluster.Dir(), "server.log"))
	require.NoError(t, err)
	require.Contains(t, string(serverLog), "INSERT INTO events", "statements are logged")
	require.NotEmpty(t, debug.String())
	for name, text := range map[string]string{"pg_dump": string(dump), "server log": string(serverLog), "debug log": debug.String()} {
		require.False(t, strings.Contains(text, secret), "the secret is in the %s", name)
		require.False(t, strings.Contains(text, strings.ToLower(secret)), "the secret is in the %s", name)
	}
}
