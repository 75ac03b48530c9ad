package domain

// RemoveDomainPayload is a RemoveDomain waiting in a change set (kind
// removeDomain). Version 1 is the JSON RemoveDomain had when change-set
// events held commands.
type RemoveDomainPayload struct {
	EnvironmentID string `json:"environmentId"`
	Host          string `json:"host"`
}

func removeDomainPayload(c RemoveDomain) RemoveDomainPayload {
	return RemoveDomainPayload{EnvironmentID: c.EnvironmentID, Host: c.Host}
}

// command is the command to decide.
func (p RemoveDomainPayload) command() RemoveDomain {
	return RemoveDomain{EnvironmentID: p.EnvironmentID, Host: p.Host}
}

// Kind implements ChangeCommand.
func (RemoveDomainPayload) Kind() string { return "removeDomain" }

func (p RemoveDomainPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p RemoveDomainPayload) Describe() string { return "remove domain " + p.Host }

// View implements ChangeCommand.
func (p RemoveDomainPayload) View() Change {
	c := p.command()
	return Change{RemoveDomain: &c}
}

func (p RemoveDomainPayload) apply(w *pending, env *Environment, _ Meta) error {
	r := p.command()
	route, ok := w.p.Domains[r.Host]
	if !ok || route.EnvironmentID != env.ID {
		return notFoundf("domain %s", r.Host)
	}
	w.emit(DomainRemoved{EnvironmentID: env.ID, ServiceID: route.ServiceID, Host: r.Host})
	w.d.Releases = append(w.d.Releases, NameClaim{domainHostScope(), r.Host})
	return nil
}
