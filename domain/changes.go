package domain

// Commands that change what an environment runs. On a protected environment
// they wait in a change set; elsewhere they happen at once.

// SetVariables sets variables of an environment (ServiceID "") or of one
// service in it. Services already deployed there get a new release with the
// new configuration, so the change rolls out.
type SetVariables struct {
	EnvironmentID string     `json:"environmentId"`
	ServiceID     string     `json:"serviceId,omitempty"`
	Variables     []Variable `json:"variables"`
}

// UnsetVariables removes variables.
type UnsetVariables struct {
	EnvironmentID string   `json:"environmentId"`
	ServiceID     string   `json:"serviceId,omitempty"`
	Names         []string `json:"names"`
}

// AddDomain routes a host name to a service in an environment.
type AddDomain struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Host          string `json:"host"`
}

// RemoveDomain stops routing a host name.
type RemoveDomain struct {
	EnvironmentID string `json:"environmentId"`
	Host          string `json:"host"`
}

// Scale sets a process's replica count in an environment.
type Scale struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Process       string `json:"process"`
	Replicas      int    `json:"replicas"`
}

// Deploy creates a release of an image (already pinned to its digest by the
// caller) with the configuration as it is now, and deploys it.
type Deploy struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	ReleaseID     string `json:"releaseId"`
	DeploymentID  string `json:"deploymentId"`
	Image         string `json:"image"`
	// Automatic marks a deploy nobody asked for in person (a Git push): it is
	// refused while a rollback paused the service's automatic deploys.
	Automatic bool `json:"automatic,omitempty"`
	// BuildID names the build whose image this deploys, when one did;
	// ClusterID is then the cluster it built on, whose registry holds the
	// image: the environment must still run there.
	BuildID   string `json:"buildId,omitempty"`
	ClusterID string `json:"clusterId,omitempty"`
}

// Rollback deploys an earlier release again, with the configuration it froze,
// and pauses automatic deploys of the service there until someone resumes
// them.
type Rollback struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	ReleaseID     string `json:"releaseId"`
	DeploymentID  string `json:"deploymentId"`
	// Release is the release as the release history keeps it: the project's
	// state keeps counts, not every release it ever made, so the caller
	// hands over the (immutable) facts of the release it names.
	Release ReleaseRef `json:"release"`
}

// ReleaseRef is what a rollback needs to know of an earlier release.
type ReleaseRef struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Number        int    `json:"number"`
	Image         string `json:"image"`
}

// Change is one of the commands above, or of the project commands that wait
// in a change set only when they touch a protected environment (see
// Project.guarded). Exactly one field is set.
//
// It is how the deciding code names a change before it waits, and it is the
// view of a change that the read model keeps and the API serves (the
// change-set row's changes, redacted): the JSON of a []Change, which a change
// set's events of schema 1 also held. The events themselves no longer carry
// it: they carry a ChangeCommand, a payload of each kind's own (see
// change_codec.go), so that a command can change without breaking the replay
// of the change sets that hold it.
type Change struct {
	SetVariables      *SetVariables        `json:"setVariables,omitempty"`
	UnsetVariables    *UnsetVariables      `json:"unsetVariables,omitempty"`
	AddDomain         *AddDomain           `json:"addDomain,omitempty"`
	RemoveDomain      *RemoveDomain        `json:"removeDomain,omitempty"`
	Scale             *Scale               `json:"scale,omitempty"`
	Deploy            *Deploy              `json:"deploy,omitempty"`
	Rollback          *Rollback            `json:"rollback,omitempty"`
	DeleteService     *DeleteServiceChange `json:"deleteService,omitempty"`
	DeleteEnvironment *DeleteEnvironment   `json:"deleteEnvironment,omitempty"`
	DeleteProject     *DeleteProjectChange `json:"deleteProject,omitempty"`
	UpdateEnvironment *UpdateEnvironment   `json:"updateEnvironment,omitempty"`
}

// DeleteServiceChange is the deletion of a service that runs in the protected
// environment EnvironmentID, waiting in that environment's change set.
type DeleteServiceChange struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
}

// DeleteProjectChange is the deletion of a project with the protected
// environment EnvironmentID, waiting in that environment's change set.
type DeleteProjectChange struct {
	EnvironmentID string `json:"environmentId"`
}

func asChange(cmd ProjectCommand) (Change, bool) {
	switch c := cmd.(type) {
	case SetVariables:
		return Change{SetVariables: &c}, true
	case UnsetVariables:
		return Change{UnsetVariables: &c}, true
	case AddDomain:
		return Change{AddDomain: &c}, true
	case RemoveDomain:
		return Change{RemoveDomain: &c}, true
	case Scale:
		return Change{Scale: &c}, true
	case Deploy:
		return Change{Deploy: &c}, true
	case Rollback:
		return Change{Rollback: &c}, true
	}
	return Change{}, false
}

