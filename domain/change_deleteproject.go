package domain

// DeleteProjectPayload is the deletion of a project with the protected
// environment EnvironmentID, waiting in that environment's change set (kind
// deleteProject). Version 1 is the JSON DeleteProjectChange had when
// change-set events held it.
type DeleteProjectPayload struct {
	EnvironmentID string `json:"environmentId"`
}

func deleteProjectPayload(c DeleteProjectChange) DeleteProjectPayload {
	return DeleteProjectPayload{EnvironmentID: c.EnvironmentID}
}

// command is the command to decide: the project's deletion has no fields.
func (DeleteProjectPayload) command() DeleteProject { return DeleteProject{} }

func (w *pending) decideDeleteProject(DeleteProject) error {
	return w.merge(w.p.decideDeleteProject(), nil)
}

// Kind implements ChangeCommand.
func (DeleteProjectPayload) Kind() string { return "deleteProject" }

func (p DeleteProjectPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (DeleteProjectPayload) Describe() string { return "delete the project" }

// View implements ChangeCommand.
func (p DeleteProjectPayload) View() Change {
	return Change{DeleteProject: &DeleteProjectChange{EnvironmentID: p.EnvironmentID}}
}

func (p DeleteProjectPayload) apply(w *pending, _ *Environment, _ Meta) error {
	return w.decideDeleteProject(p.command())
}
