package compiler

import "github.com/nebulactrl/nebulactrl/domain"

// Snapshot is everything the compiler needs to know about one environment,
// gathered by the caller from projections. The compiler reads nothing else,
// so the same snapshot always compiles to the same document.
type Snapshot struct {
	OrgID           string
	OrgName         string
	ProjectID       string
	ProjectName     string
	EnvironmentID   string
	EnvironmentName string
	ClusterID       string

	// Services is every service of the project, deleted ones included, so a
	// reference to a deleted service can say so instead of "does not exist".
	// Any order.
	Services []Service

	// Unreadable holds the ids of data keys whose sealed values cannot be
	// opened with the current master key (for example after a botched key
	// rotation). The caller finds out; the compiler never opens a secret, it
	// only holds the services that would ship one nobody can open.
	Unreadable map[string]bool
}

// Service is one service of the project as seen from this environment.
type Service struct {
	ID      string
	Name    string
	Deleted bool

	// Release is the current release of the service in this environment.
	// nil means it was never deployed here, and it is left out of the
	// document (references to its variables still resolve).
	Release *Release

	// Variables are the service's live variables in this environment, with
	// the environment-wide ones merged in by the caller (service-level wins).
	// They are used only to resolve references from other services (and from
	// the service itself): what the service itself runs with is frozen in
	// its Release.
	Variables []domain.Variable

	// Domains are the host names of the service in this environment.
	Domains []string
}

// Release is a release of a service: an image pinned by digest plus the
// configuration frozen when the release was made.
type Release struct {
	ID     string
	Number int
	// DeploymentID is the deployment that asked for the release to run.
	DeploymentID string
	// Image is an image reference pinned by digest.
	Image     string
	Processes []domain.Process
	// Variables are frozen at release time (environment-wide and service
	// variables merged). Their references are resolved at compile time, so a
	// release picks up a new database address without being re-released.
	Variables []domain.Variable
}
