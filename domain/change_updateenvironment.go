package domain

import "fmt"

// UpdateEnvironmentPayload is a change of a protected environment's cluster
// or protection, waiting in its change set (kind updateEnvironment). Version
// 1 is the JSON UpdateEnvironment had when change-set events held it: the
// command has no JSON names, so its field names are the keys.
type UpdateEnvironmentPayload struct {
	EnvironmentID string `json:"EnvironmentID"`
	ClusterID     string `json:"ClusterID"`
	Protected     bool   `json:"Protected"`
}

func updateEnvironmentPayload(c UpdateEnvironment) UpdateEnvironmentPayload {
	return UpdateEnvironmentPayload{EnvironmentID: c.EnvironmentID, ClusterID: c.ClusterID, Protected: c.Protected}
}

// command is the command to decide.
func (p UpdateEnvironmentPayload) command() UpdateEnvironment {
	return UpdateEnvironment{EnvironmentID: p.EnvironmentID, ClusterID: p.ClusterID, Protected: p.Protected}
}

// Kind implements ChangeCommand.
func (UpdateEnvironmentPayload) Kind() string { return "updateEnvironment" }

func (p UpdateEnvironmentPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p UpdateEnvironmentPayload) Describe() string {
	return fmt.Sprintf("set protected %t, cluster %s", p.Protected, p.ClusterID)
}

// View implements ChangeCommand.
func (p UpdateEnvironmentPayload) View() Change {
	c := p.command()
	return Change{UpdateEnvironment: &c}
}

func (p UpdateEnvironmentPayload) apply(w *pending, _ *Environment, _ Meta) error {
	return w.merge(w.p.decideUpdateEnvironment(p.command()))
}
