package domain

// DeleteEnvironmentPayload is the deletion of a protected environment,
// waiting in its change set (kind deleteEnvironment). Version 1 is the JSON
// DeleteEnvironment had when change-set events held it: the command has no
// JSON names, so its field names are the keys.
type DeleteEnvironmentPayload struct {
	EnvironmentID string `json:"EnvironmentID"`
}

func deleteEnvironmentPayload(c DeleteEnvironment) DeleteEnvironmentPayload {
	return DeleteEnvironmentPayload{EnvironmentID: c.EnvironmentID}
}

// command is the command to decide.
func (p DeleteEnvironmentPayload) command() DeleteEnvironment {
	return DeleteEnvironment{EnvironmentID: p.EnvironmentID}
}

// Kind implements ChangeCommand.
func (DeleteEnvironmentPayload) Kind() string { return "deleteEnvironment" }

func (p DeleteEnvironmentPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (DeleteEnvironmentPayload) Describe() string { return "delete the environment" }

// View implements ChangeCommand.
func (p DeleteEnvironmentPayload) View() Change {
	c := p.command()
	return Change{DeleteEnvironment: &c}
}

func (p DeleteEnvironmentPayload) apply(w *pending, _ *Environment, _ Meta) error {
	return w.merge(w.p.decideDeleteEnvironment(p.command().EnvironmentID))
}
