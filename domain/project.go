package domain

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// Project is the aggregate of one project: its environments and services,
// their per-environment configuration, the release counts and current
// deployment of each service in each environment, and the open change sets.
// One stream keeps the invariants that span them (a deleted service cannot be
// deployed, names are unique in the project) in one consistency boundary.
//
// Its state is bounded by what the project is now, not by its history:
// releases and deployments that are over live in the read models and in the
// deployments' own streams, and closed change sets are forgotten. That keeps
// snapshots small and deciding a command independent of history length.
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
	// ReleaseCount: environment id -> service id -> releases made so far.
	ReleaseCount map[string]map[string]int
	// Released: environment id -> service id -> name -> variable, the whole
	// variable set of the latest release: a new release records only what
	// differs from it.
	Released map[string]map[string]map[string]Variable
	// Current: environment id -> service id -> the latest deployment.
	Current map[string]map[string]CurrentDeployment
	// Paused: environment id -> service id -> automatic deploys paused.
	Paused map[string]map[string]bool
	// ChangeSets holds the open change sets only.
	ChangeSets map[string]*ChangeSet
	// Tracking: environment id -> service id -> the branch a Git service
	// follows there, when set (unset: the service's default branch).
	Tracking map[string]map[string]Track
	// Waiting: environment id -> service id -> the automatic deploy that
	// waits for automatic deploys to be resumed.
	Waiting map[string]map[string]DeployWaiting
	// Webhook is the push webhook's secret; Previous is accepted until
	// PreviousUntil.
	Webhook *WebhookSecrets
}

// Track is the branch a Git service follows in an environment.
type Track struct {
	Branch string
	None   bool
}

// WebhookSecrets are a project's push webhook secrets, sealed.
type WebhookSecrets struct {
	Current       SealedValue
	Previous      *SealedValue
	PreviousUntil time.Time
}

// TrackedBranch is the branch a service follows in an environment, or ""
// when it follows none (or is not a Git service).
func (p *Project) TrackedBranch(envID, serviceID string) string {
	s := p.Services[serviceID]
	if s == nil || s.Deleted || !s.Source.IsGit() {
		return ""
	}
	t, ok := p.Tracking[envID][serviceID]
	switch {
	case !ok:
		return s.Source.GitBranch
	case t.None:
		return ""
	}
	return t.Branch
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
	// ProgressDeadlineSeconds bounds how long a release may take to become
	// ready (0: DefaultProgressDeadline).
	ProgressDeadlineSeconds int
	Deleted                 bool
}

// DomainRoute is where a domain routes.
type DomainRoute struct{ EnvironmentID, ServiceID string }

// CurrentDeployment is the latest deployment of a service in an environment.
type CurrentDeployment struct {
	DeploymentID, ReleaseID, Image string
}

// ChangeSet is an open set of changes to a protected environment.
type ChangeSet struct {
	ID, EnvironmentID, OpenedBy string
	Changes                     ChangeList
	Version                     int
	OpenedAt                    time.Time
}

