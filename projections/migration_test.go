package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/migrations"
	"github.com/nebulactrl/nebulactrl/projections"
)

// A database written before releases and revisions recorded changes (schema
// 1 events, whole sets and documents in the release history and revisions
// tables) is migrated by 00011 into exactly the versioned rows a replay of
// those events makes, and every release's set and revision's document reads
// back.
func TestMigrationToVersionedRowsEqualsReplay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A database of its own, migrated up to the version before 00011, on a
	// cluster of its own: the replay reads behind the commit horizon, which
	// another test's open transaction (another replay's) would hold back
	// in every database of a shared cluster (it then read no event at all).
	c := pgtest.Cluster(t, nil)
	u, err := url.Parse(c.URL("postgres"))
	require.NoError(t, err)
	admin, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	name := fmt.Sprintf("h1mig_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	u.Path = "/" + name
	pool, err := database.Open(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, 10)
	require.NoError(t, err)

	org, project, env, svc, cluster := id(), id(), id(), id(), id()
	rel1, rel2 := id(), id()
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	actor := domain.Actor{Kind: domain.ActorUser, ID: id(), Name: "alice@example.com"}
	procs := []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}
	secret := &domain.SealedValue{DataKeyID: "dk-1", Ciphertext: []byte("sealed")}
	sets := [][]domain.Variable{
		{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}},
		{{Name: "A", Value: "1"}, {Name: "C", Secret: secret}},
	}
	type oldConfig struct {
		Processes []domain.Process  `json:"processes"`
		Variables []domain.Variable `json:"variables"`
	}
	docOf := func(rel string, n int, vars []domain.Variable) desiredstate.Document {
		d := desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{OrgID: org, Org: "acme",
			ProjectID: project, Project: "shop", ID: env, Name: "staging", ClusterID: cluster, Namespace: desiredstate.Namespace("acme", "shop", "staging")},
			Services: []desiredstate.Service{{ID: svc, Name: "api", Release: &desiredstate.Release{ID: rel, Number: n, Image: digestOf("api")},
				Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 2}}}}}
		for _, v := range vars {
			dv := desiredstate.Variable{Name: v.Name, Value: v.Value}
			if v.Secret != nil {
				dv.Secret = &desiredstate.Sealed{DataKeyID: v.Secret.DataKeyID, Ciphertext: v.Secret.Ciphertext}
			}
			d.Services[0].Variables = append(d.Services[0].Variables, dv)
		}
		return d
	}
	var releaseRecords, revisionRecords []eventstore.Record
	var hashes []string
	for i, rel := range []string{rel1, rel2} {
		cfg, err := json.Marshal(oldConfig{Processes: procs, Variables: sets[i]})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO releases (id, org_id, project_id, environment_id, service_id, number, image, config, reason, created_at, created_by)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'deploy', $9, $10)`, rel, org, project, env, svc, i+1, digestOf("api"), string(cfg), at, "user:alice@example.com")
		require.NoError(t, err)
		payload, err := json.Marshal(map[string]any{"releaseId": rel, "environmentId": env, "serviceId": svc, "number": i + 1, "image": digestOf("api"),
			"processes": procs, "variables": sets[i], "reason": "deploy"})
		require.NoError(t, err)
		releaseRecords = append(releaseRecords, eventstore.Record{Type: "release.created", SchemaVersion: 1, Payload: payload})

		doc := docOf(rel, i+1, sets[i])
		canonical, err := doc.Canonical()
		require.NoError(t, err)
		hash, err := doc.Hash()
		require.NoError(t, err)
		hashes = append(hashes, hash)
		_, err = pool.Exec(ctx, `INSERT INTO revisions (environment_id, number, org_id, hash, document, compiled_at) VALUES ($1, $2, $3, $4, $5, $6)`,
			env, i+1, org, hash, string(canonical), at)
		require.NoError(t, err)
		payload, err = json.Marshal(map[string]any{"environmentId": env, "projectId": project, "number": i + 1, "hash": hash, "document": json.RawMessage(canonical)})
		require.NoError(t, err)
		revisionRecords = append(revisionRecords, eventstore.Record{Type: "revision.compiled", SchemaVersion: 1, Payload: payload})
	}

	// The upgrade, then the events those rows came from.
	require.NoError(t, database.Migrate(ctx, pool, nil))
	store := eventstore.New(pool, nil)
	_, err = store.Append(ctx, eventstore.AppendRequest{StreamID: domain.ProjectStream(project), OrgID: org, Actor: actor, OccurredAt: at, Records: releaseRecords})
	require.NoError(t, err)
	_, err = store.Append(ctx, eventstore.AppendRequest{StreamID: domain.RevisionStream(env), OrgID: org, Actor: domain.System("compiler"), OccurredAt: at,
		Records: revisionRecords})
	require.NoError(t, err)
	// The live projections had handled them (as before the upgrade).
	_, err = pool.Exec(ctx, `INSERT INTO subscription_checkpoints (name, transaction_id, position, events)
		SELECT $1, max(transaction_id), max(position), count(*) FROM events
		ON CONFLICT (name) DO UPDATE SET transaction_id = EXCLUDED.transaction_id, position = EXCLUDED.position, events = EXCLUDED.events`,
		projections.SubscriptionName)
	require.NoError(t, err)

	rep, err := projections.Replay(ctx, pool)
	require.NoError(t, err)
	checked := 0
	for _, p := range rep.Projections {
		for _, tr := range p.Tables {
			switch tr.Table {
			case "releases", "release_variables", "revisions", "revision_objects":
				require.True(t, tr.Equal, "%s: the migrated rows differ from the replay: %+v", tr.Table, tr)
				require.NotZero(t, tr.LiveRows, tr.Table)
				checked++
			}
		}
	}
	require.Equal(t, 4, checked)

	for i := range sets {
		got, err := projections.ReleaseVariables(ctx, pool, env, svc, i+1)
		require.NoError(t, err)
		require.Equal(t, sets[i], got, "release %d", i+1)
		rev, err := projections.RevisionNumber(ctx, pool, env, i+1)
		require.NoError(t, err)
		require.Equal(t, hashes[i], rev.Hash)
	}
	var config string
	require.NoError(t, pool.QueryRow(ctx, `SELECT config::text FROM releases WHERE id = $1`, rel2).Scan(&config))
	require.NotContains(t, config, "variables", "the whole set left the releases table")
}
