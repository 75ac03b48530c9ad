package domain

import (
	"slices"
	"sort"
	"strings"
)

// Project is the aggregate of one project: its environments and services,
// their per-environment configuration, releases, deployments and change sets.
// One stream keeps the invariants that span them (a deleted service cannot be
// deployed, names are unique in the project) in one consistency boundary.
type Project struct {
	ID, OrgID, Name string
	Exists, Deleted bool
	Environments    map[string]*Environment
	Services        map[string]*Service
	// Variables: environment id -> service id ("" for environment-wide) -> name -> variable.
	Variables map[string]map[string]map[string]Variable
	// Domains: host -> where it routes.
	Domains map[string]DomainRoute
	// Replicas: environment id -> service id -> process -> replicas.
	Replicas map[string]map[string]map[string]int
	// Releases: environment id -> service id -> releases in number order.
	Releases    map[string]map[string][]ReleaseInfo
	Deployments map[string]*Deployment
	// Current: environment id -> service id -> deployment id of the latest request.
	Current    map[string]map[string]string
	ChangeSets map[string]*ChangeSet
}

// Environment is one environment of a project.
type Environment struct {
	ID, Name, ClusterID string
	Protected, Deleted  bool
}

// Service is one service of a project.
type Service struct {
	ID, Name  string
	Source    Source
	Processes []Process
	Deleted   bool
}

// DomainRoute is where a domain routes.
type DomainRoute struct{ EnvironmentID, ServiceID string }

// ReleaseInfo is what the aggregate keeps of a release.
type ReleaseInfo struct {
	ID     string
	Number int
	Image  string
}

// Deployment is a deployment's lifecycle state.
type Deployment struct {
	ID, ReleaseID, EnvironmentID, ServiceID string
	Status                                  DeploymentStatus
}

// DeploymentStatus is where a deployment is in its lifecycle.
type DeploymentStatus string

// Deployment statuses. Later rollout stages refine "delivering".
const (
	StatusRequested  DeploymentStatus = "requested"
	StatusDelivering DeploymentStatus = "delivering"
	StatusSucceeded  DeploymentStatus = "succeeded"
	StatusFailed     DeploymentStatus = "failed"
)

// ChangeSet is a set of changes to a protected environment.
type ChangeSet struct {
	ID, EnvironmentID, OpenedBy string
	Changes                     []Change
	Status                      string // open, approved, rejected
}

// NewProject returns the empty state of a project stream.
func NewProject() *Project {
	return &Project{
		Environments: map[string]*Environment{},
		Services:     map[string]*Service{},
		Variables:    map[string]map[string]map[string]Variable{},
		Domains:      map[string]DomainRoute{},
		Replicas:     map[string]map[string]map[string]int{},
		Releases:     map[string]map[string][]ReleaseInfo{},
		Deployments:  map[string]*Deployment{},
		Current:      map[string]map[string]string{},
		ChangeSets:   map[string]*ChangeSet{},
	}
}

func nested[K comparable, V any](m map[string]map[K]V, key string) map[K]V {
	inner, ok := m[key]
	if !ok {
		inner = map[K]V{}
		m[key] = inner
	}
	return inner
}

// Apply folds an event into the state.
func (p *Project) Apply(e Event) {
	switch e := e.(type) {
	case ProjectCreated:
		p.ID, p.OrgID, p.Name, p.Exists = e.ProjectID, e.OrgID, e.Name, true
	case ProjectDeleted:
		p.Deleted = true
	case EnvironmentCreated:
		p.Environments[e.EnvironmentID] = &Environment{ID: e.EnvironmentID, Name: e.Name, ClusterID: e.ClusterID, Protected: e.Protected}
	case EnvironmentUpdated:
		if env := p.Environments[e.EnvironmentID]; env != nil {
			env.ClusterID, env.Protected = e.ClusterID, e.Protected
		}
	case EnvironmentDeleted:
		if env := p.Environments[e.EnvironmentID]; env != nil {
			env.Deleted = true
		}
	case ServiceCreated:
		p.Services[e.ServiceID] = &Service{ID: e.ServiceID, Name: e.Name, Source: e.Source, Processes: e.Processes}
	case ServiceUpdated:
		if s := p.Services[e.ServiceID]; s != nil {
			s.Source, s.Processes = e.Source, e.Processes
		}
	case ServiceDeleted:
		if s := p.Services[e.ServiceID]; s != nil {
			s.Deleted = true
		}
	case VariablesSet:
		vars := nested(nested(p.Variables, e.EnvironmentID), e.ServiceID)
		for _, v := range e.Variables {
			vars[v.Name] = v
		}
	case VariablesUnset:
		for _, n := range e.Names {
			delete(p.Variables[e.EnvironmentID][e.ServiceID], n)
		}
	case DomainAdded:
		p.Domains[e.Host] = DomainRoute{EnvironmentID: e.EnvironmentID, ServiceID: e.ServiceID}
	case DomainRemoved:
		delete(p.Domains, e.Host)
	case ServiceScaled:
		nested(nested(p.Replicas, e.EnvironmentID), e.ServiceID)[e.Process] = e.Replicas
	case ReleaseCreated:
		rel := nested(p.Releases, e.EnvironmentID)
		rel[e.ServiceID] = append(rel[e.ServiceID], ReleaseInfo{ID: e.ReleaseID, Number: e.Number, Image: e.Image})
	case DeploymentRequested:
		p.Deployments[e.DeploymentID] = &Deployment{ID: e.DeploymentID, ReleaseID: e.ReleaseID, EnvironmentID: e.EnvironmentID, ServiceID: e.ServiceID, Status: StatusRequested}
		nested(p.Current, e.EnvironmentID)[e.ServiceID] = e.DeploymentID
	case DeploymentDelivering:
		p.setStatus(e.DeploymentID, StatusDelivering)
	case DeploymentSucceeded:
		p.setStatus(e.DeploymentID, StatusSucceeded)
	case DeploymentFailed:
		p.setStatus(e.DeploymentID, StatusFailed)
	case ChangeSetOpened:
		p.ChangeSets[e.ChangeSetID] = &ChangeSet{ID: e.ChangeSetID, EnvironmentID: e.EnvironmentID, OpenedBy: e.OpenedBy, Changes: e.Changes, Status: "open"}
	case ChangeSetApproved:
		if cs := p.ChangeSets[e.ChangeSetID]; cs != nil {
			cs.Status = "approved"
		}
	case ChangeSetRejected:
		if cs := p.ChangeSets[e.ChangeSetID]; cs != nil {
			cs.Status = "rejected"
		}
	}
}

