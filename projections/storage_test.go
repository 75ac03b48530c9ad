package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/projections"
)

// storageWorld is an organisation with one environment and one service.
type storageWorld struct {
	b                               *bundle
	as                              dispatch.Context
	org, cluster, project, env, svc string
}

func newStorageWorld(t *testing.T) *storageWorld {
	t.Helper()
	w := &storageWorld{b: setup(t), org: id(), cluster: id(), project: id(), env: id(), svc: id()}
	alice := id()
	w.as = dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: alice, Name: "alice@example.com"}, Person: alice}
	ctx := context.Background()
	w.must(t)(w.b.cmd.User(ctx, w.as, alice, domain.RegisterUser{UserID: alice, Email: "alice@example.com", PasswordHash: "$2a$x"}))
	w.must(t)(w.b.cmd.Organisation(ctx, w.as, w.org, domain.CreateOrganisation{OrgID: w.org, Name: "acme", Owner: alice}))
	w.must(t)(w.b.cmd.Cluster(ctx, w.as, w.org, w.cluster, domain.CreateCluster{ClusterID: w.cluster, OrgID: w.org, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: id(), TokenHash: "hash", ExpiresAt: w.b.clock.Now().Add(24 * time.Hour)}}))
	w.must(t)(w.b.cmd.Project(ctx, w.as, w.org, w.project, domain.CreateProject{ProjectID: w.project, OrgID: w.org, Name: "shop"}))
	w.must(t)(w.b.cmd.Project(ctx, w.as, w.org, w.project, domain.CreateEnvironment{EnvironmentID: w.env, Name: "staging", ClusterID: w.cluster}))
	w.must(t)(w.b.cmd.Project(ctx, w.as, w.org, w.project, domain.CreateService{ServiceID: w.svc, Name: "api", Source: domain.Source{Image: "api:1"},
		Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 1}}}))
	return w
}

func (w *storageWorld) must(t *testing.T) func(dispatch.Result, error) {
	return func(_ dispatch.Result, err error) {
		t.Helper()
		require.NoError(t, err)
	}
}

func (w *storageWorld) do(t *testing.T, cmd domain.ProjectCommand) dispatch.Result {
	t.Helper()
	res, err := w.b.cmd.Project(context.Background(), w.as, w.org, w.project, cmd)
	require.NoError(t, err)
	return res
}

// runningVariables returns the variables of the service in the latest revision.
func (w *storageWorld) runningVariables(t *testing.T) map[string]string {
	t.Helper()
	w.b.catchUp(t)
	rev, err := projections.RevisionNumber(context.Background(), w.b.pool, w.env, 0)
	require.NoError(t, err)
	require.Len(t, rev.Document.Services, 1)
	out := map[string]string{}
	for _, v := range rev.Document.Services[0].Variables {
		out[v.Name] = v.Value
	}
	return out
}

// rollback rolls back to release n, as the API does: the release's facts
// read from the release history.
func (w *storageWorld) rollback(t *testing.T, n int) {
	t.Helper()
	ref := domain.ReleaseRef{EnvironmentID: w.env, ServiceID: w.svc, Number: n}
	var relID string
	require.NoError(t, w.b.pool.QueryRow(context.Background(), `SELECT id::text, image FROM releases WHERE environment_id = $1 AND service_id = $2 AND number = $3`,
		w.env, w.svc, n).Scan(&relID, &ref.Image))
	w.do(t, domain.Rollback{EnvironmentID: w.env, ServiceID: w.svc, ReleaseID: relID, DeploymentID: id(), Release: ref})
}

func (w *storageWorld) replayEqual(t *testing.T) {
	t.Helper()
	w.b.catchUp(t)
	rep, err := projections.Replay(context.Background(), w.b.pool)
	require.NoError(t, err)
	require.True(t, rep.Equal(), "replay differs from live: %+v", rep)
}

