package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/testenv/registrytest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/servertest"
)

// rollout is a control plane with an image registry, an organisation with a
// cluster (no agent: it is Disconnected), a project with an unprotected and
// a protected environment and a service, and a command handler to play the
// agent's part.
type rollout struct {
	t       *testing.T
	srv     *servertest.Server
	c       *client
	root    string
	image   string
	orgID   string
	cluster string
	cmd     *dispatch.Handler
}

func newRollout(t *testing.T) *rollout {
	t.Helper()
	host := registrytest.Start(t)
	r := &rollout{t: t, srv: servertest.Start(t, servertest.Options{Insecure: []string{host}}), image: host + "/api:v1"}
	r.c = newClient(t, r.srv)
	r.root = r.srv.Setup(t, "root@example.com", "acme")
	r.must(r.c.do("POST", "/api/v1/orgs/acme/clusters", r.root, map[string]any{"name": "eu-1"}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/projects", r.root, map[string]any{"name": "shop"}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", r.root, map[string]any{"name": "staging", "cluster": "eu-1"}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/projects/shop/environments", r.root, map[string]any{"name": "production", "cluster": "eu-1", "protected": true}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/projects/shop/services", r.root, map[string]any{"name": "api", "image": r.image, "port": 8080,
		"progressDeadlineSeconds": 900}), 201)
	var org api.Organisation
	r.c.do("GET", "/api/v1/orgs/acme", r.root, nil).json(t, &org)
	r.orgID = org.ID
	var cl api.ClusterResponse
	r.c.do("GET", "/api/v1/orgs/acme/clusters/eu-1", r.root, nil).json(t, &cl)
	r.cluster = cl.ID
	pool, err := pgxpool.New(context.Background(), r.srv.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	r.cmd, err = dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	require.NoError(t, err)
	return r
}

func (r *rollout) must(res response, status int) response {
	r.t.Helper()
	require.Equal(r.t, status, res.status, string(res.body))
	return res
}

const target = "/api/v1/orgs/acme/projects/shop/environments/staging/services/api"

// deploy deploys the service's image to staging and waits until the
// reactions delivered the deployment.
func (r *rollout) deploy() string {
	r.t.Helper()
	var res api.DeployResponse
	r.must(r.c.do("POST", target+"/deployments", r.root, map[string]any{}), 202).json(r.t, &res)
	require.NotNil(r.t, res.Deployment)
	id := res.Deployment.ID
	require.Eventually(r.t, func() bool {
		var d api.DeploymentDetail
		r.must(r.c.do("GET", target+"/deployments/"+id, r.root, nil), 200).json(r.t, &d)
		return d.Status == string(domain.StatusDelivering)
	}, 20*time.Second, 50*time.Millisecond, "the deployment is delivered")
	return id
}

// report plays the agent: a stage with pods ready of desired.
func (r *rollout) report(id string, stage domain.DeploymentStatus, ready, desired int) {
	r.t.Helper()
	_, err := r.cmd.Deployment(context.Background(), dispatch.Context{Actor: domain.Actor{Kind: domain.ActorAgent, ID: "agent-1", Name: "eu-1/agent-1"}},
		r.orgID, id, domain.ReportStage{ClusterID: r.cluster, Stage: stage, Ready: ready, Desired: desired})
	require.NoError(r.t, err)
}

// stream is an open event stream, read as it comes.
type stream struct {
	t      *testing.T
	c      *client
	req    *http.Request
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	raw    bytes.Buffer
	ended  chan struct{}
}

// openStream opens an event stream; lastID "" sends no Last-Event-ID.
func (c *client) openStream(t *testing.T, path, token, lastID string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", c.base+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, api.StreamMediaType, resp.Header.Get("Content-Type"))
	s := &stream{t: t, c: c, req: req, resp: resp, cancel: cancel, events: make(chan sseEvent, 100), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		rd := bufio.NewReader(resp.Body)
		var pending []byte
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				return
			}
			s.raw.Write(line)
			pending = append(pending, line...)
			if bytes.Equal(line, []byte("\n")) {
				for _, e := range parseEvents(pending) {
					s.events <- e
				}
				pending = nil
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
	<-s.ended
}

// next returns the next event.
func (s *stream) next() sseEvent {
	s.t.Helper()
	select {
	case e := <-s.events:
		return e
	case <-time.After(10 * time.Second):
		s.t.Fatalf("no event within 10 s; the stream so far:\n%s", s.raw.String())
	}
	return sseEvent{}
}

// ends checks that the server closes the stream, and validates everything
// it sent against the document.
func (s *stream) ends() {
	s.t.Helper()
	select {
	case <-s.ended:
	case <-time.After(10 * time.Second):
		s.t.Fatalf("the stream did not end; so far:\n%s", s.raw.String())
	}
	require.Empty(s.t, s.events, "no event after the last")
	s.validate()
}

// validate checks the headers and every event received against the document.
func (s *stream) validate() {
	s.t.Helper()
	s.c.validate(s.req, nil, s.resp, s.raw.Bytes())
}

func stageOf(t *testing.T, e sseEvent) api.DeploymentStageEvent {
	t.Helper()
	require.Equal(t, "stage", e.name, "%s", e.data)
	var st api.DeploymentStageEvent
	require.NoError(t, json.Unmarshal(e.data, &st))
	require.Equal(t, strconv.Itoa(st.Seq), e.id, "a stage event's id is its seq")
	return st
}

func deploymentOf(t *testing.T, e sseEvent) api.DeploymentView {
	t.Helper()
	require.Equal(t, "deployment", e.name, "%s", e.data)
	require.Empty(t, e.id, "a deployment snapshot has no id: resuming goes by stages")
	var d api.DeploymentView
	require.NoError(t, json.Unmarshal(e.data, &d))
	return d
}

// A deployment's stream: a snapshot, each stage in order with its seq as the
// id, stall and blocker changes as deployment updates; resumed with
// Last-Event-ID nothing is lost or repeated; it ends after the terminal stage.
func TestDeploymentEventStream(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	id := r.deploy()
	events := target + "/deployments/" + id + "/events"

	// The read of one deployment, and of the service in the environment.
	var d api.DeploymentDetail
	r.must(r.c.do("GET", target+"/deployments/"+id, r.root, nil), 200).json(t, &d)
	require.Equal(t, []string{api.BlockerDelivery}, d.Blockers, "no agent: the cluster is disconnected and the revision not applied")
	require.Len(t, d.Stages, 1)
	require.Equal(t, "delivering", d.Stages[0].Stage)
	require.Equal(t, 1, d.Stages[0].Seq)
	require.Equal(t, "system:reactions", d.Stages[0].Actor)
	require.Positive(t, d.Revision)
	var latest api.DeploymentDetail
	one := r.must(r.c.do("GET", target+"/deployments/latest", r.root, nil), 200)
	one.json(t, &latest)
	require.Equal(t, id, latest.ID)
	// Its ETag is its own stream's version.
	require.Regexp(t, `^"deployment-`+id+`\.[1-9]\d*"$`, one.header.Get("ETag"))
	r.must(r.c.do("GET", target+"/deployments/"+uuid.NewString(), r.root, nil), 404)
	r.must(r.c.do("GET", "/api/v1/orgs/acme/projects/shop/environments/production/services/api/deployments/"+id, r.root, nil), 404)
	var tv api.TargetView
	r.must(r.c.do("GET", target, r.root, nil), 200).json(t, &tv)
	require.Equal(t, id, tv.LatestDeployment.ID)
	require.Nil(t, tv.DeploysPaused)
	require.Equal(t, 900, tv.Service.ProgressDeadlineSeconds)

	s := r.c.openStream(t, events, r.root, "")
	snap := deploymentOf(t, s.next())
	require.Equal(t, id, snap.ID)
	require.Equal(t, "delivering", snap.Status)
	require.Equal(t, []string{api.BlockerDelivery}, snap.Blockers)
	st := stageOf(t, s.next())
	require.Equal(t, "delivering", st.Stage)
	require.Equal(t, []string{api.BlockerDelivery}, st.Blockers)

	r.report(id, domain.StatusStarting, 0, 2)
	st = stageOf(t, s.next())
	require.Equal(t, 2, st.Seq, "seq is the deployment stream's version")
	require.Equal(t, "starting", st.Stage)
	require.Equal(t, "agent:eu-1/agent-1", st.Actor)
	require.Empty(t, st.Blockers, "started: delivered")
	require.Empty(t, deploymentOf(t, s.next()).Blockers, "the blocker's end is an update")

	// Stalled: a deployment update; moving again clears it.
	_, err := r.cmd.Deployment(context.Background(), dispatch.Context{Actor: domain.System("test")}, r.orgID, id, domain.CheckStall{StallTimeout: time.Nanosecond})
	require.NoError(t, err)
	u := deploymentOf(t, s.next())
	require.True(t, u.Stalled)
	require.NotNil(t, u.StalledSince)
	r.report(id, domain.StatusProbing, 1, 2)
	st = stageOf(t, s.next())
	require.Equal(t, "probing", st.Stage)
	require.Greater(t, st.Seq, 3, "the stall and its end are events of the stream too (not stages)")
	require.False(t, st.Stalled, "a stage clears the stall")
	require.False(t, deploymentOf(t, s.next()).Stalled)
	seen := []int{1, 2, st.Seq}
	s.close()
	s.validate()

	// What happens while nobody listens comes on resuming, once.
	r.report(id, domain.StatusProbing, 2, 2)
	r.report(id, domain.StatusSwitching, 2, 2)
	s = r.c.openStream(t, events, r.root, strconv.Itoa(seen[2]))
	deploymentOf(t, s.next())
	var stages []string
	for range 2 {
		st = stageOf(t, s.next())
		seen = append(seen, st.Seq)
		stages = append(stages, fmt.Sprintf("%s %d/%d", st.Stage, st.Ready, st.Desired))
	}
	require.Equal(t, []string{"probing 2/2", "switching 2/2"}, stages)
	r.report(id, domain.StatusRetiring, 2, 2)
	seen = append(seen, stageOf(t, s.next()).Seq)
	r.report(id, domain.StatusSucceeded, 2, 2)
	last := stageOf(t, s.next())
	seen = append(seen, last.Seq)
	require.Equal(t, "succeeded", last.Stage)
	require.True(t, last.Terminal)
	require.IsIncreasing(t, seen)
	s.ends()

	// Resumed after the end: the snapshot, and the stream closes.
	s = r.c.openStream(t, events, r.root, strconv.Itoa(last.Seq))
	require.Equal(t, "succeeded", deploymentOf(t, s.next()).Status)
	s.ends()
	// From the start: every stage once, in order, then the end.
	s = r.c.openStream(t, events, r.root, "")
	deploymentOf(t, s.next())
	var seqs []int
	for range len(seen) {
		seqs = append(seqs, stageOf(t, s.next()).Seq)
	}
	require.Equal(t, seen, seqs)
	s.ends()
	r.must(r.c.do("GET", target+"/deployments/"+id, r.root, nil), 200).json(t, &d)
	require.Len(t, d.Stages, len(seen), "the read has the same stages")

	// The same through the client of the test, which validates it whole.
	n := len(seen)
	res := r.must(r.c.do("GET", events+"?lastEventId="+strconv.Itoa(seen[n-3]), r.root, nil), 200)
	evs := parseEvents(res.body)
	require.Len(t, evs, 3)
	require.Equal(t, []string{"", strconv.Itoa(seen[n-2]), strconv.Itoa(seen[n-1])}, []string{evs[0].id, evs[1].id, evs[2].id})
	r.must(r.c.do("GET", events, r.root, nil, "Last-Event-ID", "x"), 400)
	r.must(r.c.do("GET", target+"/deployments/latest/events", "nbl_0000_x", nil), 401)

	// The list shows the stage, pods and flags.
	var list []api.DeploymentView
	r.must(r.c.do("GET", target+"/deployments", r.root, nil), 200).items(t, &list)
	require.Len(t, list, 1)
	require.Equal(t, "succeeded", list[0].Status)
	require.Equal(t, 2, list[0].Ready)
	require.Equal(t, 2, list[0].Desired)
	require.NotNil(t, list[0].FinishedAt)
	require.Empty(t, list[0].Blockers)
}

// A superseded deployment's stream ends with its superseded stage.
func TestDeploymentStreamEndsWhenSuperseded(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	first := r.deploy()
	s := r.c.openStream(t, target+"/deployments/"+first+"/events", r.root, "")
	deploymentOf(t, s.next())
	require.Equal(t, "delivering", stageOf(t, s.next()).Stage)
	second := r.deploy()
	var st api.DeploymentStageEvent
	for st.Stage != "superseded" {
		st = stageOf(t, s.next())
	}
	require.True(t, st.Terminal)
	require.Equal(t, second, st.SupersededBy)
	s.ends()
}

// An environment's activity: audit entries about it (not another
// environment's), with the entry's seq as id; Last-Event-ID resumes exactly.
func TestEnvironmentEventStream(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	env := "/api/v1/orgs/acme/projects/shop/environments/staging"
	s := r.c.openStream(t, env+"/events", r.root, "")
	r.must(r.c.do("PUT", env+"/variables", r.root, map[string]any{"variables": []map[string]any{{"name": "REGION", "value": "eu"}}}), 200)
	r.must(r.c.do("PUT", "/api/v1/orgs/acme/projects/shop/environments/production/variables", r.root,
		map[string]any{"variables": []map[string]any{{"name": "REGION", "value": "us"}}}), 202)
	id := r.deploy()
	var got []api.AuditEntry
	seen := map[string]bool{}
	for !seen["deployment.deliver"] {
		e := s.next()
		require.Equal(t, "audit", e.name)
		var a api.AuditEntry
		require.NoError(t, json.Unmarshal(e.data, &a))
		require.Equal(t, strconv.FormatInt(a.Seq, 10), e.id)
		if len(got) > 0 {
			require.Greater(t, a.Seq, got[len(got)-1].Seq)
		}
		require.NotContains(t, a.Target.Name, "production", "another environment's entry: %+v", a)
		got = append(got, a)
		seen[a.Action] = true
	}
	for _, action := range []string{"variable.update", "release.create", "service.deploy", "deployment.deliver"} {
		require.True(t, seen[action], "%s in %v", action, seen)
	}
	s.close()
	s.validate()

	// While nobody listens: stages, then the end.
	for _, st := range []domain.DeploymentStatus{domain.StatusStarting, domain.StatusProbing, domain.StatusSucceeded} {
		r.report(id, st, 1, 1)
	}
	lastID := strconv.FormatInt(got[len(got)-1].Seq, 10)
	s = r.c.openStream(t, env+"/events", r.root, lastID)
	var resumed []api.AuditEntry
	for len(resumed) == 0 || resumed[len(resumed)-1].Action != "deployment.succeed" {
		var a api.AuditEntry
		require.NoError(t, json.Unmarshal(s.next().data, &a))
		resumed = append(resumed, a)
	}
	s.close()
	s.validate()
	// Exactly what the audit log has about the environment after that seq.
	var page api.AuditPage
	r.must(r.c.do("GET", "/api/v1/orgs/acme/audit?cursor="+lastID, r.root, nil), 200).json(t, &page)
	var want []int64
	for _, e := range page.Items {
		if e.Target.Kind == "deployment" || strings.HasPrefix(e.Target.Name, "acme/shop/staging") {
			want = append(want, e.Seq)
		}
	}
	var have []int64
	for _, a := range resumed {
		have = append(have, a.Seq)
	}
	require.Equal(t, want, have, "resumed after %s: nothing lost, nothing repeated", lastID)
	var deployment []string
	for _, a := range resumed {
		if strings.HasPrefix(a.Action, "deployment.") {
			deployment = append(deployment, a.Action)
		}
	}
	require.Equal(t, []string{"deployment.stage", "deployment.stage", "deployment.succeed"}, deployment)

	// Another organisation's member sees nothing of it.
	r.must(r.c.do("POST", "/api/v1/users", r.root, map[string]any{"email": "out@example.com", "password": "correct horse battery staple"}), 201)
	out := login(t, r.c, "out@example.com")
	r.must(r.c.do("GET", env+"/events", out, nil), 404)
}

// A change set's read shows its version and what it changes; an approval
// names the version (422 without, 409 for another); a rollback pauses
// automatic deploys until resume-deploys; services keep their deadline.
func TestChangeSetsRollbackPausesAndDeadlines(t *testing.T) {
	t.Parallel()
	r := newRollout(t)
	prod := "/api/v1/orgs/acme/projects/shop/environments/production"
	set := func(name, value string, secret bool) api.VariablesResponse {
		var v api.VariablesResponse
		r.must(r.c.do("PUT", prod+"/services/api/variables", r.root,
			map[string]any{"variables": []map[string]any{{"name": name, "value": value, "secret": secret}}}), 202).json(t, &v)
		require.NotNil(t, v.ChangeSet)
		return v
	}
	first := set("LOG_LEVEL", "warn", false)
	require.Equal(t, 1, first.ChangeSet.Version)
	second := set("API_KEY", "s3cr3t-value", true)
	require.Equal(t, first.ChangeSet.ID, second.ChangeSet.ID, "the same person's changes join the open change set")
	require.Equal(t, 2, second.ChangeSet.Version)
	id := first.ChangeSet.ID

	var cs api.ChangeSetView
	res := r.must(r.c.do("GET", prod+"/changesets/"+id, r.root, nil), 200)
	require.NotContains(t, string(res.body), "s3cr3t-value")
	res.json(t, &cs)
	require.Equal(t, 2, cs.Version)
	require.Equal(t, "open", cs.Status)
	require.Len(t, cs.Diff, 2)
	require.Equal(t, api.DiffSetVariable, cs.Diff[0].Kind)
	require.Equal(t, "api", cs.Diff[0].Service)
	require.Nil(t, cs.Diff[0].Old, "not set yet")
	require.Equal(t, "warn", *cs.Diff[0].New)
	require.True(t, cs.Diff[1].Secret)
	require.Equal(t, query.Masked, *cs.Diff[1].New)
	r.must(r.c.do("GET", prod+"/changesets/"+uuid.NewString(), r.root, nil), 404)
	r.must(r.c.do("GET", "/api/v1/orgs/acme/projects/shop/environments/staging/changesets/"+id, r.root, nil), 404)
	var open []api.ChangeSet
	r.must(r.c.do("GET", prod+"/changesets?status=open", r.root, nil), 200).items(t, &open)
	require.Len(t, open, 1)
	require.Equal(t, 2, open[0].Version)
	r.must(r.c.do("GET", prod+"/changesets?status=expired", r.root, nil), 200)
	r.must(r.c.do("GET", prod+"/changesets?status=lost", r.root, nil), 400)

	r.must(r.c.do("POST", "/api/v1/users", r.root, map[string]any{"email": "bob@example.com", "password": "correct horse battery staple"}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/members", r.root, map[string]any{"email": "bob@example.com", "role": "admin"}), 201)
	bob := login(t, r.c, "bob@example.com")
	r.must(r.c.do("POST", prod+"/changesets/"+id+"/approve", bob, map[string]any{}), 422)
	res = r.must(r.c.do("POST", prod+"/changesets/"+id+"/approve", bob, map[string]any{"version": 1}), 409)
	_, msg := res.errorCode(t)
	require.Contains(t, msg, "review it again")
	var decided api.ChangeSet
	r.must(r.c.do("POST", prod+"/changesets/"+id+"/approve", bob, map[string]any{"version": 2}), 200).json(t, &decided)
	require.Equal(t, "approved", decided.Status)

	// A rollback pauses the automatic deploys of the service there.
	r.deploy()
	r.deploy()
	var rb api.DeployResponse
	r.must(r.c.do("POST", target+"/rollback", r.root, map[string]any{"release": 1}), 202).json(t, &rb)
	require.True(t, rb.Deployment.Rollback)
	var tv api.TargetView
	r.must(r.c.do("GET", target, r.root, nil), 200).json(t, &tv)
	require.NotNil(t, tv.DeploysPaused)
	require.NotEmpty(t, tv.DeploysPaused.Reason)
	require.Contains(t, tv.DeploysPaused.PausedBy, "root@example.com")
	require.Equal(t, rb.Deployment.ID, tv.LatestDeployment.ID)
	require.Equal(t, 1, tv.CurrentRelease.Number)
	viewer := "viewer@example.com"
	r.must(r.c.do("POST", "/api/v1/users", r.root, map[string]any{"email": viewer, "password": "correct horse battery staple"}), 201)
	r.must(r.c.do("POST", "/api/v1/orgs/acme/members", r.root, map[string]any{"email": viewer, "role": "viewer"}), 201)
	r.must(r.c.do("POST", target+"/resume-deploys", login(t, r.c, viewer), nil), 403)
	var resumed api.TargetView
	r.must(r.c.do("POST", target+"/resume-deploys", r.root, nil), 200).json(t, &resumed)
	require.Nil(t, resumed.DeploysPaused)
	r.must(r.c.do("POST", target+"/resume-deploys", r.root, nil), 200)

	// The progress deadline: kept by a change that does not name it.
	var svc api.Service
	r.must(r.c.do("PATCH", "/api/v1/orgs/acme/projects/shop/services/api", r.root, map[string]any{"replicas": 3}), 200).json(t, &svc)
	require.Equal(t, 900, svc.ProgressDeadlineSeconds)
	r.must(r.c.do("PATCH", "/api/v1/orgs/acme/projects/shop/services/api", r.root, map[string]any{"progressDeadlineSeconds": 0}), 200).json(t, &svc)
	require.Equal(t, 0, svc.ProgressDeadlineSeconds)
	r.must(r.c.do("PATCH", "/api/v1/orgs/acme/projects/shop/services/api", r.root, map[string]any{"progressDeadlineSeconds": 90000}), 422)
}
