package domain

// AddDomainPayload is an AddDomain waiting in a change set (kind addDomain).
// Version 1 is the JSON AddDomain had when change-set events held commands.
type AddDomainPayload struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Host          string `json:"host"`
}

func addDomainPayload(c AddDomain) AddDomainPayload {
	return AddDomainPayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, Host: c.Host}
}

// command is the command to decide.
func (p AddDomainPayload) command() AddDomain {
	return AddDomain{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, Host: p.Host}
}

// Kind implements ChangeCommand.
func (AddDomainPayload) Kind() string { return "addDomain" }

func (p AddDomainPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p AddDomainPayload) Describe() string { return "add domain " + p.Host }

// View implements ChangeCommand.
func (p AddDomainPayload) View() Change {
	c := p.command()
	return Change{AddDomain: &c}
}

func (p AddDomainPayload) apply(w *pending, env *Environment, _ Meta) error {
	a := p.command()
	if _, err := w.p.service(a.ServiceID); err != nil {
		return err
	}
	if err := ValidateHostname(a.Host); err != nil {
		return err
	}
	if _, ok := w.p.Domains[a.Host]; ok {
		return conflictf("domain %s is already routed in this project", a.Host)
	}
	w.emit(DomainAdded{EnvironmentID: env.ID, ServiceID: a.ServiceID, Host: a.Host})
	w.d.Claims = append(w.d.Claims, NameClaim{domainHostScope(), a.Host})
	return nil
}