func (p *Project) setStatus(id string, s DeploymentStatus) {
	if d := p.Deployments[id]; d != nil {
		d.Status = s
	}
}

// Commands of the project aggregate.

// CreateProject creates a project in an organisation.
type CreateProject struct{ ProjectID, OrgID, Name string }

// DeleteProject deletes a project; its name becomes free.
type DeleteProject struct{}

// CreateEnvironment adds an environment running on a cluster of the organisation.
type CreateEnvironment struct {
	EnvironmentID, Name, ClusterID string
	Protected                      bool
}

// UpdateEnvironment changes an environment's cluster or protection.
type UpdateEnvironment struct {
	EnvironmentID, ClusterID string
	Protected                bool
}

// DeleteEnvironment deletes an environment.
type DeleteEnvironment struct{ EnvironmentID string }

// CreateService adds a service to the project.
type CreateService struct {
	ServiceID, Name string
	Source          Source
	Processes       []Process
}

// UpdateService changes a service's source and processes; running releases
// keep what they froze until the next deployment.
type UpdateService struct {
	ServiceID string
	Source    Source
	Processes []Process
}

// DeleteService deletes a service everywhere. Services that reference its
// variables are held in their next revision.
type DeleteService struct{ ServiceID string }

// ApproveChangeSet applies a change set; the approver must not be who opened it.
type ApproveChangeSet struct{ ChangeSetID string }

// RejectChangeSet drops a change set.
type RejectChangeSet struct {
	ChangeSetID string
	Reason      string
}

// MarkDeployment moves a deployment along its lifecycle.
type MarkDeployment struct {
	DeploymentID string
	Status       DeploymentStatus
	Reason       string
}

func (p *Project) environment(id string) (*Environment, error) {
	env, ok := p.Environments[id]
	if !ok || env.Deleted {
		return nil, notFoundf("environment %s", id)
	}
	return env, nil
}

func (p *Project) service(id string) (*Service, error) {
	s, ok := p.Services[id]
	if !ok {
		return nil, notFoundf("service %s", id)
	}
	if s.Deleted {
		return nil, conflictf("service %s was deleted", s.Name)
	}
	return s, nil
}

func (p *Project) nameTaken(name string, envs bool) bool {
	if envs {
		for _, e := range p.Environments {
			if e.Name == name && !e.Deleted {
				return true
			}
		}
		return false
	}
	for _, s := range p.Services {
		if s.Name == name && !s.Deleted {
			return true
		}
	}
	return false
}

func validateProcesses(ps []Process) error {
	if len(ps) == 0 {
		return invalidf("a service needs at least one process")
	}
	seen := map[string]bool{}
	for _, pr := range ps {
		if err := pr.Validate(); err != nil {
			return err
		}
		if seen[pr.Name] {
			return invalidf("process %s is defined twice", pr.Name)
		}
		seen[pr.Name] = true
	}
	return nil
}

