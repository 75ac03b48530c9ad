package api

import (
	"time"
)

// DeployRequest deploys an image (a tag is resolved to its digest) or, without
// one, the service's image again.
type DeployRequest struct {
	Image string `json:"image,omitempty"`
	// Commit builds that commit of a Git service (default: the tracked
	// branch's head).
	Commit string `json:"commit,omitempty" input:"max=64"`
}

// RollbackRequest deploys an earlier release again.
type RollbackRequest struct {
	Release int `json:"release"`
}

// DeployResponse is the deployment started, or the change set that waits for
// approval in a protected environment.
type DeployResponse struct {
	Deployment *Deployment `json:"deployment,omitempty"`
	Release    *Release    `json:"release,omitempty"`
	ChangeSet  *ChangeSet  `json:"changeSet,omitempty"`
	// Build is the build a Git service's deploy waits for (the deployment
	// starts when it succeeds), or the one whose image it deploys.
	Build *Build `json:"build,omitempty"`
}

// DeploymentView is a deployment with what holds it up: "delivery" while its
// cluster is Disconnected and its revision is not applied yet (the
// deployment is still requested or delivering).
type DeploymentView struct {
	Deployment
	Blockers []string `json:"blockers"`
}

// DeploymentDetail is a deployment with every stage of its rollout, in order.
type DeploymentDetail struct {
	DeploymentView
	Stages []DeploymentStage `json:"stages"`
}

// TargetView is a service in an environment: the service, its current
// release and latest deployment there, and whether its automatic deploys are
// paused (a rollback pauses them until someone resumes them).
type TargetView struct {
	Service          Service         `json:"service"`
	EnvironmentID    string          `json:"environmentId"`
	Environment      string          `json:"environment"`
	CurrentRelease   *Release        `json:"currentRelease,omitempty"`
	LatestDeployment *DeploymentView `json:"latestDeployment,omitempty"`
	DeploysPaused    *DeployPause    `json:"deploysPaused,omitempty"`
}

// DeploymentStage is one step of a deployment's rollout: a stage its
// cluster's agent reported (with the new release's pods ready and desired),
// or the control plane's verdict (succeeded, failed, superseded). Seq is the
// version of the deployment's stream: 1 is delivering, and each later stage
// has a greater one, so it is also where a follower resumes.
type DeploymentStage struct {
	Seq     int       `json:"seq"`
	Stage   string    `json:"stage"`
	At      time.Time `json:"at"`
	Ready   int       `json:"ready"`
	Desired int       `json:"desired"`
	// Detail says what holds unready pods up; on a failed stage it is the
	// reason.
	Detail string `json:"detail,omitempty"`
	// Actor is who recorded the stage: "agent:<server>" or "system:<job>".
	Actor string `json:"actor"`
}

// Terminal reports whether the stage ends the deployment.
func (s DeploymentStage) Terminal() bool { return terminal(s.Stage) }

// DeployPause says that automatic deploys of a service in an environment are
// paused (a rollback pauses them) until someone resumes them.
type DeployPause struct {
	Reason   string    `json:"reason"`
	PausedBy string    `json:"pausedBy"`
	PausedAt time.Time `json:"pausedAt"`
	// Waiting is the automatic deploy (a build's image) that waits for
	// the deploys to be resumed, which deploys it.
	Waiting *WaitingDeploy `json:"waiting,omitempty"`
}

// WaitingDeploy is an automatic deploy that waits.
type WaitingDeploy struct {
	Image   string `json:"image"`
	BuildID string `json:"buildId,omitempty"`
}

// ChangeDiff is what one change of a change set changes. Old is the value
// the environment has now, which the change replaces: it is given only while
// the change set is open (a decided one changed things since) and is absent
// when there is none (a variable that is not set yet). New is the value
// after the change; absent when the change removes something. A secret's
// values are Masked.
type ChangeDiff struct {
	// Kind is set-variable, unset-variable, add-domain, remove-domain,
	// scale, deploy or rollback.
	Kind string `json:"kind"`
	// Service is the service's name; "" for an environment-wide variable.
	Service string `json:"service,omitempty"`
	// Name is the variable's name, the host name, or the process scaled.
	Name   string  `json:"name,omitempty"`
	Secret bool    `json:"secret,omitempty"`
	Old    *string `json:"old,omitempty"`
	New    *string `json:"new,omitempty"`
	// Release is the release number a rollback goes back to.
	Release int `json:"release,omitempty"`
	// Summary says it all in one line, for people.
	Summary string `json:"summary"`
}

// BlockerDelivery holds up a deployment whose cluster is Disconnected.
const BlockerDelivery = "delivery"

// Kinds of ChangeDiff.
const (
	DiffSetVariable   = "set-variable"
	DiffUnsetVariable = "unset-variable"
	DiffAddDomain     = "add-domain"
	DiffRemoveDomain  = "remove-domain"
	DiffScale         = "scale"
	DiffDeploy        = "deploy"
	DiffRollback      = "rollback"
)
