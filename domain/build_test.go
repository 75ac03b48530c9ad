package domain_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

func decideBuild(t *testing.T, b *domain.Build, id string, m domain.Meta, cmd domain.BuildCommand) []domain.Event {
	t.Helper()
	d, err := b.Decide(id, cmd, m)
	require.NoError(t, err)
	for _, e := range d.Events {
		b.Apply(e)
	}
	return d.Events
}

func system(cmd string, at time.Time) domain.Meta {
	return domain.Meta{Actor: domain.System("reactions"), CommandID: cmd, Now: at}
}

var commitA = strings.Repeat("a", 40)

func queueOf(envs ...string) domain.QueueBuild {
	return domain.QueueBuild{ProjectID: projectID, ServiceID: apiID, ClusterID: clusterID, Repository: "https://git.example.com/acme/api.git",
		Branch: "main", Commit: commitA, Environments: envs, Automatic: true, Trigger: "push"}
}

// A build goes queued -> running -> succeeded once: repeated and late
// reports change nothing, and its verdict is final.
func TestBuildLifecycle(t *testing.T) {
	t.Parallel()
	id := domain.BuildID(apiID, commitA, clusterID)
	require.Equal(t, id, domain.BuildID(apiID, commitA, clusterID), "one build per (service, commit, cluster)")
	b := domain.NewBuild()
	evs := decideBuild(t, b, id, system("q", now), queueOf(stagingID))
	require.Equal(t, 1, evs[0].(domain.BuildQueuedEvent).Attempt)
	require.Equal(t, 1800, evs[0].(domain.BuildQueuedEvent).TimeoutSeconds, "30 minutes by default")
	require.Empty(t, decideBuild(t, b, id, system("q2", now), queueOf(stagingID)), "the same push again queues nothing")
	evs = decideBuild(t, b, id, system("q3", now), domain.QueueBuild(queueOf(prodID)))
	require.Equal(t, []domain.Event{domain.BuildTargetsAdded{BuildID: id, Environments: []string{stagingID, prodID}, Automatic: true}}, evs)

	// A report before the scheduler started it is of nothing running here.
	rep := domain.ReportBuild{ClusterID: clusterID, State: "succeeded", Image: "localhost:30500/acme/shop/api", Digest: "sha256:" + strings.Repeat("1", 64)}
	require.Empty(t, decideBuild(t, b, id, system("r0", now), rep))
	decideBuild(t, b, id, system("s", now), domain.StartBuild{})
	require.Equal(t, domain.BuildRunning, b.Status)
	_, err := b.Decide(id, domain.ReportBuild{ClusterID: webID, State: "succeeded"}, system("r1", now))
	require.ErrorIs(t, err, domain.ErrForbidden, "only the build's cluster reports on it")
	_, err = b.Decide(id, domain.ReportBuild{ClusterID: clusterID, State: "succeeded", Image: "x", Digest: "sha256:short"}, system("r1", now))
	require.ErrorIs(t, err, domain.ErrInvalid)
	_, err = b.Decide(id, domain.ReportBuild{ClusterID: clusterID, State: "running", Commit: strings.Repeat("b", 40)}, system("r1", now))
	require.ErrorIs(t, err, domain.ErrInvalid, "a build of commit A does not report commit B")
	evs = decideBuild(t, b, id, system("r2", now), rep)
	require.Equal(t, "build.succeeded", evs[0].EventType())
	require.Equal(t, "build.succeed", domain.Audit(evs[0]).Action)
	require.Empty(t, decideBuild(t, b, id, system("r3", now), domain.ReportBuild{ClusterID: clusterID, State: "failed", ExitCode: 1}))
	require.Empty(t, decideBuild(t, b, id, system("q4", now), queueOf(stagingID)), "a succeeded build is not built again")
	_, err = b.Decide(id, domain.CancelBuild{Reason: "x"}, system("c", now))
	require.ErrorIs(t, err, domain.ErrConflict, "a finished build cannot be cancelled")
}

