package domain

import (
	"fmt"
	"slices"
	"time"
)

// Build is one build of a Git service's commit on one cluster: a stream of
// its own (build-<id>), so that agents' reports and the scheduler never
// contend with people's commands on the project stream. Its id derives from
// (service, commit, cluster), so a second push of the same commit finds the
// same build; a build that failed, was cancelled or timed out is queued again
// as its next attempt.
type Build struct {
	ID         string
	Exists     bool
	ProjectID  string
	ServiceID  string
	ClusterID  string
	Repository string
	Branch     string
	Commit     string
	Dockerfile string
	Context    string
	// Environments are where a success deploys; Automatic marks a build a
	// push asked for (its deploys are automatic ones, which a rollback
	// pauses).
	Environments   []string
	Automatic      bool
	Attempt        int
	TimeoutSeconds int
	Status         BuildStatus
	StartedAt      time.Time
	Image, Digest  string
}

// BuildStatus is where a build is.
type BuildStatus string

// Build statuses. The last four end a build.
const (
	BuildQueued    BuildStatus = "queued"
	BuildRunning   BuildStatus = "running"
	BuildSucceeded BuildStatus = "succeeded"
	BuildFailed    BuildStatus = "failed"
	BuildCancelled BuildStatus = "cancelled"
	BuildTimedOut  BuildStatus = "timed_out"
)

// Terminal reports whether a build in status s is over.
func (s BuildStatus) Terminal() bool {
	return s == BuildSucceeded || s == BuildFailed || s == BuildCancelled || s == BuildTimedOut
}

// Defaults of builds.
const (
	DefaultBuildTimeout = 30 * time.Minute
	MaxBuildTimeout     = 6 * time.Hour
	// MaxBuildEnvironments bounds the environments one build deploys to.
	MaxBuildEnvironments = 100
)

// BuildID is the id of the build of a service's commit on a cluster.
func BuildID(serviceID, commit, clusterID string) string {
	return DeriveID("build", serviceID, commit, clusterID)
}

// BuildStream names a build's stream.
func BuildStream(id string) string { return "build-" + id }

// NewBuild returns the empty state of a build stream.
func NewBuild() *Build { return &Build{} }

// Apply folds an event into the state.
func (b *Build) Apply(e Event) {
	switch e := e.(type) {
	case BuildQueuedEvent:
		*b = Build{ID: e.BuildID, Exists: true, ProjectID: e.ProjectID, ServiceID: e.ServiceID, ClusterID: e.ClusterID,
			Repository: e.Repository, Branch: e.Branch, Commit: e.Commit, Dockerfile: e.Dockerfile, Context: e.Context,
			Environments: slices.Clone(e.Environments), Automatic: e.Automatic, Attempt: e.Attempt,
			TimeoutSeconds: e.TimeoutSeconds, Status: BuildQueued}
	case BuildTargetsAdded:
		b.Environments, b.Automatic = slices.Clone(e.Environments), e.Automatic
	case BuildStarted:
		b.Status, b.StartedAt = BuildRunning, e.At
	case BuildCommitResolved:
		b.Commit = e.Commit
	case BuildSucceededEvent:
		b.Status, b.Image, b.Digest = BuildSucceeded, e.Image, e.Digest
		if e.Commit != "" {
			b.Commit = e.Commit
		}
	case BuildFailedEvent:
		b.Status = BuildFailed
	case BuildCancelledEvent:
		b.Status = BuildCancelled
	case BuildTimedOutEvent:
		b.Status = BuildTimedOut
	}
}

// BuildCommand is a command of the build aggregate.
type BuildCommand interface{ buildCommand() }

// QueueBuild asks for a build. Queueing a build that is queued or running
// adds the environments it deploys to; a build that succeeded is not built
// again (its caller deploys its image); one that failed, was cancelled or
// timed out is queued again as its next attempt.
type QueueBuild struct {
	ProjectID, ServiceID, ClusterID string
	Repository, Branch, Commit      string
	Dockerfile, Context             string
	Environments                    []string
	Automatic                       bool
	// Trigger says who asked: "push" (with the delivery) or "deploy".
	Trigger, DeliveryID string
	Timeout             time.Duration
}

