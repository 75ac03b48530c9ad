package domain

// DeleteServicePayload is the deletion of a service that runs in the
// protected environment EnvironmentID, waiting in its change set (kind
// deleteService). Version 1 is the JSON DeleteServiceChange had when
// change-set events held it.
type DeleteServicePayload struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
}

func deleteServicePayload(c DeleteServiceChange) DeleteServicePayload {
	return DeleteServicePayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID}
}

// command is the command to decide.
func (p DeleteServicePayload) command() DeleteService { return DeleteService{ServiceID: p.ServiceID} }

// Kind implements ChangeCommand.
func (DeleteServicePayload) Kind() string { return "deleteService" }

func (p DeleteServicePayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p DeleteServicePayload) Describe() string { return "delete service " + p.ServiceID }

// View implements ChangeCommand.
func (p DeleteServicePayload) View() Change {
	return Change{DeleteService: &DeleteServiceChange{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID}}
}

func (p DeleteServicePayload) apply(w *pending, _ *Environment, _ Meta) error {
	return w.merge(w.p.decideDeleteService(p.command().ServiceID))
}