// Releases and revisions record changes; a rollback to a release whose
// variable set differs from the current one restores that set exactly, and
// every revision rebuilds to the document its hash names.
func TestRollbackRestoresTheVariablesOfTheRelease(t *testing.T) {
	t.Parallel()
	w := newStorageWorld(t)
	ctx := context.Background()
	w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}})
	w.do(t, domain.Deploy{EnvironmentID: w.env, ServiceID: w.svc, ReleaseID: id(), DeploymentID: id(), Image: digestOf("api")})
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, w.runningVariables(t))
	w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "B", Value: "3"}, {Name: "C", Value: "4"}}})
	require.Equal(t, map[string]string{"A": "1", "B": "3", "C": "4"}, w.runningVariables(t))
	w.do(t, domain.UnsetVariables{EnvironmentID: w.env, ServiceID: w.svc, Names: []string{"A"}})
	require.Equal(t, map[string]string{"B": "3", "C": "4"}, w.runningVariables(t))

	w.rollback(t, 1)
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, w.runningVariables(t), "release 1's variables, removed and changed ones included")
	w.rollback(t, 2)
	require.Equal(t, map[string]string{"A": "1", "B": "3", "C": "4"}, w.runningVariables(t))
	// The next change releases the live variables again, recorded against
	// release 3 (the latest), whatever ran in between.
	w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "D", Value: "5"}}})
	require.Equal(t, map[string]string{"B": "3", "C": "4", "D": "5"}, w.runningVariables(t))

	for n, want := range map[int][]string{1: {"A", "B"}, 2: {"A", "B", "C"}, 3: {"B", "C"}, 4: {"B", "C", "D"}} {
		vars, err := projections.ReleaseVariables(ctx, w.b.pool, w.env, w.svc, n)
		require.NoError(t, err)
		var names []string
		for _, v := range vars {
			names = append(names, v.Name)
		}
		require.Equal(t, want, names, "release %d", n)
	}

	// Revisions after the first record changes; every one rebuilds.
	rows, err := w.b.pool.Query(ctx, `SELECT schema_version, payload FROM events WHERE stream_id = $1 ORDER BY stream_version`, domain.RevisionStream(w.env))
	require.NoError(t, err)
	var revs []domain.RevisionCompiled
	for rows.Next() {
		var sv int16
		var payload []byte
		require.NoError(t, rows.Scan(&sv, &payload))
		require.EqualValues(t, 2, sv)
		ev, err := domain.Decode("revision.compiled", int(sv), payload)
		require.NoError(t, err)
		revs = append(revs, ev.(domain.RevisionCompiled))
	}
	require.NoError(t, rows.Err())
	require.GreaterOrEqual(t, len(revs), 6)
	for i, rc := range revs {
		require.False(t, rc.Whole())
		require.Equal(t, i, rc.Base, "revision %d is recorded against the one before", rc.Number)
		rev, err := projections.RevisionNumber(ctx, w.b.pool, w.env, rc.Number)
		require.NoError(t, err)
		hash, err := rev.Document.Hash()
		require.NoError(t, err)
		require.Equal(t, rc.Hash, hash)
	}
	w.replayEqual(t)
}