// A failed build keeps its exit code and log tail; queueing it again is its
// next attempt. A timeout ends a running build only once it is due.
func TestBuildFailsTimesOutAndIsQueuedAgain(t *testing.T) {
	t.Parallel()
	id := domain.BuildID(apiID, commitA, clusterID)
	b := domain.NewBuild()
	decideBuild(t, b, id, system("q", now), queueOf(stagingID))
	decideBuild(t, b, id, system("s", now), domain.StartBuild{})
	evs := decideBuild(t, b, id, system("f", now), domain.ReportBuild{ClusterID: clusterID, State: "failed", ExitCode: 3,
		Reason: `process "/bin/sh -c exit 3" did not complete successfully: exit code: 3`, LogTail: []string{"step 1", "boom"}})
	f := evs[0].(domain.BuildFailedEvent)
	require.Equal(t, 3, f.ExitCode)
	require.Equal(t, []string{"step 1", "boom"}, f.LogTail)
	require.Contains(t, domain.Audit(f).Detail, "exit code 3")

	evs = decideBuild(t, b, id, system("q2", now), queueOf(stagingID))
	require.Equal(t, 2, evs[0].(domain.BuildQueuedEvent).Attempt)
	decideBuild(t, b, id, system("s2", now), domain.StartBuild{})
	require.Empty(t, decideBuild(t, b, id, system("t0", now.Add(29*time.Minute)), domain.TimeOutBuild{}), "not due yet")
	evs = decideBuild(t, b, id, system("t1", now.Add(30*time.Minute)), domain.TimeOutBuild{})
	require.Equal(t, "build.timed_out", evs[0].EventType())
	require.Equal(t, "build.fail", domain.Audit(evs[0]).Action)
}

// A newer push cancels a build; its cancel of a build that is over by then
// changes nothing, a person's is refused.
func TestBuildCancel(t *testing.T) {
	t.Parallel()
	id := domain.BuildID(apiID, commitA, clusterID)
	b := domain.NewBuild()
	decideBuild(t, b, id, system("q", now), queueOf(stagingID))
	decideBuild(t, b, id, system("s", now), domain.StartBuild{})
	newer := domain.BuildID(apiID, strings.Repeat("b", 40), clusterID)
	evs := decideBuild(t, b, id, system("c", now), domain.CancelBuild{Reason: "superseded", By: newer})
	require.Equal(t, domain.BuildCancelledEvent{BuildID: id, Reason: "superseded", By: newer, WasRunning: true}, evs[0])
	require.Empty(t, decideBuild(t, b, id, system("c2", now), domain.CancelBuild{Reason: "again", By: newer}))
}

func TestBuildRefusesBadInput(t *testing.T) {
	t.Parallel()
	id := domain.BuildID(apiID, commitA, clusterID)
	for name, q := range map[string]func(*domain.QueueBuild){
		"short commit":     func(q *domain.QueueBuild) { q.Commit = "abc" },
		"upper-case":       func(q *domain.QueueBuild) { q.Commit = strings.Repeat("A", 40) },
		"bad branch":       func(q *domain.QueueBuild) { q.Branch = "a..b" },
		"nul in repo":      func(q *domain.QueueBuild) { q.Repository = "https://x/\x00" },
		"escaping context": func(q *domain.QueueBuild) { q.Context = "../etc" },
		"absolute file":    func(q *domain.QueueBuild) { q.Dockerfile = "/Dockerfile" },
		"trigger":          func(q *domain.QueueBuild) { q.Trigger = "cron" },
		"long timeout":     func(q *domain.QueueBuild) { q.Timeout = 7 * time.Hour },
	} {
		c := queueOf(stagingID)
		q(&c)
		_, err := domain.NewBuild().Decide(id, c, system("q", now))
		require.ErrorIs(t, err, domain.ErrInvalid, name)
	}
}