// NewProject returns the empty state of a project stream.
func NewProject() *Project {
	return &Project{
		Environments: map[string]*Environment{},
		Services:     map[string]*Service{},
		Variables:    map[string]map[string]map[string]Variable{},
		Domains:      map[string]DomainRoute{},
		Replicas:     map[string]map[string]map[string]int{},
		ReleaseCount: map[string]map[string]int{},
		Released:     map[string]map[string]map[string]Variable{},
		Current:      map[string]map[string]CurrentDeployment{},
		Paused:       map[string]map[string]bool{},
		ChangeSets:   map[string]*ChangeSet{},
		Tracking:     map[string]map[string]Track{},
		Waiting:      map[string]map[string]DeployWaiting{},
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

// Apply folds an event into the state. at is when the event happened.
func (p *Project) Apply(e Event) { p.ApplyAt(e, time.Time{}) }

// ApplyAt folds an event that happened at at into the state.
func (p *Project) ApplyAt(e Event, at time.Time) {
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
		p.Services[e.ServiceID] = &Service{ID: e.ServiceID, Name: e.Name, Source: e.Source, Processes: e.Processes, ProgressDeadlineSeconds: e.ProgressDeadlineSeconds}
	case ServiceUpdated:
		if s := p.Services[e.ServiceID]; s != nil {
			s.Source, s.Processes, s.ProgressDeadlineSeconds = e.Source, e.Processes, e.ProgressDeadlineSeconds
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
		nested(p.ReleaseCount, e.EnvironmentID)[e.ServiceID] = e.Number
		vars := nested(p.Released, e.EnvironmentID)[e.ServiceID]
		if e.Base == 0 || vars == nil {
			vars = make(map[string]Variable, len(e.Variables))
			nested(p.Released, e.EnvironmentID)[e.ServiceID] = vars
		}
		for _, n := range e.Removed {
			delete(vars, n)
		}
		for _, v := range e.Variables {
			vars[v.Name] = v
		}
		nested(p.Current, e.EnvironmentID)[e.ServiceID] = CurrentDeployment{ReleaseID: e.ReleaseID, Image: e.Image}
	case DeploymentRequested:
		cur := p.Current[e.EnvironmentID][e.ServiceID]
		if cur.ReleaseID != e.ReleaseID && e.Image != "" {
			// A rollback names an earlier release, whose image the next
			// configuration change re-releases.
			cur = CurrentDeployment{ReleaseID: e.ReleaseID, Image: e.Image}
		}
		cur.DeploymentID = e.DeploymentID
		nested(p.Current, e.EnvironmentID)[e.ServiceID] = cur
		// A deployment replaces an automatic deploy that was waiting.
		delete(p.Waiting[e.EnvironmentID], e.ServiceID)
	case DeployWaiting:
		nested(p.Waiting, e.EnvironmentID)[e.ServiceID] = e
	case BranchTracked:
		nested(p.Tracking, e.EnvironmentID)[e.ServiceID] = Track{Branch: e.Branch, None: e.None}
	case WebhookSecretRotated:
		w := &WebhookSecrets{Current: e.Secret, Previous: e.Previous}
		if e.PreviousUntil != nil {
			w.PreviousUntil = *e.PreviousUntil
		}
		p.Webhook = w
	case DeploymentsPaused:
		nested(p.Paused, e.EnvironmentID)[e.ServiceID] = true
	case DeploymentsResumed:
		delete(p.Paused[e.EnvironmentID], e.ServiceID)
	case ChangeSetOpened:
		p.ChangeSets[e.ChangeSetID] = &ChangeSet{ID: e.ChangeSetID, EnvironmentID: e.EnvironmentID, OpenedBy: e.OpenedBy,
			Changes: slices.Clone(e.Changes), Version: 1, OpenedAt: at}
	case ChangeSetChanged:
		if cs := p.ChangeSets[e.ChangeSetID]; cs != nil {
			cs.Changes = slices.Clone(e.Changes)
			cs.Version = e.Version
		}
	case ChangeSetApproved:
		delete(p.ChangeSets, e.ChangeSetID)
	case ChangeSetRejected:
		delete(p.ChangeSets, e.ChangeSetID)
	case ChangeSetExpired:
		delete(p.ChangeSets, e.ChangeSetID)
	}
}

// Commands of the project aggregate.

// ProjectCommand is a command of the project aggregate: handing the project
// another aggregate's command does not compile.
type ProjectCommand interface{ projectCommand() }

func (CreateProject) projectCommand()     {}
func (DeleteProject) projectCommand()     {}
func (CreateEnvironment) projectCommand() {}
func (UpdateEnvironment) projectCommand() {}
func (DeleteEnvironment) projectCommand() {}
func (CreateService) projectCommand()     {}
func (UpdateService) projectCommand()     {}
func (DeleteService) projectCommand()     {}
func (ApproveChangeSet) projectCommand()  {}
func (RejectChangeSet) projectCommand()   {}
func (ExpireChangeSet) projectCommand()   {}
func (ResumeDeploys) projectCommand()     {}
func (SetVariables) projectCommand()      {}
func (UnsetVariables) projectCommand()    {}
func (AddDomain) projectCommand()         {}
func (RemoveDomain) projectCommand()      {}
func (Scale) projectCommand()             {}
func (Deploy) projectCommand()            {}
func (Rollback) projectCommand()          {}

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
	// ProgressDeadlineSeconds: 0 for the default (10 minutes).
	ProgressDeadlineSeconds int
}

// UpdateService changes a service's source, processes and progress deadline;
// running releases keep what they froze until the next deployment.
type UpdateService struct {
	ServiceID               string
	Source                  Source
	Processes               []Process
	ProgressDeadlineSeconds int
}

// DeleteService deletes a service everywhere. Services that reference its
// variables are held in their next revision.
type DeleteService struct{ ServiceID string }

// ApproveChangeSet applies a change set; the approver must not be who opened
// it, and names the version seen: a change set that changed since is refused.
type ApproveChangeSet struct {
	ChangeSetID string
	Version     int
}

// RejectChangeSet drops a change set.
type RejectChangeSet struct {
	ChangeSetID string
	Reason      string
}

// ExpireChangeSet drops a change set that was open for TTL without a decision.
type ExpireChangeSet struct {
	ChangeSetID string
	TTL         time.Duration
}

// ResumeDeploys lets automatic deploys of a service in an environment happen
// again after a rollback paused them.
type ResumeDeploys struct{ EnvironmentID, ServiceID string }

// MaxProgressDeadline bounds a service's progress deadline.
const MaxProgressDeadline = 24 * time.Hour

func validateDeadline(seconds int) error {
	if seconds < 0 || time.Duration(seconds)*time.Second > MaxProgressDeadline {
		return invalidf("progress deadline %d s must be between 0 (the default, 10 min) and %d s", seconds, int(MaxProgressDeadline/time.Second))
	}
	return nil
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
	return p.liveService(name) != nil
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
func (p *Project) Decide(cmd ProjectCommand, m Meta) (Decision, error) {
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
	// Changes that alter what runs in a protected environment, or who may
	// change it, wait for someone else's approval like any other change.
	if c, env, ok := p.guarded(cmd); ok {
		return p.openChangeSet(env, c, m)
	}
	switch c := cmd.(type) {
	case DeleteProject:
		return p.decideDeleteProject(), nil
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
		return p.decideUpdateEnvironment(c)
	case DeleteEnvironment:
		return p.decideDeleteEnvironment(c.EnvironmentID)
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
		if err := validateDeadline(c.ProgressDeadlineSeconds); err != nil {
			return Decision{}, err
		}
		if _, ok := p.Services[c.ServiceID]; ok {
			return Decision{}, conflictf("service %s exists", c.ServiceID)
		}
		if p.nameTaken(c.Name, false) {
			return Decision{}, conflictf("a service named %s exists in this project", c.Name)
		}
		return decided(ServiceCreated{ServiceID: c.ServiceID, Name: c.Name, Source: c.Source, Processes: c.Processes, ProgressDeadlineSeconds: c.ProgressDeadlineSeconds}), nil
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
		if err := validateDeadline(c.ProgressDeadlineSeconds); err != nil {
			return Decision{}, err
		}
		return decided(ServiceUpdated{ServiceID: s.ID, Source: c.Source, Processes: c.Processes, ProgressDeadlineSeconds: c.ProgressDeadlineSeconds}), nil
	case DeleteService:
		return p.decideDeleteService(c.ServiceID)
	case ApproveChangeSet:
		return p.approve(c, m)
	case RejectChangeSet:
		cs, err := p.openChangeSetByID(c.ChangeSetID)
		if err != nil {
			return Decision{}, err
		}
		// Four eyes: a change set is decided, either way, by someone other
		// than who opened it (a rejection is a decision, recorded as theirs);
		// its opener's own change set expires if nobody decides it.
		if m.Person == "" || m.Person == cs.OpenedBy {
			return Decision{}, fmt.Errorf("%w: a change set is rejected by someone other than who opened it (it expires if nobody decides it)", ErrForbidden)
		}
		if err := ValidateText("reason", c.Reason, 1000); err != nil {
			return Decision{}, err
		}
		return decided(ChangeSetRejected{ChangeSetID: cs.ID, RejectedBy: m.Person, Reason: c.Reason}), nil
	case ExpireChangeSet:
		cs, ok := p.ChangeSets[c.ChangeSetID]
		if !ok || c.TTL <= 0 || m.Now.Sub(cs.OpenedAt) < c.TTL {
			return Decision{}, nil
		}
		return decided(ChangeSetExpired{ChangeSetID: cs.ID}), nil
	case ResumeDeploys:
		return p.resume(c, m)
	case TrackBranch:
		return p.track(c)
	case RotateWebhookSecret:
		if err := c.Secret.Validate(); err != nil {
			return Decision{}, err
		}
		e := WebhookSecretRotated{ProjectID: p.ID, Secret: c.Secret}
		if p.Webhook != nil {
			prev, until := p.Webhook.Current, m.Now.Add(WebhookSecretGrace)
			e.Previous, e.PreviousUntil = &prev, &until
		}
		return decided(e), nil
	}
	return Decision{}, invalidf("command %T is not a project command", cmd)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
