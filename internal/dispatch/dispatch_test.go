package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestSnapshotEqualsTheFold is the property that makes snapshots safe: for
// any sequence of commands, the state a command decides on is the same
// whether it was loaded from a snapshot plus the events after it, or folded
// from the stream's first event. It fails if deciding ever changes the state
// it is given, or if a state does not survive its JSON encoding.
func TestSnapshotEqualsTheFold(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	store := eventstore.New(pool, nil)
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	h, err := New(Config{Store: store, Now: func() time.Time { now = now.Add(time.Second); return now }})
	require.NoError(t, err)

	for seed := uint64(1); seed <= 3; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		org, project, cluster := uuid.NewString(), uuid.NewString(), uuid.NewString()
		people := []string{uuid.NewString(), uuid.NewString()}
		as := func(i int) Context {
			return Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: people[i], Name: fmt.Sprint("user", i)}, Person: people[i]}
		}
		_, err := h.Project(ctx, as(0), org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"})
		require.NoError(t, err)
		envs := []string{uuid.NewString(), uuid.NewString()}
		for i, env := range envs {
			_, err := h.Project(ctx, as(0), org, project, domain.CreateEnvironment{EnvironmentID: env, Name: fmt.Sprint("env", i), ClusterID: cluster, Protected: i == 1})
			require.NoError(t, err)
		}
		var services []string
		releases := map[string][]domain.ReleaseRef{}
		for i := 0; i < 3; i++ {
			id := uuid.NewString()
			services = append(services, id)
			_, err := h.Project(ctx, as(0), org, project, domain.CreateService{ServiceID: id, Name: fmt.Sprint("svc", i), Source: domain.Source{Image: "x:1"},
				Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}, {Name: "worker", Replicas: 1}}})
			require.NoError(t, err)
		}
		for i := 0; i < 400; i++ {
			env, svc := envs[rng.IntN(len(envs))], services[rng.IntN(len(services))]
			var cmd domain.ProjectCommand
			switch rng.IntN(8) {
			case 0, 1:
				cmd = domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
					Image: fmt.Sprintf("r.example.com/x@sha256:%064x", i)}
			case 2:
				cmd = domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: []domain.Variable{{Name: fmt.Sprint("V", rng.IntN(5)), Value: fmt.Sprint(i)}}}
			case 3:
				cmd = domain.Scale{EnvironmentID: env, ServiceID: svc, Process: "web", Replicas: rng.IntN(4)}
			case 4:
				cmd = domain.AddDomain{EnvironmentID: env, ServiceID: svc, Host: fmt.Sprintf("h%d-%d.example.com", seed, rng.IntN(6))}
			case 5:
				if rs := releases[env+svc]; len(rs) > 0 {
					r := rs[rng.IntN(len(rs))]
					cmd = domain.Rollback{EnvironmentID: env, ServiceID: svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(), Release: r}
				} else {
					cmd = domain.ResumeDeploys{EnvironmentID: env, ServiceID: svc}
				}
			case 6:
				state, _, _, _, err := load(ctx, h, domain.ProjectStream(project), org, domain.NewProject)
				require.NoError(t, err)
				for id, cs := range state.ChangeSets {
					cmd = domain.ApproveChangeSet{ChangeSetID: id, Version: cs.Version}
					break
				}
				if cmd == nil {
					cmd = domain.ResumeDeploys{EnvironmentID: env, ServiceID: svc}
				}
			default:
				cmd = domain.UnsetVariables{EnvironmentID: env, ServiceID: svc, Names: []string{fmt.Sprint("V", rng.IntN(5))}}
			}
			res, err := h.Project(ctx, as(rng.IntN(2)), org, project, cmd)
			if err != nil && !errors.Is(err, domain.ErrNotFound) && !errors.Is(err, domain.ErrConflict) && !errors.Is(err, domain.ErrForbidden) {
				require.NoError(t, err, "command %d %T", i, cmd)
			}
			for _, e := range res.Events {
				if rc, ok := e.(domain.ReleaseCreated); ok {
					releases[rc.EnvironmentID+rc.ServiceID] = append(releases[rc.EnvironmentID+rc.ServiceID],
						domain.ReleaseRef{EnvironmentID: rc.EnvironmentID, ServiceID: rc.ServiceID, Number: rc.Number, Image: rc.Image})
				}
			}
		}

		stream := domain.ProjectStream(project)
		snap, ok, err := store.LoadSnapshot(ctx, stream)
		require.NoError(t, err)
		require.True(t, ok, "a stream of hundreds of events has a snapshot")
		require.Greater(t, snap.Version, SnapshotEvery)
		fromSnapshot, v1, base, _, err := load(ctx, h, stream, org, domain.NewProject)
		require.NoError(t, err)
		require.Equal(t, snap.Version, base)
		// Another organisation never loads this snapshot.
		_, _, _, _, err = load(ctx, h, stream, uuid.NewString(), domain.NewProject)
		require.ErrorIs(t, err, domain.ErrNotFound)
		want, err := json.Marshal(fromSnapshot)
		require.NoError(t, err)
		// A snapshot that does not decode, or of another schema, is passed
		// over: the whole stream is folded.
		for _, spoil := range []string{
			`UPDATE aggregate_snapshots SET state = 'not json' WHERE stream_id = $1`,
			`UPDATE aggregate_snapshots SET schema = schema - 1, state = '{}' WHERE stream_id = $1`,
		} {
			_, err = pool.Exec(ctx, spoil, stream)
			require.NoError(t, err)
			spoiled, v, b, _, err := load(ctx, h, stream, org, domain.NewProject)
			require.NoError(t, err)
			require.Equal(t, v1, v)
			require.Zero(t, b, "no snapshot was used")
			got, err := json.Marshal(spoiled)
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(got), "seed %d: %s", seed, spoil)
		}

		_, err = pool.Exec(ctx, `DELETE FROM aggregate_snapshots WHERE stream_id = $1`, stream)
		require.NoError(t, err)
		folded, v2, _, _, err := load(ctx, h, stream, org, domain.NewProject)
		require.NoError(t, err)
		require.Equal(t, v2, v1)
		a, err := json.Marshal(fromSnapshot)
		require.NoError(t, err)
		b, err := json.Marshal(folded)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(a), "seed %d: the snapshot's state differs from the fold", seed)

	}
}

