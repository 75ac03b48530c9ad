package command

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
	"github.com/nebulactrl/nebulactrl/pgtest"
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
