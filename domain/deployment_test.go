package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

func delivered(t *testing.T, deadline time.Duration) *domain.DeploymentAggregate {
	t.Helper()
	d := domain.NewDeployment()
	dec, err := d.Decide(dep1, domain.DeliverDeployment{ProjectID: projectID, EnvironmentID: stagingID, ServiceID: apiID,
		ReleaseID: rel1, ClusterID: clusterID, Revision: 3, ProgressDeadline: deadline}, meta("reactions", "c"))
	require.NoError(t, err)
	require.Equal(t, []string{"deployment.delivering"}, types(dec.Events))
	for _, e := range dec.Events {
		d.Apply(e)
	}
	return d
}

func decideDeployment(t *testing.T, d *domain.DeploymentAggregate, at time.Time, cmd domain.DeploymentCommand) []domain.Event {
	t.Helper()
	m := meta("agent", "c")
	m.Now = at
	dec, err := d.Decide(dep1, cmd, m)
	require.NoError(t, err)
	for _, e := range dec.Events {
		d.Apply(e)
	}
	return dec.Events
}

func TestDeploymentStagesMoveForwardOnly(t *testing.T) {
	t.Parallel()
	d := delivered(t, 0)
	require.Equal(t, domain.DefaultProgressDeadline, d.ProgressDeadline)
	again, err := d.Decide(dep1, domain.DeliverDeployment{ProjectID: projectID, EnvironmentID: stagingID, ServiceID: apiID,
		ReleaseID: rel1, ClusterID: clusterID, Revision: 4}, meta("reactions", "c"))
	require.NoError(t, err)
	require.Empty(t, again.Events, "delivering twice changes nothing")

	report := func(stage domain.DeploymentStatus, ready, desired int) domain.ReportStage {
		return domain.ReportStage{ClusterID: clusterID, Stage: stage, Ready: ready, Desired: desired}
	}
	_, err = d.Decide(dep1, domain.ReportStage{ClusterID: "00000000-0000-4000-8000-0000000000ff", Stage: domain.StatusStarting}, meta("agent", "c"))
	require.ErrorIs(t, err, domain.ErrForbidden, "another cluster's agent does not report on this deployment")
	_, err = d.Decide(dep1, report(domain.StatusDelivering, 0, 0), meta("agent", "c"))
	require.ErrorIs(t, err, domain.ErrInvalid, "delivering is not the agent's to report")
	_, err = d.Decide(dep1, domain.ReportStage{ClusterID: clusterID, Stage: domain.StatusProbing, Detail: "x\x00"}, meta("agent", "c"))
	require.ErrorIs(t, err, domain.ErrInvalid, "a NUL never reaches an event")

	require.Equal(t, []string{"deployment.stage"}, types(decideDeployment(t, d, now, report(domain.StatusStarting, 0, 2))))
	require.Equal(t, now, d.StartedAt)
	require.Equal(t, []string{"deployment.stage"}, types(decideDeployment(t, d, now.Add(time.Second), report(domain.StatusProbing, 1, 2))))
	require.Empty(t, decideDeployment(t, d, now.Add(2*time.Second), report(domain.StatusProbing, 1, 2)), "a repeated report changes nothing")
	require.Empty(t, decideDeployment(t, d, now.Add(2*time.Second), report(domain.StatusStarting, 0, 2)), "a late report of an earlier stage changes nothing")
	decideDeployment(t, d, now.Add(3*time.Second), report(domain.StatusSwitching, 2, 2))
	// Past the switch, the progress deadline no longer applies.
	require.Empty(t, decideDeployment(t, d, now.Add(time.Hour), domain.ExpireProgressDeadline{}))
	decideDeployment(t, d, now.Add(4*time.Second), report(domain.StatusRetiring, 2, 2))
	require.Equal(t, []string{"deployment.succeeded"}, types(decideDeployment(t, d, now.Add(5*time.Second), report(domain.StatusSucceeded, 2, 2))))
	require.Empty(t, decideDeployment(t, d, now.Add(6*time.Second), domain.SupersedeDeployment{By: dep1}), "a finished deployment is not superseded")
}

func TestProgressDeadlineCountsFromTheStart(t *testing.T) {
	t.Parallel()
	d := delivered(t, time.Minute)
	require.Empty(t, decideDeployment(t, d, now.Add(time.Hour), domain.ExpireProgressDeadline{}), "not started: the blocker is delivery, not the release")
	decideDeployment(t, d, now, domain.ReportStage{ClusterID: clusterID, Stage: domain.StatusStarting, Desired: 1})
	decideDeployment(t, d, now.Add(time.Second), domain.ReportStage{ClusterID: clusterID, Stage: domain.StatusProbing, Desired: 1,
		Detail: "CrashLoopBackOff: back-off 10s restarting failed container"})
	require.Empty(t, decideDeployment(t, d, now.Add(59*time.Second), domain.ExpireProgressDeadline{}))
	evs := decideDeployment(t, d, now.Add(time.Minute), domain.ExpireProgressDeadline{})
	require.Len(t, evs, 1)
	require.Contains(t, evs[0].(domain.DeploymentFailed).Reason, "CrashLoopBackOff")
	require.Contains(t, evs[0].(domain.DeploymentFailed).Reason, "0/1 pods ready")
	require.Equal(t, domain.StatusFailed, d.Stage)
}

func TestStallFlagAndClear(t *testing.T) {
	t.Parallel()
	d := delivered(t, 0)
	decideDeployment(t, d, now, domain.ReportStage{ClusterID: clusterID, Stage: domain.StatusStarting, Desired: 1})
	require.Empty(t, decideDeployment(t, d, now.Add(9*time.Minute), domain.CheckStall{StallTimeout: 10 * time.Minute}))
	require.Equal(t, []string{"deployment.stalled"}, types(decideDeployment(t, d, now.Add(10*time.Minute), domain.CheckStall{StallTimeout: 10 * time.Minute})))
	require.True(t, d.Stalled)
	evs := decideDeployment(t, d, now.Add(11*time.Minute), domain.ReportStage{ClusterID: clusterID, Stage: domain.StatusProbing, Desired: 1})
	require.Equal(t, []string{"deployment.stall_cleared", "deployment.stage"}, types(evs))
	require.False(t, d.Stalled)
}

func TestSupersedeBeforeDelivery(t *testing.T) {
	t.Parallel()
	d := domain.NewDeployment()
	evs := decideDeployment(t, d, now, domain.SupersedeDeployment{By: rel1})
	require.Equal(t, []string{"deployment.superseded"}, types(evs))
	dec, err := d.Decide(dep1, domain.DeliverDeployment{ProjectID: projectID, EnvironmentID: stagingID, ServiceID: apiID,
		ReleaseID: rel1, ClusterID: clusterID, Revision: 3}, meta("reactions", "c"))
	require.NoError(t, err)
	require.Empty(t, dec.Events, "a superseded deployment is never delivered")
}

func TestHeldServiceFailsItsDeployment(t *testing.T) {
	t.Parallel()
	dec, err := domain.NewDeployment().Decide(dep1, domain.DeliverDeployment{ProjectID: projectID, EnvironmentID: stagingID, ServiceID: apiID,
		ReleaseID: rel1, ClusterID: clusterID, Revision: 3, HeldReason: "variable X references a deleted service"}, meta("reactions", "c"))
	require.NoError(t, err)
	require.Equal(t, []string{"deployment.delivering", "deployment.failed"}, types(dec.Events))
	require.Contains(t, dec.Events[1].(domain.DeploymentFailed).Reason, "references a deleted service")
}