// The bytes the events of one variable update hold do not depend on how
// many variables the service has: the update's own events and the revision
// it compiles to, at 10 and at 1,000 variables of about 100 bytes.
func TestBytesOfAVariableUpdateDoNotGrowWithTheVariables(t *testing.T) {
	t.Parallel()
	bytesOfUpdate := func(t *testing.T, variables int) int64 {
		w := newStorageWorld(t)
		ctx := context.Background()
		vars := make([]domain.Variable, variables)
		for i := range vars {
			vars[i] = domain.Variable{Name: fmt.Sprintf("VAR_%04d", i), Value: strings.Repeat(fmt.Sprintf("%04d", i), 25)}
		}
		w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: vars})
		w.do(t, domain.Deploy{EnvironmentID: w.env, ServiceID: w.svc, ReleaseID: id(), DeploymentID: id(), Image: digestOf("api")})
		w.b.catchUp(t)
		var before int64
		require.NoError(t, w.b.pool.QueryRow(ctx, `SELECT max(position) FROM events`).Scan(&before))
		w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "VAR_0005", Value: strings.Repeat("z", 100)}}})
		w.b.catchUp(t)
		var n, total int64
		require.NoError(t, w.b.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(octet_length(payload::text)), 0) FROM events WHERE position > $1`, before).Scan(&n, &total))
		require.EqualValues(t, 4, n, "variables set, release, deployment requested, revision")
		require.Equal(t, map[string]string{"VAR_0005": strings.Repeat("z", 100)}, map[string]string{"VAR_0005": w.runningVariables(t)["VAR_0005"]})
		return total
	}
	small, large := bytesOfUpdate(t, 10), bytesOfUpdate(t, 1000)
	t.Logf("bytes of the events of one variable update: %d at 10 variables, %d at 1,000", small, large)
	// Only numbers in the ids and values differ in length.
	require.InDelta(t, small, large, 64, "the events of one update grow with the number of variables")
}

// Events of schema 1 (a release with its whole variable set, a revision with
// its whole document) already in a database still decode, project and
// replay, and what is recorded after them is a change against them.
func TestSchema1EventsStillProjectAndReplay(t *testing.T) {
	t.Parallel()
	w := newStorageWorld(t)
	ctx := context.Background()
	w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "A", Value: "1"}, {Name: "B", Value: "2"}}})
	w.b.catchUp(t)
	// A release, a deployment and a revision as an earlier version wrote them.
	revision := 0
	require.NoError(t, w.b.pool.QueryRow(ctx, `SELECT coalesce(max(stream_version), 0) FROM events WHERE stream_id = $1`, domain.RevisionStream(w.env)).Scan(&revision))
	rel, dep := id(), id()
	version := 0
	require.NoError(t, w.b.pool.QueryRow(ctx, `SELECT max(stream_version) FROM events WHERE stream_id = $1`, domain.ProjectStream(w.project)).Scan(&version))
	release := fmt.Sprintf(`{"releaseId":%q,"environmentId":%q,"serviceId":%q,"number":1,"image":%q,"processes":[{"name":"web","port":8080,"replicas":1}],`+
		`"variables":[{"name":"A","value":"1"},{"name":"B","value":"2"}],"reason":"deploy"}`, rel, w.env, w.svc, digestOf("api"))
	requested := fmt.Sprintf(`{"deploymentId":%q,"releaseId":%q,"environmentId":%q,"serviceId":%q,"image":%q}`, dep, rel, w.env, w.svc, digestOf("api"))
	_, err := w.b.store.Append(ctx, eventstore.AppendRequest{StreamID: domain.ProjectStream(w.project), ExpectedVersion: version, OrgID: w.org,
		Actor: w.as.Actor, OccurredAt: w.b.clock.Now(), Records: []eventstore.Record{
			{Type: "release.created", SchemaVersion: 1, Payload: []byte(release)},
			{Type: "deployment.requested", SchemaVersion: 1, Payload: []byte(requested)},
		}})
	require.NoError(t, err)
	doc := desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{OrgID: w.org, Org: "acme",
		ProjectID: w.project, Project: "shop", ID: w.env, Name: "staging", ClusterID: w.cluster, Namespace: desiredstate.Namespace("acme", "shop", "staging")},
		Services: []desiredstate.Service{{ID: w.svc, Name: "api", Release: &desiredstate.Release{ID: rel, Number: 1, Image: digestOf("api"), DeploymentID: dep},
			Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 1}},
			Variables: []desiredstate.Variable{{Name: "A", Value: "old"}}}}}
	canonical, err := doc.Canonical()
	require.NoError(t, err)
	hash, err := doc.Hash()
	require.NoError(t, err)
	payload, err := json.Marshal(map[string]any{"environmentId": w.env, "projectId": w.project, "number": revision + 1, "hash": hash, "document": json.RawMessage(canonical)})
	require.NoError(t, err)
	_, err = w.b.store.Append(ctx, eventstore.AppendRequest{StreamID: domain.RevisionStream(w.env), ExpectedVersion: revision, OrgID: w.org, Actor: domain.System("compiler"),
		OccurredAt: w.b.clock.Now(), Records: []eventstore.Record{{Type: "revision.compiled", SchemaVersion: 1, Payload: payload}}})
	require.NoError(t, err)
	w.b.catchUp(t)
	old, err := projections.RevisionNumber(ctx, w.b.pool, w.env, revision+1)
	require.NoError(t, err)
	require.Equal(t, hash, old.Hash)
	require.Equal(t, "old", old.Document.Services[0].Variables[0].Value, "a schema 1 revision reads as it was recorded")

	// The compiler recorded revision 2 against revision 1; the project
	// folds the schema 1 release as a whole set.
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, w.runningVariables(t))
	res := w.do(t, domain.SetVariables{EnvironmentID: w.env, ServiceID: w.svc, Variables: []domain.Variable{{Name: "B", Value: "3"}}})
	var rc domain.ReleaseCreated
	for _, e := range res.Events {
		if r, ok := e.(domain.ReleaseCreated); ok {
			rc = r
		}
	}
	require.Equal(t, 1, rc.Base)
	require.Equal(t, []domain.Variable{{Name: "B", Value: "3"}}, rc.Variables)
	require.Equal(t, map[string]string{"A": "1", "B": "3"}, w.runningVariables(t))
	w.rollback(t, 1)
	require.Equal(t, map[string]string{"A": "1", "B": "2"}, w.runningVariables(t))
	last, err := projections.RevisionNumber(ctx, w.b.pool, w.env, 0)
	require.NoError(t, err)
	require.Greater(t, last.Number, revision+2)
	for n := 1; n <= last.Number; n++ {
		_, err := projections.RevisionNumber(ctx, w.b.pool, w.env, n)
		require.NoError(t, err, "revision %d", n)
	}
	w.replayEqual(t)
}
