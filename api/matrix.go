package api

// MatrixRow is a service of a project with a cell for each of the
// project's environments (in the order of the environments list).
type MatrixRow struct {
	Service Service      `json:"service"`
	Cells   []MatrixCell `json:"cells"`
}

// MatrixCell is a service in an environment: its current release, latest
// deployment (with its blockers), whether the environment's latest desired
// state holds it and why, and whether its automatic deploys are paused.
// The target view (GET .../environments/{env}/services/{service}) has the
// same facts and the whole release.
type MatrixCell struct {
	EnvironmentID    string          `json:"environmentId"`
	Environment      string          `json:"environment"`
	CurrentRelease   *ReleaseRef     `json:"currentRelease,omitempty"`
	LatestDeployment *DeploymentView `json:"latestDeployment,omitempty"`
	Held             bool            `json:"held"`
	HeldReason       string          `json:"heldReason,omitempty"`
	DeploysPaused    *DeployPause    `json:"deploysPaused,omitempty"`
}

// DeploymentInProgress is a deployment of an organisation that is not
// over, with where it runs and what holds it up.
type DeploymentInProgress struct {
	Deployment
	Project     string   `json:"project"`
	Environment string   `json:"environment"`
	Service     string   `json:"service"`
	ClusterID   string   `json:"clusterId"`
	Blockers    []string `json:"blockers"`
}

// ReleaseRef names a release: enough to show which one runs.
type ReleaseRef struct {
	ID     string `json:"id"`
	Number int    `json:"number"`
	Image  string `json:"image"`
}
