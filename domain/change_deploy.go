package domain

import "strings"

// DeployPayload is a Deploy waiting in a change set (kind deploy). Version 1
// is the JSON Deploy had when change-set events held commands.
type DeployPayload struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	ReleaseID     string `json:"releaseId"`
	DeploymentID  string `json:"deploymentId"`
	Image         string `json:"image"`
	Automatic     bool   `json:"automatic,omitempty"`
	BuildID       string `json:"buildId,omitempty"`
	ClusterID     string `json:"clusterId,omitempty"`
}

func deployPayload(c Deploy) DeployPayload {
	return DeployPayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, ReleaseID: c.ReleaseID, DeploymentID: c.DeploymentID,
		Image: c.Image, Automatic: c.Automatic, BuildID: c.BuildID, ClusterID: c.ClusterID}
}

// command is the command to decide.
func (p DeployPayload) command() Deploy {
	return Deploy{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, ReleaseID: p.ReleaseID, DeploymentID: p.DeploymentID,
		Image: p.Image, Automatic: p.Automatic, BuildID: p.BuildID, ClusterID: p.ClusterID}
}

// Kind implements ChangeCommand.
func (DeployPayload) Kind() string { return "deploy" }

func (p DeployPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p DeployPayload) Describe() string { return "deploy " + p.Image }

// View implements ChangeCommand.
func (p DeployPayload) View() Change {
	c := p.command()
	return Change{Deploy: &c}
}

func (p DeployPayload) apply(w *pending, env *Environment, _ Meta) error {
	d := p.command()
	svc, err := w.p.service(d.ServiceID)
	if err != nil {
		return err
	}
	if err := ValidateID("release", d.ReleaseID); err != nil {
		return err
	}
	if err := ValidateID("deployment", d.DeploymentID); err != nil {
		return err
	}
	if !strings.Contains(d.Image, "@sha256:") {
		return invalidf("image %q is not pinned to a digest", d.Image)
	}
	if err := ValidateText("image", d.Image, 1000); err != nil {
		return err
	}
	if w.p.Current[env.ID][svc.ID].DeploymentID == d.DeploymentID {
		return conflictf("deployment %s exists", d.DeploymentID)
	}
	if d.ClusterID != "" && d.ClusterID != env.ClusterID {
		return conflictf("environment %s moved to another cluster since the build: its image is in the registry of the cluster it was built on; deploy again to build there", env.Name)
	}
	if d.Automatic && w.p.Paused[env.ID][svc.ID] {
		// The deploy waits, visible, until someone resumes automatic
		// deploys (which deploys it) or deploys by hand.
		w.emit(DeployWaiting{EnvironmentID: env.ID, ServiceID: svc.ID, Image: d.Image, BuildID: d.BuildID, ClusterID: d.ClusterID})
		return nil
	}
	w.release(env.ID, svc, d.ReleaseID, d.DeploymentID, d.Image, "deploy")
	return nil
}
