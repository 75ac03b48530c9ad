package domain

import (
	"fmt"
	"slices"
	"time"
)

// DeploymentAggregate is one deployment's lifecycle: the stages its agent
// reports, and the control plane's verdicts (failed past its progress
// deadline, superseded by a newer deployment, stalled). It is a stream of its
// own (deployment-<id>), so that agents' reports never contend with people's
// commands on the project stream, and its history is bounded by the stages.
//
// The project decides that a deployment exists (deployment.requested on the
// project stream); the reactions open its stream when the desired state that
// carries it is compiled (deployment.delivering).
type DeploymentAggregate struct {
	ID            string
	Exists        bool
	ProjectID     string
	EnvironmentID string
	ServiceID     string
	ReleaseID     string
	ClusterID     string
	Revision      int
	Stage         DeploymentStatus
	Ready         int
	Desired       int
	Detail        string
	Stalled       bool
	// LastProgress is when the stage or the pod counts last moved.
	LastProgress time.Time
	// StartedAt is when the agent started the release's pods: the progress
	// deadline counts from then, not from delivery, so a cluster that was
	// disconnected (the blocker delivery) does not fail a release it never saw.
	StartedAt time.Time
	// ProgressDeadline is how long the release may take to become ready.
	ProgressDeadline time.Duration
}

// DeploymentStatus is where a deployment is in its lifecycle.
type DeploymentStatus string

// Deployment statuses, in rollout order. Failed and superseded end a
// deployment before it succeeds.
const (
	StatusRequested  DeploymentStatus = "requested"
	StatusDelivering DeploymentStatus = "delivering"
	StatusStarting   DeploymentStatus = "starting"
	StatusProbing    DeploymentStatus = "probing"
	StatusSwitching  DeploymentStatus = "switching"
	StatusRetiring   DeploymentStatus = "retiring"
	StatusSucceeded  DeploymentStatus = "succeeded"
	StatusFailed     DeploymentStatus = "failed"
	StatusSuperseded DeploymentStatus = "superseded"
)

// rolloutOrder is the order of the stages an agent reports.
var rolloutOrder = []DeploymentStatus{StatusRequested, StatusDelivering, StatusStarting, StatusProbing, StatusSwitching, StatusRetiring, StatusSucceeded}

// Terminal reports whether a deployment in status s is over.
func (s DeploymentStatus) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusSuperseded
}

// rank is the position of s in the rollout order (-1 for verdicts).
func (s DeploymentStatus) rank() int { return slices.Index(rolloutOrder, s) }

// DefaultProgressDeadline is how long a release may take to become ready
// when its service sets no deadline of its own.
const DefaultProgressDeadline = 10 * time.Minute

// MaxDetail bounds the detail an agent reports about unready pods.
const MaxDetail = 1000

// NewDeployment returns the empty state of a deployment stream.
func NewDeployment() *DeploymentAggregate { return &DeploymentAggregate{} }

// Apply folds an event into the state.
func (d *DeploymentAggregate) Apply(e Event) {
	switch e := e.(type) {
	case DeploymentDelivering:
		d.ID, d.Exists = e.DeploymentID, true
		d.ProjectID, d.EnvironmentID, d.ServiceID, d.ReleaseID, d.ClusterID = e.ProjectID, e.EnvironmentID, e.ServiceID, e.ReleaseID, e.ClusterID
		d.Revision, d.Stage = e.Revision, StatusDelivering
		d.ProgressDeadline = time.Duration(e.ProgressDeadlineSeconds) * time.Second
		d.LastProgress = e.At
	case DeploymentStageReached:
		if d.StartedAt.IsZero() {
			d.StartedAt = e.At
		}
		d.Stage, d.Ready, d.Desired, d.Detail = e.Stage, e.Ready, e.Desired, e.Detail
		d.LastProgress = e.At
	case DeploymentSucceeded:
		d.Stage, d.Stalled = StatusSucceeded, false
	case DeploymentFailed:
		d.Exists, d.ID = true, e.DeploymentID
		d.Stage, d.Stalled = StatusFailed, false
	case DeploymentSuperseded:
		d.Exists, d.ID = true, e.DeploymentID
		d.Stage, d.Stalled = StatusSuperseded, false
	case DeploymentStalled:
		d.Stalled = true
	case DeploymentStallCleared:
		d.Stalled = false
	}
}

// DeploymentCommand is a command of the deployment aggregate.
type DeploymentCommand interface{ deploymentCommand() }

// DeliverDeployment opens a deployment's stream when the desired state that
// carries it has been compiled. Delivering it again changes nothing.
type DeliverDeployment struct {
	DeploymentID, ProjectID, EnvironmentID, ServiceID, ReleaseID, ClusterID string
	Revision                                                                int
	ProgressDeadline                                                        time.Duration
	// HeldReason is set when the revision holds the service: the release
	// cannot roll out, so the deployment fails at once.
	HeldReason string
}

// ReportStage is an agent's report of where the rollout stands in its cluster.
type ReportStage struct {
	// ClusterID is the reporting agent's cluster: only that cluster's agent
	// reports on the deployment.
	ClusterID string
	Stage     DeploymentStatus
	Ready     int
	Desired   int
	Detail    string
}

