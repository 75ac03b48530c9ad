package domain

// guarded returns the change set change that cmd becomes when it would alter
// a protected environment: deleting a service that runs there, deleting the
// environment or its project, turning its protection off or moving it to
// another cluster. Turning protection on needs no approval.
func (p *Project) guarded(cmd ProjectCommand) (Change, *Environment, bool) {
	switch c := cmd.(type) {
	case DeleteService:
		if s, ok := p.Services[c.ServiceID]; ok && !s.Deleted {
			for _, envID := range sortedKeys(p.Environments) {
				env := p.Environments[envID]
				if !env.Deleted && env.Protected && p.Current[envID][c.ServiceID].DeploymentID != "" {
					return Change{DeleteService: &DeleteServiceChange{EnvironmentID: envID, ServiceID: c.ServiceID}}, env, true
				}
			}
		}
	case DeleteEnvironment:
		if env, ok := p.Environments[c.EnvironmentID]; ok && !env.Deleted && env.Protected {
			return Change{DeleteEnvironment: &c}, env, true
		}
	case DeleteProject:
		for _, envID := range sortedKeys(p.Environments) {
			if env := p.Environments[envID]; !env.Deleted && env.Protected {
				return Change{DeleteProject: &DeleteProjectChange{EnvironmentID: envID}}, env, true
			}
		}
	case UpdateEnvironment:
		if env, ok := p.Environments[c.EnvironmentID]; ok && !env.Deleted && env.Protected && (!c.Protected || c.ClusterID != env.ClusterID) {
			return Change{UpdateEnvironment: &c}, env, true
		}
	}
	return Change{}, nil, false
}

func (p *Project) decideDeleteProject() Decision {
	releases := []NameClaim{{projectNameScope(p.OrgID), p.Name}}
	for _, host := range sortedKeys(p.Domains) {
		releases = append(releases, NameClaim{domainHostScope(), host})
	}
	return Decision{Events: []Event{ProjectDeleted{ProjectID: p.ID}}, Releases: releases}
}

func (p *Project) decideUpdateEnvironment(c UpdateEnvironment) (Decision, error) {
	env, err := p.environment(c.EnvironmentID)
	if err != nil {
		return Decision{}, err
	}
	if err := ValidateID("cluster", c.ClusterID); err != nil {
		return Decision{}, err
	}
	if env.ClusterID == c.ClusterID && env.Protected == c.Protected {
		return Decision{}, nil
	}
	return decided(EnvironmentUpdated{EnvironmentID: env.ID, ClusterID: c.ClusterID, Protected: c.Protected}), nil
}

func (p *Project) decideDeleteEnvironment(id string) (Decision, error) {
	env, err := p.environment(id)
	if err != nil {
		return Decision{}, err
	}
	d := p.removeDomains(func(r DomainRoute) bool { return r.EnvironmentID == env.ID })
	d.Events = append(d.Events, EnvironmentDeleted{EnvironmentID: env.ID})
	return d, nil
}

func (p *Project) decideDeleteService(id string) (Decision, error) {
	s, err := p.service(id)
	if err != nil {
		return Decision{}, err
	}
	d := p.removeDomains(func(r DomainRoute) bool { return r.ServiceID == s.ID })
	d.Events = append(d.Events, ServiceDeleted{ServiceID: s.ID})
	return d, nil
}

// removeDomains removes the domains that match, giving their names back.
func (p *Project) removeDomains(match func(DomainRoute) bool) Decision {
	var d Decision
	for _, host := range sortedKeys(p.Domains) {
		if r := p.Domains[host]; match(r) {
			d.Events = append(d.Events, DomainRemoved{EnvironmentID: r.EnvironmentID, ServiceID: r.ServiceID, Host: host})
			d.Releases = append(d.Releases, NameClaim{domainHostScope(), host})
		}
	}
	return d
}