// payload is the change as a change set's events carry it.
func (c Change) payload() (ChangeCommand, error) {
	switch {
	case c.SetVariables != nil:
		return setVariablesPayload(*c.SetVariables), nil
	case c.UnsetVariables != nil:
		return unsetVariablesPayload(*c.UnsetVariables), nil
	case c.AddDomain != nil:
		return addDomainPayload(*c.AddDomain), nil
	case c.RemoveDomain != nil:
		return removeDomainPayload(*c.RemoveDomain), nil
	case c.Scale != nil:
		return scalePayload(*c.Scale), nil
	case c.Deploy != nil:
		return deployPayload(*c.Deploy), nil
	case c.Rollback != nil:
		return rollbackPayload(*c.Rollback), nil
	case c.DeleteService != nil:
		return deleteServicePayload(*c.DeleteService), nil
	case c.DeleteEnvironment != nil:
		return deleteEnvironmentPayload(*c.DeleteEnvironment), nil
	case c.DeleteProject != nil:
		return deleteProjectPayload(*c.DeleteProject), nil
	case c.UpdateEnvironment != nil:
		return updateEnvironmentPayload(*c.UpdateEnvironment), nil
	}
	return nil, invalidf("empty change")
}

func (c Change) environmentID() string {
	if p, err := c.payload(); err == nil {
		return p.environmentID()
	}
	return ""
}

// Describe says in a few words what a change does.
func (c Change) Describe() string {
	if p, err := c.payload(); err == nil {
		return p.Describe()
	}
	return "nothing"
}

// ChangeCommand is one change waiting in a change set, as the change set's
// events carry it: a payload of its kind's own, which is not the command it
// stands for, with its own JSON and schema version (change_codec.go), turned
// into the command only to decide it (when it joins a change set, and at
// approval). Each kind is one file, change_<kind>.go. The interface is
// sealed: only this package's payload types implement it.
type ChangeCommand interface {
	// Kind is the change's stable name in stored events: setVariables,
	// unsetVariables, addDomain, removeDomain, scale, deploy, rollback,
	// deleteService, deleteEnvironment, deleteProject, updateEnvironment.
	Kind() string
	// Describe says in a few words what the change does.
	Describe() string
	// View is the change as the read model shows it.
	View() Change
	environmentID() string
	// apply turns the payload into its command and decides that on the
	// pending state, in environment env (the change's, which exists).
	apply(w *pending, env *Environment, m Meta) error
}

// ChangeList is the changes of a change set, in order. Its JSON is the
// current schema of change-set events (a versioned envelope per change, see
// change_codec.go); it also reads the schema 1 form, so that a snapshot of a
// project taken before change-set payloads still loads.
type ChangeList []ChangeCommand

// View is the changes as the read model keeps them (the JSON of a []Change).
func (l ChangeList) View() []Change {
	if l == nil {
		return nil
	}
	out := make([]Change, len(l))
	for i, c := range l {
		out[i] = c.View()
	}
	return out
}

// pending is the project's state as a decision unfolds: each change of a
// change set, and each event of one change, sees the effect of the ones before.
type pending struct {
	p *Project
	d Decision
}

func (w *pending) emit(e Event) {
	w.d.Events = append(w.d.Events, e)
	w.p.Apply(e)
}

// decideChange decides a change on a copy of the state, so that a command
// that emits several events (variables, then releases) sees its own effects
// and a failure leaves the aggregate as it was.
func (p *Project) decideChange(c Change, m Meta) (Decision, error) {
	w := &pending{p: p.clone()}
	if err := w.apply(c, m); err != nil {
		return Decision{}, err
	}
	return w.d, nil
}

// apply decides a change as it would wait in a change set: through its
// payload, so that what is decided at once and what is decided at approval
// are one path.
func (w *pending) apply(c Change, m Meta) error {
	cc, err := c.payload()
	if err != nil {
		return err
	}
	return w.applyChange(cc, m)
}

// applyChange decides one change of a change set on the pending state.
func (w *pending) applyChange(c ChangeCommand, m Meta) error {
	env, err := w.p.environment(c.environmentID())
	if err != nil {
		return err
	}
	return c.apply(w, env, m)
}

// merge takes a decision made on the pending state into the change set's.
func (w *pending) merge(d Decision, err error) error {
	if err != nil {
		return err
	}
	for _, e := range d.Events {
		w.emit(e)
	}
	w.d.Claims = append(w.d.Claims, d.Claims...)
	w.d.Releases = append(w.d.Releases, d.Releases...)
	return nil
}

func (w *pending) checkTarget(serviceID string) error {
	if serviceID == "" {
		return nil
	}
	_, err := w.p.service(serviceID)
	return err
}