// ExpireProgressDeadline fails a deployment that is still before its switch
// when its progress deadline (counted from the start of its pods) passed; the
// reason says what the pods last reported.
type ExpireProgressDeadline struct{}

// SupersedeDeployment ends a deployment that a newer one of the same service
// and environment replaced.
type SupersedeDeployment struct{ By string }

// CheckStall flags a deployment that made no progress for StallTimeout.
type CheckStall struct{ StallTimeout time.Duration }

func (DeliverDeployment) deploymentCommand()      {}
func (ReportStage) deploymentCommand()            {}
func (ExpireProgressDeadline) deploymentCommand() {}
func (SupersedeDeployment) deploymentCommand()    {}
func (CheckStall) deploymentCommand()             {}

// Decide decides a deployment command for the deployment with id id.
func (d *DeploymentAggregate) Decide(id string, cmd DeploymentCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("deployment", id); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case DeliverDeployment:
		if d.Exists {
			return Decision{}, nil
		}
		for _, x := range []struct{ kind, id string }{{"project", c.ProjectID}, {"environment", c.EnvironmentID},
			{"service", c.ServiceID}, {"release", c.ReleaseID}, {"cluster", c.ClusterID}} {
			if err := ValidateID(x.kind, x.id); err != nil {
				return Decision{}, err
			}
		}
		deadline := c.ProgressDeadline
		if deadline <= 0 {
			deadline = DefaultProgressDeadline
		}
		dec := decided(DeploymentDelivering{DeploymentID: id, ProjectID: c.ProjectID, EnvironmentID: c.EnvironmentID,
			ServiceID: c.ServiceID, ReleaseID: c.ReleaseID, ClusterID: c.ClusterID, Revision: c.Revision,
			ProgressDeadlineSeconds: int(deadline / time.Second), At: m.Now})
		if c.HeldReason != "" {
			dec.Events = append(dec.Events, DeploymentFailed{DeploymentID: id, Reason: "the service is held: " + c.HeldReason})
		}
		return dec, nil
	case ReportStage:
		return d.report(c, m)
	case ExpireProgressDeadline:
		if !d.Exists || d.Stage.Terminal() || d.Stage.rank() >= StatusSwitching.rank() {
			return Decision{}, nil
		}
		if d.StartedAt.IsZero() || m.Now.Before(d.StartedAt.Add(d.ProgressDeadline)) {
			return Decision{}, nil
		}
		reason := fmt.Sprintf("the release was not ready within its progress deadline of %s (%d/%d pods ready)", d.ProgressDeadline, d.Ready, d.Desired)
		if d.Detail != "" {
			reason += ": " + d.Detail
		}
		return decided(DeploymentFailed{DeploymentID: id, Reason: reason}), nil
	case SupersedeDeployment:
		if d.Stage.Terminal() {
			return Decision{}, nil
		}
		if err := ValidateID("deployment", c.By); err != nil {
			return Decision{}, err
		}
		return decided(DeploymentSuperseded{DeploymentID: id, By: c.By}), nil
	case CheckStall:
		if !d.Exists || d.Stage.Terminal() || d.Stalled || c.StallTimeout <= 0 {
			return Decision{}, nil
		}
		if m.Now.Sub(d.LastProgress) < c.StallTimeout {
			return Decision{}, nil
		}
		return decided(DeploymentStalled{DeploymentID: id, Since: d.LastProgress, Stage: d.Stage}), nil
	}
	return Decision{}, invalidf("command %T is not a deployment command", cmd)
}

func (d *DeploymentAggregate) report(c ReportStage, m Meta) (Decision, error) {
	if !d.Exists {
		return Decision{}, notFoundf("deployment")
	}
	if c.ClusterID != d.ClusterID {
		return Decision{}, fmt.Errorf("%w: the deployment runs on another cluster", ErrForbidden)
	}
	if c.Stage.rank() < StatusStarting.rank() {
		return Decision{}, invalidf("stage %q is not a stage an agent reports", c.Stage)
	}
	if c.Ready < 0 || c.Desired < 0 || c.Ready > 100000 || c.Desired > 100000 {
		return Decision{}, invalidf("pod counts %d/%d are out of range", c.Ready, c.Desired)
	}
	if err := ValidateText("detail", c.Detail, MaxDetail); err != nil {
		return Decision{}, err
	}
	// A verdict is final, and stages only move forward: a late or repeated
	// report changes nothing.
	if d.Stage.Terminal() || c.Stage.rank() < d.Stage.rank() {
		return Decision{}, nil
	}
	if c.Stage == d.Stage && c.Ready == d.Ready && c.Desired == d.Desired && c.Detail == d.Detail {
		return Decision{}, nil
	}
	var dec Decision
	if d.Stalled {
		dec.Events = append(dec.Events, DeploymentStallCleared{DeploymentID: d.ID})
	}
	if c.Stage == StatusSucceeded {
		dec.Events = append(dec.Events, DeploymentSucceeded{DeploymentID: d.ID})
		return dec, nil
	}
	dec.Events = append(dec.Events, DeploymentStageReached{DeploymentID: d.ID, Stage: c.Stage, Ready: c.Ready, Desired: c.Desired, Detail: c.Detail, At: m.Now})
	return dec, nil
}