// StartBuild admits a queued build to its cluster (the scheduler's FIFO
// under the cluster's concurrency limit): the agent is asked to run it.
type StartBuild struct{}

// ReportBuild is the cluster's agent's report of a build.
type ReportBuild struct {
	ClusterID string
	State     string // running, succeeded, failed (transport.Build*)
	Commit    string
	Image     string
	Digest    string
	ExitCode  int
	Reason    string
	LogTail   []string
}

// CancelBuild ends a build that has not finished: a person's cancel, or a
// newer push to the same branch (By names the newer build).
type CancelBuild struct{ Reason, By string }

// TimeOutBuild ends a running build that ran past its timeout.
type TimeOutBuild struct{}

func (QueueBuild) buildCommand()   {}
func (StartBuild) buildCommand()   {}
func (ReportBuild) buildCommand()  {}
func (CancelBuild) buildCommand()  {}
func (TimeOutBuild) buildCommand() {}

// Reported build states (transport's, which domain cannot import).
const (
	reportRunning   = "running"
	reportSucceeded = "succeeded"
	reportFailed    = "failed"
)

// Decide decides a build command for the build with id id.
func (b *Build) Decide(id string, cmd BuildCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("build", id); err != nil {
		return Decision{}, err
	}
	switch c := cmd.(type) {
	case QueueBuild:
		return b.queue(id, c)
	case StartBuild:
		if !b.Exists {
			return Decision{}, notFoundf("build %s", id)
		}
		if b.Status != BuildQueued {
			return Decision{}, nil
		}
		return decided(BuildStarted{BuildID: id, At: m.Now}), nil
	case ReportBuild:
		return b.report(id, c)
	case CancelBuild:
		if !b.Exists {
			return Decision{}, notFoundf("build %s", id)
		}
		if b.Status.Terminal() {
			if c.By != "" {
				return Decision{}, nil
			}
			return Decision{}, conflictf("build %s is over (%s)", id, b.Status)
		}
		if err := ValidateText("reason", c.Reason, 1000); err != nil {
			return Decision{}, err
		}
		if c.By != "" {
			if err := ValidateID("build", c.By); err != nil {
				return Decision{}, err
			}
		}
		return decided(BuildCancelledEvent{BuildID: id, Reason: c.Reason, By: c.By, WasRunning: b.Status == BuildRunning}), nil
	case TimeOutBuild:
		if !b.Exists || b.Status != BuildRunning {
			return Decision{}, nil
		}
		limit := time.Duration(b.TimeoutSeconds) * time.Second
		if m.Now.Before(b.StartedAt.Add(limit)) {
			return Decision{}, nil
		}
		return decided(BuildTimedOutEvent{BuildID: id, TimeoutSeconds: b.TimeoutSeconds}), nil
	}
	return Decision{}, invalidf("command %T is not a build command", cmd)
}

