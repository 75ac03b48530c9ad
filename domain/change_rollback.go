package domain

import "fmt"

// RollbackPayload is a Rollback waiting in a change set (kind rollback).
// Version 1 is the JSON Rollback had when change-set events held commands.
type RollbackPayload struct {
	EnvironmentID string                 `json:"environmentId"`
	ServiceID     string                 `json:"serviceId"`
	ReleaseID     string                 `json:"releaseId"`
	DeploymentID  string                 `json:"deploymentId"`
	Release       RollbackReleasePayload `json:"release"`
}

// RollbackReleasePayload is the release a waiting rollback goes back to, as
// the release history kept it when the rollback was asked for.
type RollbackReleasePayload struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Number        int    `json:"number"`
	Image         string `json:"image"`
}

func rollbackPayload(c Rollback) RollbackPayload {
	r := c.Release
	return RollbackPayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, ReleaseID: c.ReleaseID, DeploymentID: c.DeploymentID,
		Release: RollbackReleasePayload{EnvironmentID: r.EnvironmentID, ServiceID: r.ServiceID, Number: r.Number, Image: r.Image}}
}

// command is the command to decide.
func (p RollbackPayload) command() Rollback {
	r := p.Release
	return Rollback{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, ReleaseID: p.ReleaseID, DeploymentID: p.DeploymentID,
		Release: ReleaseRef{EnvironmentID: r.EnvironmentID, ServiceID: r.ServiceID, Number: r.Number, Image: r.Image}}
}

// Kind implements ChangeCommand.
func (RollbackPayload) Kind() string { return "rollback" }

func (p RollbackPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p RollbackPayload) Describe() string {
	if p.Release.Number > 0 {
		return fmt.Sprintf("roll back to release %d", p.Release.Number)
	}
	return "roll back to release " + p.ReleaseID
}

// View implements ChangeCommand.
func (p RollbackPayload) View() Change {
	c := p.command()
	return Change{Rollback: &c}
}

func (p RollbackPayload) apply(w *pending, env *Environment, _ Meta) error {
	r := p.command()
	pr := w.p
	if _, err := pr.service(r.ServiceID); err != nil {
		return err
	}
	if err := ValidateID("deployment", r.DeploymentID); err != nil {
		return err
	}
	if err := ValidateID("release", r.ReleaseID); err != nil {
		return err
	}
	rel := r.Release
	if rel.EnvironmentID != env.ID || rel.ServiceID != r.ServiceID || rel.Number < 1 ||
		rel.Number > pr.ReleaseCount[env.ID][r.ServiceID] || rel.Image == "" {
		return notFoundf("release %s of this service in this environment", r.ReleaseID)
	}
	cur := pr.Current[env.ID][r.ServiceID]
	w.emit(DeploymentRequested{DeploymentID: r.DeploymentID, ReleaseID: r.ReleaseID, EnvironmentID: env.ID, ServiceID: r.ServiceID,
		Rollback: true, Image: rel.Image, Supersedes: cur.DeploymentID})
	if !pr.Paused[env.ID][r.ServiceID] {
		w.emit(DeploymentsPaused{EnvironmentID: env.ID, ServiceID: r.ServiceID, Reason: fmt.Sprintf("rolled back to release %d", rel.Number)})
	}
	return nil
}