// A delivery is recorded once: the same forge delivery id again is a no-op.
func TestDeliveryIsRecordedOnce(t *testing.T) {
	t.Parallel()
	id := domain.DeliveryID(projectID, "github", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	w := domain.NewWebhookDelivery()
	cmd := domain.RecordDelivery{ProjectID: projectID, Provider: "github", ForgeID: "72d3162e-cc78-11e3-81ab-4c9367dc0958", Event: "push",
		Ref: "refs/heads/main", Branch: "main", Commit: commitA, Outcome: domain.DeliveryBuilding,
		Builds: []domain.DeliveryBuild{{ServiceID: apiID, ClusterID: clusterID, Environments: []string{stagingID}}}}
	d, err := w.Decide(id, cmd, system("d", now))
	require.NoError(t, err)
	require.Equal(t, "webhook.delivery", domain.Audit(d.Events[0]).Action)
	w.Apply(d.Events[0])
	d, err = w.Decide(id, cmd, system("d2", now))
	require.NoError(t, err)
	require.Empty(t, d.Events)

	ignored := cmd
	ignored.Outcome, ignored.Reason = domain.DeliveryIgnored, "branch x is not tracked"
	_, err = domain.NewWebhookDelivery().Decide(id, ignored, system("d3", now))
	require.ErrorIs(t, err, domain.ErrInvalid, "an ignored delivery builds nothing")
}

func gitProject(t *testing.T) *domain.Project {
	t.Helper()
	p := given(
		domain.ProjectCreated{ProjectID: projectID, OrgID: orgID, Name: "shop"},
		domain.EnvironmentCreated{EnvironmentID: stagingID, Name: "staging", ClusterID: clusterID},
		domain.ServiceCreated{ServiceID: apiID, Name: "api", Source: domain.Source{GitURL: "https://git.example.com/acme/api.git", GitBranch: "main"}, Processes: web},
		domain.ServiceCreated{ServiceID: webID, Name: "web", Source: domain.Source{Image: "registry.example.com/web:1"}, Processes: web},
	)
	return p
}

func TestTrackBranch(t *testing.T) {
	t.Parallel()
	p := gitProject(t)
	require.Equal(t, "main", p.TrackedBranch(stagingID, apiID), "the default branch unless set")
	evs := decideAll(t, p, meta(alice, "t1"), domain.TrackBranch{EnvironmentID: stagingID, ServiceID: apiID, Branch: "feature/x"})
	require.Equal(t, "service.track", domain.Audit(evs[0]).Action)
	require.Equal(t, "feature/x", p.TrackedBranch(stagingID, apiID))
	require.Empty(t, decideAll(t, p, meta(alice, "t2"), domain.TrackBranch{EnvironmentID: stagingID, ServiceID: apiID, Branch: "feature/x"}))
	decideAll(t, p, meta(alice, "t3"), domain.TrackBranch{EnvironmentID: stagingID, ServiceID: apiID, None: true})
	require.Equal(t, "", p.TrackedBranch(stagingID, apiID))
	_, err := p.Decide(domain.TrackBranch{EnvironmentID: stagingID, ServiceID: webID, Branch: "main"}, meta(alice, "t4"))
	require.ErrorIs(t, err, domain.ErrInvalid, "an image service tracks no branch")
	_, err = p.Decide(domain.TrackBranch{EnvironmentID: stagingID, ServiceID: apiID, Branch: "bad..name"}, meta(alice, "t5"))
	require.ErrorIs(t, err, domain.ErrInvalid)
}

func TestWebhookSecretRotationKeepsThePreviousForAGracePeriod(t *testing.T) {
	t.Parallel()
	p := gitProject(t)
	first := domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{1}}
	evs := decideAll(t, p, meta(alice, "w1"), domain.RotateWebhookSecret{Secret: first})
	require.Nil(t, evs[0].(domain.WebhookSecretRotated).Previous, "nothing to keep the first time")
	second := domain.SealedValue{DataKeyID: "k", Ciphertext: []byte{2}}
	evs = decideAll(t, p, meta(alice, "w2"), domain.RotateWebhookSecret{Secret: second})
	e := evs[0].(domain.WebhookSecretRotated)
	require.Equal(t, first, *e.Previous)
	require.Equal(t, now.Add(domain.WebhookSecretGrace), *e.PreviousUntil)
	require.Equal(t, second, p.Webhook.Current)
}

// A build's automatic deploy into a protected environment waits in a change
// set that the system opened, which any person may approve.
func TestAutomaticDeployIntoAProtectedEnvironmentWaitsForApproval(t *testing.T) {
	t.Parallel()
	p := gitProject(t)
	p.Apply(domain.EnvironmentUpdated{EnvironmentID: stagingID, ClusterID: clusterID, Protected: true})
	d := domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest, Automatic: true}
	m := domain.Meta{Actor: domain.System("reactions"), CommandID: "b1", Now: now}
	dec, err := p.Decide(d, m)
	require.NoError(t, err)
	opened := dec.Events[0].(domain.ChangeSetOpened)
	require.Equal(t, domain.SystemOpener, opened.OpenedBy)
	p.ApplyAt(opened, now)
	evs := decideAll(t, p, meta(alice, "a1"), domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID, Version: 1})
	require.Equal(t, []string{"changeset.approved", "release.created", "deployment.requested"}, types(evs))
}

// A build's image lives in the registry of the cluster it was built on: an
// environment that moved to another cluster since is not given it.
func TestABuildDeploysOnlyWhereItWasBuilt(t *testing.T) {
	t.Parallel()
	p := gitProject(t)
	other := "00000000-0000-4000-8000-0000000000c2"
	d := domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest, BuildID: dep1, ClusterID: other}
	_, err := p.Decide(d, meta(alice, "d1"))
	require.ErrorIs(t, err, domain.ErrConflict)
	require.ErrorContains(t, err, "moved to another cluster")
	d.ClusterID = clusterID
	require.Len(t, decideAll(t, p, meta(alice, "d2"), d), 2)
}