func (b *Build) queue(id string, c QueueBuild) (Decision, error) {
	for _, x := range []struct{ kind, id string }{{"project", c.ProjectID}, {"service", c.ServiceID}, {"cluster", c.ClusterID}} {
		if err := ValidateID(x.kind, x.id); err != nil {
			return Decision{}, err
		}
	}
	if err := ValidateText("repository", c.Repository, 2048); err != nil {
		return Decision{}, err
	}
	if err := ValidateBranch(c.Branch); err != nil {
		return Decision{}, err
	}
	if c.Commit != "" {
		if err := ValidateCommit(c.Commit); err != nil {
			return Decision{}, err
		}
	}
	if err := validateRepoPath("Dockerfile", c.Dockerfile); err != nil {
		return Decision{}, err
	}
	if err := validateRepoPath("build context", c.Context); err != nil {
		return Decision{}, err
	}
	if len(c.Environments) > MaxBuildEnvironments {
		return Decision{}, invalidf("a build deploys to at most %d environments", MaxBuildEnvironments)
	}
	for _, env := range c.Environments {
		if err := ValidateID("environment", env); err != nil {
			return Decision{}, err
		}
	}
	if c.Trigger != "push" && c.Trigger != "deploy" {
		return Decision{}, invalidf("a build is triggered by a push or a deploy, not %q", c.Trigger)
	}
	if err := ValidateText("delivery", c.DeliveryID, 200); err != nil {
		return Decision{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultBuildTimeout
	}
	if timeout > MaxBuildTimeout {
		return Decision{}, invalidf("a build's timeout is at most %s", MaxBuildTimeout)
	}
	envs := slices.Clone(c.Environments)
	slices.Sort(envs)
	envs = slices.Compact(envs)
	if b.Exists && !b.Status.Terminal() {
		var more []string
		for _, env := range envs {
			if !slices.Contains(b.Environments, env) {
				more = append(more, env)
			}
		}
		// A deploy asked for in person makes the build's deploys ones in
		// person: a paused service still deploys what someone asked for.
		automatic := b.Automatic && c.Automatic
		if len(more) == 0 && automatic == b.Automatic {
			return Decision{}, nil
		}
		all := append(slices.Clone(b.Environments), more...)
		slices.Sort(all)
		return decided(BuildTargetsAdded{BuildID: id, Environments: all, Automatic: automatic}), nil
	}
	if b.Exists && b.Status == BuildSucceeded {
		return Decision{}, nil
	}
	if envs == nil {
		envs = []string{}
	}
	return decided(BuildQueuedEvent{BuildID: id, ProjectID: c.ProjectID, ServiceID: c.ServiceID, ClusterID: c.ClusterID,
		Repository: c.Repository, Branch: c.Branch, Commit: c.Commit, Dockerfile: c.Dockerfile, Context: c.Context,
		Environments: envs, Automatic: c.Automatic, Trigger: c.Trigger, DeliveryID: c.DeliveryID, Attempt: b.Attempt + 1,
		TimeoutSeconds: int(timeout / time.Second)}), nil
}

func (b *Build) report(id string, c ReportBuild) (Decision, error) {
	if !b.Exists {
		return Decision{}, notFoundf("build %s", id)
	}
	if c.ClusterID != b.ClusterID {
		return Decision{}, fmt.Errorf("%w: the build runs on another cluster", ErrForbidden)
	}
	if c.Commit != "" {
		if err := ValidateCommit(c.Commit); err != nil {
			return Decision{}, err
		}
		if b.Commit != "" && c.Commit != b.Commit {
			return Decision{}, invalidf("the build of commit %s reported commit %s", b.Commit, c.Commit)
		}
	}
	if err := ValidateText("reason", c.Reason, MaxDetail); err != nil {
		return Decision{}, err
	}
	// A verdict is final: a late or repeated report changes nothing, and
	// so does one for a build the scheduler has not started (a report of
	// an earlier attempt's Job).
	if b.Status != BuildRunning {
		return Decision{}, nil
	}
	var dec Decision
	if c.Commit != "" && b.Commit == "" {
		dec.Events = append(dec.Events, BuildCommitResolved{BuildID: id, Commit: c.Commit})
	}
	switch c.State {
	case reportRunning:
	case reportSucceeded:
		if err := ValidateText("image", c.Image, 1000); err != nil {
			return Decision{}, err
		}
		if c.Image == "" || !validDigest(c.Digest) {
			return Decision{}, invalidf("a succeeded build reports its image and a sha256 digest")
		}
		dec.Events = append(dec.Events, BuildSucceededEvent{BuildID: id, Commit: c.Commit, Image: c.Image, Digest: c.Digest})
	case reportFailed:
		tail := c.LogTail
		if len(tail) > 50 {
			tail = tail[len(tail)-50:]
		}
		for _, l := range tail {
			if err := ValidateText("log line", l, 4096); err != nil {
				return Decision{}, err
			}
		}
		reason := c.Reason
		if reason == "" {
			reason = "the build failed"
		}
		if c.ExitCode < 0 || c.ExitCode > 255 {
			return Decision{}, invalidf("exit code %d is out of range", c.ExitCode)
		}
		dec.Events = append(dec.Events, BuildFailedEvent{BuildID: id, Reason: reason, ExitCode: c.ExitCode, LogTail: slices.Clone(tail)})
	default:
		return Decision{}, invalidf("build state %q is not one an agent reports", c.State)
	}
	return dec, nil
}

func validDigest(d string) bool {
	rest, ok := cutPrefix(d, "sha256:")
	if !ok || len(rest) != 64 {
		return false
	}
	for _, r := range rest {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return true
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) < len(p) || s[:len(p)] != p {
		return s, false
	}
	return s[len(p):], true
}

// Build events.

// BuildQueuedEvent records a build asked for (build.queue).
type BuildQueuedEvent struct {
	BuildID        string   `json:"buildId"`
	ProjectID      string   `json:"projectId"`
	ServiceID      string   `json:"serviceId"`
	ClusterID      string   `json:"clusterId"`
	Repository     string   `json:"repository"`
	Branch         string   `json:"branch"`
	Commit         string   `json:"commit,omitempty"`
	Dockerfile     string   `json:"dockerfile,omitempty"`
	Context        string   `json:"context,omitempty"`
	Environments   []string `json:"environments"`
	Automatic      bool     `json:"automatic,omitempty"`
	Trigger        string   `json:"trigger"`
	DeliveryID     string   `json:"deliveryId,omitempty"`
	Attempt        int      `json:"attempt"`
	TimeoutSeconds int      `json:"timeoutSeconds"`
}

// BuildTargetsAdded records more environments that a queued or running
// build deploys to when it succeeds: Environments is the whole list after.
type BuildTargetsAdded struct {
	BuildID      string   `json:"buildId"`
	Environments []string `json:"environments"`
	Automatic    bool     `json:"automatic,omitempty"`
}

// BuildStarted records that the scheduler admitted the build to its
// cluster (build.start).
type BuildStarted struct {
	BuildID string    `json:"buildId"`
	At      time.Time `json:"at"`
}

// BuildCommitResolved records the commit a build of a branch's head found.
type BuildCommitResolved struct {
	BuildID string `json:"buildId"`
	Commit  string `json:"commit"`
}

// BuildSucceededEvent records the pushed image (build.succeed).
type BuildSucceededEvent struct {
	BuildID string `json:"buildId"`
	Commit  string `json:"commit,omitempty"`
	Image   string `json:"image"`
	Digest  string `json:"digest"`
}

// BuildFailedEvent records a failed build with its reason, the failing
// step's exit code and the last lines of its log (build.fail).
type BuildFailedEvent struct {
	BuildID  string   `json:"buildId"`
	Reason   string   `json:"reason"`
	ExitCode int      `json:"exitCode,omitempty"`
	LogTail  []string `json:"logTail,omitempty"`
}

// BuildCancelledEvent records a cancelled build (build.cancel).
type BuildCancelledEvent struct {
	BuildID    string `json:"buildId"`
	Reason     string `json:"reason"`
	By         string `json:"by,omitempty"`
	WasRunning bool   `json:"wasRunning,omitempty"`
}

// BuildTimedOutEvent records a build stopped at its timeout (build.fail).
type BuildTimedOutEvent struct {
	BuildID        string `json:"buildId"`
	TimeoutSeconds int    `json:"timeoutSeconds"`
}

func (BuildQueuedEvent) EventType() string    { return "build.queued" }
func (BuildTargetsAdded) EventType() string   { return "build.targets.added" }
func (BuildStarted) EventType() string        { return "build.started" }
func (BuildCommitResolved) EventType() string { return "build.commit.resolved" }
func (BuildSucceededEvent) EventType() string { return "build.succeeded" }
func (BuildFailedEvent) EventType() string    { return "build.failed" }
func (BuildCancelledEvent) EventType() string { return "build.cancelled" }
func (BuildTimedOutEvent) EventType() string  { return "build.timed_out" }
