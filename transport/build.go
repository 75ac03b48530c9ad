package transport

import "time"

// Builds from Git. The control plane sends the leader of a cluster the whole
// set of builds it wants running there (TypeBuilds), again whenever that set
// changes and after every connect, like a desired state: the agent starts a
// Job in nebula-build for each build that has none and stops (deletes) the
// Job of every build that is no longer in the set (cancelled, superseded,
// timed out). It reports what becomes of each (TypeBuildReport) and streams
// the build pod's output (TypeBuildLogs).
const (
	// TypeBuilds (control plane -> agent): payload Builds.
	TypeBuilds = "builds"
	// TypeBuildReport (agent -> control plane): payload BuildReport.
	TypeBuildReport = "build_report"
	// TypeBuildLogs (agent -> control plane): payload BuildLogs.
	TypeBuildLogs = "build_logs"
)

// Builds is every build the control plane wants running in the cluster.
type Builds struct {
	Builds []BuildSpec `json:"builds"`
}

// BuildSpec is one build: clone Repository at Commit (or the head of Branch
// when Commit is empty), build Dockerfile in Context, push the image to the
// cluster's registry as Repository path Image.
type BuildSpec struct {
	ID string `json:"id"`
	// Service names the service, for labels and logs.
	Service    string `json:"service"`
	Repository string `json:"repository"`
	Branch     string `json:"branch"`
	Commit     string `json:"commit,omitempty"`
	Dockerfile string `json:"dockerfile"`
	Context    string `json:"context"`
	// Image is the path of the image in the cluster's registry
	// ("acme/shop/api"); the agent puts its registry's host before it.
	Image string `json:"image"`
	// Credential reads a private repository; opened by the control plane
	// for this delivery only (the link is TLS), never stored by the agent
	// outside the build's own Secret.
	Credential     *GitCredential `json:"credential,omitempty"`
	TimeoutSeconds int            `json:"timeoutSeconds"`
}

// GitCredential is a read credential of a repository: an HTTPS token (with
// an optional user name) or an SSH deploy key.
type GitCredential struct {
	Username string `json:"username,omitempty"`
	Token    string `json:"token,omitempty"`
	SSHKey   string `json:"sshKey,omitempty"`
	// KnownHosts are the forge's SSH host keys (known_hosts lines): with
	// them the clone refuses any other host key; without, it accepts the
	// key on first contact.
	KnownHosts string `json:"knownHosts,omitempty"`
}

// States of a build as the agent reports them (BuildReport.State).
const (
	BuildRunning   = "running"
	BuildSucceeded = "succeeded"
	BuildFailed    = "failed"
)

// BuildReport says what became of a build in the cluster.
type BuildReport struct {
	BuildID string `json:"buildId"`
	State   string `json:"state"`
	// Commit is the commit built (the branch's head when the spec named
	// none), once known.
	Commit string `json:"commit,omitempty"`
	// Image is the pushed image as the cluster's nodes pull it, without
	// the digest ("localhost:30500/acme/shop/api"); Digest its manifest's.
	Image  string `json:"image,omitempty"`
	Digest string `json:"digest,omitempty"`
	// ExitCode is the failing step's exit code (a RUN's), Reason a line
	// that says what failed, LogTail the build's last lines.
	ExitCode int       `json:"exitCode,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	LogTail  []string  `json:"logTail,omitempty"`
	Time     time.Time `json:"time"`
}

// BuildLogs is a batch of a build pod's output.
type BuildLogs struct {
	BuildID   string    `json:"buildId"`
	Container string    `json:"container"`
	Lines     []LogLine `json:"lines"`
}

// MaxBuildLogTail bounds the lines of a failed build's tail.
const MaxBuildLogTail = 50

// Validate checks a build report.
func (r BuildReport) Validate() error {
	var c fieldCheck
	c.text("buildId", r.BuildID, maxShort)
	c.text("state", r.State, maxShort)
	c.text("commit", r.Commit, maxShort)
	c.text("image", r.Image, maxName*2)
	c.text("digest", r.Digest, maxShort)
	c.free("reason", r.Reason, maxMessage)
	c.count("logTail", len(r.LogTail), MaxBuildLogTail)
	for _, l := range r.LogTail {
		c.free("logTail", l, maxLogLine)
	}
	c.nonNegative("exitCode", r.ExitCode)
	return c.result(TypeBuildReport)
}

// Validate checks a batch of build output.
func (l BuildLogs) Validate() error {
	var c fieldCheck
	c.text("buildId", l.BuildID, maxShort)
	c.text("container", l.Container, maxName)
	c.count("lines", len(l.Lines), maxLogLines)
	for _, ln := range l.Lines {
		c.text("lines.stream", ln.Stream, maxShort)
		c.free("lines.text", ln.Text, maxLogLine)
	}
	return c.result(TypeBuildLogs)
}