// Decide decides a project command. Commands that change what a protected
// environment runs do not happen at once: they open a change set that someone
// else approves.
func (p *Project) Decide(cmd any, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if c, ok := cmd.(CreateProject); ok {
		if p.Exists {
			return Decision{}, conflictf("project exists")
		}
		if err := ValidateID("project", c.ProjectID); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("organisation", c.OrgID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("project", c.Name); err != nil {
			return Decision{}, err
		}
		return Decision{
			Events: []Event{ProjectCreated{ProjectID: c.ProjectID, OrgID: c.OrgID, Name: c.Name}},
			Claims: []NameClaim{{projectNameScope(c.OrgID), c.Name}},
		}, nil
	}
	if !p.Exists || p.Deleted {
		return Decision{}, notFoundf("project")
	}
	if c, ok := asChange(cmd); ok {
		env, err := p.environment(c.environmentID())
		if err != nil {
			return Decision{}, err
		}
		if env.Protected {
			return p.openChangeSet(env, c, m)
		}
		return p.decideChange(c, m)
	}
	switch c := cmd.(type) {
	case DeleteProject:
		var releases []NameClaim
		releases = append(releases, NameClaim{projectNameScope(p.OrgID), p.Name})
		for _, host := range sortedKeys(p.Domains) {
			releases = append(releases, NameClaim{domainHostScope(), host})
		}
		return Decision{Events: []Event{ProjectDeleted{ProjectID: p.ID}}, Releases: releases}, nil
	case CreateEnvironment:
		if err := ValidateID("environment", c.EnvironmentID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("environment", c.Name); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("cluster", c.ClusterID); err != nil {
			return Decision{}, err
		}
		if _, ok := p.Environments[c.EnvironmentID]; ok {
			return Decision{}, conflictf("environment %s exists", c.EnvironmentID)
		}
		if p.nameTaken(c.Name, true) {
			return Decision{}, conflictf("an environment named %s exists in this project", c.Name)
		}
		return decided(EnvironmentCreated{EnvironmentID: c.EnvironmentID, Name: c.Name, ClusterID: c.ClusterID, Protected: c.Protected}), nil
	case UpdateEnvironment:
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
	case DeleteEnvironment:
		env, err := p.environment(c.EnvironmentID)
		if err != nil {
			return Decision{}, err
		}
		d := p.removeDomains(func(r DomainRoute) bool { return r.EnvironmentID == env.ID })
		d.Events = append(d.Events, EnvironmentDeleted{EnvironmentID: env.ID})
		return d, nil
	case CreateService:
		if err := ValidateID("service", c.ServiceID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("service", c.Name); err != nil {
			return Decision{}, err
		}
		if err := c.Source.Validate(); err != nil {
			return Decision{}, err
		}
		if err := validateProcesses(c.Processes); err != nil {
			return Decision{}, err
		}
		if _, ok := p.Services[c.ServiceID]; ok {
			return Decision{}, conflictf("service %s exists", c.ServiceID)
		}
		if p.nameTaken(c.Name, false) {
			return Decision{}, conflictf("a service named %s exists in this project", c.Name)
		}
		return decided(ServiceCreated{ServiceID: c.ServiceID, Name: c.Name, Source: c.Source, Processes: c.Processes}), nil
	case UpdateService:
		s, err := p.service(c.ServiceID)
		if err != nil {
			return Decision{}, err
		}
		if err := c.Source.Validate(); err != nil {
			return Decision{}, err
		}
		if err := validateProcesses(c.Processes); err != nil {
			return Decision{}, err
		}
		return decided(ServiceUpdated{ServiceID: s.ID, Source: c.Source, Processes: c.Processes}), nil
	case DeleteService:
		s, err := p.service(c.ServiceID)
		if err != nil {
			return Decision{}, err
		}
		d := p.removeDomains(func(r DomainRoute) bool { return r.ServiceID == s.ID })
		d.Events = append(d.Events, ServiceDeleted{ServiceID: s.ID})
		return d, nil
	case ApproveChangeSet:
		return p.approve(c, m)
	case RejectChangeSet:
		cs, err := p.openChangeSetByID(c.ChangeSetID)
		if err != nil {
			return Decision{}, err
		}
		return decided(ChangeSetRejected{ChangeSetID: cs.ID, RejectedBy: m.Person, Reason: c.Reason}), nil
	case MarkDeployment:
		return p.markDeployment(c)
	}
	return Decision{}, invalidf("command %T is not a project command", cmd)
}

func (p *Project) markDeployment(c MarkDeployment) (Decision, error) {
	d, ok := p.Deployments[c.DeploymentID]
	if !ok {
		return Decision{}, notFoundf("deployment %s", c.DeploymentID)
	}
	allowed := map[DeploymentStatus][]DeploymentStatus{
		StatusRequested:  {StatusDelivering, StatusFailed},
		StatusDelivering: {StatusSucceeded, StatusFailed},
	}
	if d.Status == c.Status {
		return Decision{}, nil
	}
	if !slices.Contains(allowed[d.Status], c.Status) {
		return Decision{}, conflictf("deployment %s is %s and cannot become %s", d.ID, d.Status, c.Status)
	}
	switch c.Status {
	case StatusDelivering:
		return decided(DeploymentDelivering{DeploymentID: d.ID}), nil
	case StatusSucceeded:
		return decided(DeploymentSucceeded{DeploymentID: d.ID}), nil
	default:
		if strings.TrimSpace(c.Reason) == "" {
			return Decision{}, invalidf("a failed deployment needs a reason")
		}
		return decided(DeploymentFailed{DeploymentID: d.ID, Reason: c.Reason}), nil
	}
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