func TestHasEscapedNUL(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		`{"a":"x\u0000"}`:    true,
		`{"a":"\u0000"}`:     true,
		`{"a":"\\u0000"}`:    false, // a backslash, then the text u0000
		`{"a":"\\\u0000"}`:   true,
		`{"a":"\u00001"}`:    true,
		`{"a":"\u0001"}`:     false,
		`{"a":"plain"}`:      false,
		`{"a":"\"\u0000"}`:   true,
		`{"a":"ends with \\`: false,
	} {
		require.Equal(t, want, HasEscapedNUL([]byte(doc)), doc)
	}
}

// A NUL in any text field never reaches an event (found from outside: a
// token named "x\u0000" stopped the projections of every organisation).
func TestNoNULReachesAnEvent(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	h, err := New(Config{Store: eventstore.New(pool, nil)})
	require.NoError(t, err)
	user := uuid.NewString()
	ctx := context.Background()
	as := Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: user, Name: "u"}, Person: user}
	_, err = h.User(ctx, as, user, domain.RegisterUser{UserID: user, Email: "u@example.com", PasswordHash: "x"})
	require.NoError(t, err)
	_, err = h.User(ctx, as, user, domain.CreateToken{TokenID: uuid.NewString(), Name: "x\x00", Scopes: []domain.Scope{domain.ScopeProjectsRead}, TokenHash: "h"})
	require.ErrorIs(t, err, domain.ErrInvalid)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	require.Equal(t, 1, n, "nothing was appended")
}

// A snapshot rewrites the whole state, so one is kept only once the events
// after the last one hold as many bytes as it does: with a large state (a
// service's many variables) small commands do not rewrite it every 100
// events, and the snapshot bytes stay within the bytes of the events.
func TestSnapshotsWaitForAsManyBytesOfEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	store := eventstore.New(pool, nil)
	h, err := New(Config{Store: store})
	require.NoError(t, err)
	org, project, env, svc := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	as := Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: uuid.NewString(), Name: "alice"}}
	do := func(cmd domain.ProjectCommand) Result {
		t.Helper()
		res, err := h.Project(ctx, as, org, project, cmd)
		require.NoError(t, err)
		return res
	}
	do(domain.CreateProject{ProjectID: project, OrgID: org, Name: "shop"})
	do(domain.CreateEnvironment{EnvironmentID: env, Name: "staging", ClusterID: uuid.NewString()})
	do(domain.CreateService{ServiceID: svc, Name: "api", Source: domain.Source{Image: "x:1"}, Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}})
	vars := make([]domain.Variable, 500)
	for i := range vars {
		vars[i] = domain.Variable{Name: fmt.Sprintf("V%03d", i), Value: fmt.Sprintf("%0100d", i)}
	}
	do(domain.SetVariables{EnvironmentID: env, ServiceID: svc, Variables: vars})
	stream := domain.ProjectStream(project)
	snapshot := func() (int, int) {
		snap, ok, err := store.LoadSnapshot(ctx, stream)
		require.NoError(t, err)
		if !ok {
			return 0, 0
		}
		return snap.Version, len(snap.State)
	}
	// Small commands: the first snapshot comes after 100 events (the large
	// event before them pays for it).
	scale := func(i int) Result {
		return do(domain.Scale{EnvironmentID: env, ServiceID: svc, Process: "web", Replicas: i % 5})
	}
	var last Result
	for i := 0; last.Version < SnapshotEvery+1; i++ {
		last = scale(i)
	}
	first, size := snapshot()
	require.GreaterOrEqual(t, first, SnapshotEvery)
	require.Greater(t, size, 50_000, "the state holds the variables")

	// Another 200 small events hold far fewer bytes than the snapshot: it is kept.
	for i := 0; i < 200; i++ {
		last = scale(i)
	}
	v, _ := snapshot()
	require.Equal(t, first, v, "a new snapshot after %d small events", last.Version-first)

	// Once the events after it hold as many bytes as it does, a new one.
	var tail int
	for tail < size {
		last = scale(tail)
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(sum(octet_length(payload::text)), 0) FROM events WHERE stream_id = $1 AND stream_version > $2`,
			stream, first).Scan(&tail))
	}
	last = scale(1)
	v, _ = snapshot()
	require.Greater(t, v, first, "no new snapshot after %d bytes of events (the snapshot holds %d)", tail, size)

	// Deciding from the new snapshot equals folding the whole stream.
	fromSnapshot, version, base, _, err := load(ctx, h, stream, org, domain.NewProject)
	require.NoError(t, err)
	require.Equal(t, v, base)
	_, err = pool.Exec(ctx, `DELETE FROM aggregate_snapshots WHERE stream_id = $1`, stream)
	require.NoError(t, err)
	folded, version2, _, _, err := load(ctx, h, stream, org, domain.NewProject)
	require.NoError(t, err)
	require.Equal(t, version, version2)
	a, err := json.Marshal(fromSnapshot)
	require.NoError(t, err)
	b, err := json.Marshal(folded)
	require.NoError(t, err)
	require.JSONEq(t, string(b), string(a))
}
