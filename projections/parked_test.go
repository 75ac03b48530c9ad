package projections_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/testclock"
	"github.com/nebulactrl/nebulactrl/projections"
)

// An event of organisation A that the read models reject (here a trigger
// stands for a bug of the projection) is parked with the later events of its
// stream; organisation B's writes are projected and read back meanwhile;
// audit verify and replay fail while anything is parked; once fixed, a retry
// projects A's events in order and replay equals live.
func TestPoisonEventParkedOtherOrganisationsGoOn(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key, err := seal.GenerateMasterKey()
	require.NoError(t, err)
	mk, err := seal.ParseMasterKey(key)
	require.NoError(t, err)
	store := eventstore.New(pool, nil)
	cmdClock := testclock.Stepping(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), time.Minute)
	cmd, err := dispatch.New(dispatch.Config{Store: store, Now: cmdClock.Now})
	require.NoError(t, err)
	parkClock := testclock.New(time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)) // a sleep moves it at once
	proj, err := projections.New(projections.Config{Store: store, Keys: seal.New(pool, mk, nil), Now: cmdClock.Now,
		Park: eventstore.ParkPolicy{Attempts: 5, Window: time.Minute, Now: parkClock.Now, Sleep: parkClock.Sleep}})
	require.NoError(t, err)
	// Without the notifier, a wake-up every few milliseconds.
	wake := make(chan struct{})
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case wake <- struct{}{}:
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	done := make(chan struct{})
	go func() { defer close(done); _ = proj.Run(ctx, wake) }()
	defer func() { cancel(); <-done }()

	_, err = pool.Exec(ctx, `CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.name = 'poison' THEN RAISE EXCEPTION 'the read model rejects %', NEW.name; END IF; RETURN NEW; END $$;
		CREATE TRIGGER reject_poison BEFORE INSERT OR UPDATE ON environments FOR EACH ROW EXECUTE FUNCTION reject_poison()`)
	require.NoError(t, err)

	noWake := func() <-chan struct{} { return nil }
	settle := func(res dispatch.Result, err error) error {
		t.Helper()
		require.NoError(t, err)
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		return projections.WaitFor(wctx, pool, res.Last, noWake)
	}
	type org struct {
		id, cluster, project string
		as                   dispatch.Context
	}
	orgs := map[string]*org{}
	for _, name := range []string{"orga", "orgb"} {
		user := id()
		o := &org{id: id(), cluster: id(), project: id(),
			as: dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: user, Name: name + "@example.com"}, Person: user, RequestID: "r-" + name}}
		orgs[name] = o
		require.NoError(t, settle(cmd.User(ctx, o.as, user, domain.RegisterUser{UserID: user, Email: name + "@example.com", PasswordHash: "$2a$x"})))
		require.NoError(t, settle(cmd.Organisation(ctx, o.as, o.id, domain.CreateOrganisation{OrgID: o.id, Name: name, Owner: user})))
		require.NoError(t, settle(cmd.Cluster(ctx, o.as, o.id, o.cluster, domain.CreateCluster{ClusterID: o.cluster, OrgID: o.id, Name: "eu-1",
			JoinToken: domain.IssueJoinToken{TokenID: id(), TokenHash: "hash-" + name, ExpiresAt: cmdClock.Now().Add(24 * time.Hour)}})))
		require.NoError(t, settle(cmd.Project(ctx, o.as, o.id, o.project, domain.CreateProject{ProjectID: o.project, OrgID: o.id, Name: "shop"})))
	}
	a, b := orgs["orga"], orgs["orgb"]
	envNames := func(project string) []string {
		rows, err := pool.Query(ctx, `SELECT name FROM environments WHERE project_id = $1 ORDER BY created_at, name`, project)
		require.NoError(t, err)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return names
	}

	// A's poison: its own write learns it was parked.
	err = settle(cmd.Project(ctx, a.as, a.id, a.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "poison", ClusterID: a.cluster}))
	var parked *projections.ParkedError
	require.ErrorAs(t, err, &parked)
	require.Equal(t, eventstore.ParkedReasonFailed, parked.Event.Reason)
	require.Contains(t, parked.Event.Error, "the read model rejects poison")
	// B goes on: writes are projected and read back.
	require.NoError(t, settle(cmd.Project(ctx, b.as, b.id, b.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "production", ClusterID: b.cluster})))
	require.Equal(t, []string{"production"}, envNames(b.project))
	// A's later event on the same stream is parked behind, not projected.
	err = settle(cmd.Project(ctx, a.as, a.id, a.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "later", ClusterID: a.cluster}))
	require.ErrorAs(t, err, &parked)
	require.Equal(t, eventstore.ParkedReasonBehind, parked.Event.Reason)
	require.Empty(t, envNames(a.project))
	require.NoError(t, settle(cmd.Project(ctx, b.as, b.id, b.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "staging", ClusterID: b.cluster})))
	require.Equal(t, []string{"production", "staging"}, envNames(b.project))

	lag, err := projections.WaitCaughtUp(ctx, pool, 10*time.Second)
	require.NoError(t, err)
	require.False(t, lag.Behind())
	require.EqualValues(t, 2, lag.Parked)
	require.Contains(t, lag.String(), "2 events PARKED")
	chain, err := projections.Verify(ctx, pool)
	require.NoError(t, err)
	require.False(t, chain.OK, "verify fails while events are parked")
	require.Contains(t, chain.Problem, "PARKED")
	rep, err := projections.Replay(ctx, pool)
	if err == nil {
		require.False(t, rep.Equal(), "replay fails while events are parked")
	}

	// Still broken: the retry fails and changes nothing.
	res, err := proj.RetryParked(ctx, 0)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Contains(t, res[0].Error, "rejects poison")
	require.Empty(t, envNames(a.project))

	// Fixed (an upgrade with the fix): the retry projects A's events in order.
	_, err = pool.Exec(ctx, `DROP TRIGGER reject_poison ON environments`)
	require.NoError(t, err)
	require.NoError(t, settle(cmd.Project(ctx, b.as, b.id, b.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "qa", ClusterID: b.cluster})))
	res, err = proj.RetryParked(ctx, parked.Event.Position)
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Empty(t, res[0].Error)
	require.Len(t, res[0].Positions, 2)
	require.Less(t, res[0].Positions[0], res[0].Positions[1])
	require.Equal(t, []string{"poison", "later"}, envNames(a.project))
	_, err = proj.RetryParked(ctx, parked.Event.Position)
	require.True(t, errors.Is(err, eventstore.ErrNotParked))
	// The stream flows again, and replay (which handles the retried events
	// where the live projections did) equals live.
	require.NoError(t, settle(cmd.Project(ctx, a.as, a.id, a.project, domain.CreateEnvironment{EnvironmentID: id(), Name: "after", ClusterID: a.cluster})))
	require.Equal(t, []string{"poison", "later", "after"}, envNames(a.project))
	chain, err = projections.Verify(ctx, pool)
	require.NoError(t, err)
	require.True(t, chain.OK, chain.Problem)
	rep, err = projections.Replay(ctx, pool)
	require.NoError(t, err)
	for _, p := range rep.Projections {
		for _, tb := range p.Tables {
			require.True(t, tb.Equal, "%s.%s: %s", p.Projection, tb.Table, tb.FirstDifference)
		}
	}
	require.True(t, rep.Equal(), "replay equals live after the retry")
}
