package domain

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

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

// Change is one of the commands above, as a change set stores it. Exactly one
// field is set; the union is explicit so the stored form never depends on Go
// type names. The last four are the project commands that wait in a change
// set only when they touch a protected environment (see Project.guarded).
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

func (c Change) environmentID() string {
	switch {
	case c.SetVariables != nil:
		return c.SetVariables.EnvironmentID
	case c.UnsetVariables != nil:
		return c.UnsetVariables.EnvironmentID
	case c.AddDomain != nil:
		return c.AddDomain.EnvironmentID
	case c.RemoveDomain != nil:
		return c.RemoveDomain.EnvironmentID
	case c.Scale != nil:
		return c.Scale.EnvironmentID
	case c.Deploy != nil:
		return c.Deploy.EnvironmentID
	case c.Rollback != nil:
		return c.Rollback.EnvironmentID
	case c.DeleteService != nil:
		return c.DeleteService.EnvironmentID
	case c.DeleteEnvironment != nil:
		return c.DeleteEnvironment.EnvironmentID
	case c.DeleteProject != nil:
		return c.DeleteProject.EnvironmentID
	case c.UpdateEnvironment != nil:
		return c.UpdateEnvironment.EnvironmentID
	}
	return ""
}

// Describe says in a few words what a change does.
func (c Change) Describe() string {
	switch {
	case c.SetVariables != nil:
		names := make([]string, len(c.SetVariables.Variables))
		for i, v := range c.SetVariables.Variables {
			names[i] = v.Name
		}
		return "set " + strings.Join(names, ", ")
	case c.UnsetVariables != nil:
		return "unset " + strings.Join(c.UnsetVariables.Names, ", ")
	case c.AddDomain != nil:
		return "add domain " + c.AddDomain.Host
	case c.RemoveDomain != nil:
		return "remove domain " + c.RemoveDomain.Host
	case c.Scale != nil:
		return fmt.Sprintf("scale %s to %d", c.Scale.Process, c.Scale.Replicas)
	case c.Deploy != nil:
		return "deploy " + c.Deploy.Image
	case c.Rollback != nil:
		if c.Rollback.Release.Number > 0 {
			return fmt.Sprintf("roll back to release %d", c.Rollback.Release.Number)
		}
		return "roll back to release " + c.Rollback.ReleaseID
	case c.DeleteService != nil:
		return "delete service " + c.DeleteService.ServiceID
	case c.DeleteEnvironment != nil:
		return "delete the environment"
	case c.DeleteProject != nil:
		return "delete the project"
	case c.UpdateEnvironment != nil:
		return fmt.Sprintf("set protected %t, cluster %s", c.UpdateEnvironment.Protected, c.UpdateEnvironment.ClusterID)
	}
	return "nothing"
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

func (w *pending) apply(c Change, m Meta) error {
	p := w.p
	env, err := p.environment(c.environmentID())
	if err != nil {
		return err
	}
	switch {
	case c.SetVariables != nil:
		s := c.SetVariables
		if err := w.checkTarget(s.ServiceID); err != nil {
			return err
		}
		if len(s.Variables) == 0 {
			return invalidf("no variables to set")
		}
		seen := map[string]bool{}
		for _, v := range s.Variables {
			if err := v.Validate(); err != nil {
				return err
			}
			if seen[v.Name] {
				return invalidf("variable %s is given twice", v.Name)
			}
			seen[v.Name] = true
		}
		vars := slices.Clone(s.Variables)
		sort.Slice(vars, func(i, j int) bool { return vars[i].Name < vars[j].Name })
		w.emit(VariablesSet{EnvironmentID: env.ID, ServiceID: s.ServiceID, Variables: vars})
		if err := p.checkVariableLimits(env.ID, s.ServiceID); err != nil {
			return err
		}
		// A reference that cannot resolve is refused now, with the reason,
		// rather than accepted and the service silently held later.
		for _, v := range vars {
			if err := p.checkReferences(env.ID, v); err != nil {
				return err
			}
			if err := p.checkReferrers(env.ID, s.ServiceID, v); err != nil {
				return err
			}
		}
		return w.rereleaseAffected(env.ID, s.ServiceID, m, "variables")
	case c.UnsetVariables != nil:
		u := c.UnsetVariables
		if err := w.checkTarget(u.ServiceID); err != nil {
			return err
		}
		names := slices.Clone(u.Names)
		sort.Strings(names)
		names = slices.Compact(names)
		for _, n := range names {
			if _, ok := p.Variables[env.ID][u.ServiceID][n]; !ok {
				return notFoundf("variable %s is not set", n)
			}
		}
		if len(names) == 0 {
			return invalidf("no variables to unset")
		}
		w.emit(VariablesUnset{EnvironmentID: env.ID, ServiceID: u.ServiceID, Names: names})
		return w.rereleaseAffected(env.ID, u.ServiceID, m, "variables")
	case c.AddDomain != nil:
		a := c.AddDomain
		if _, err := p.service(a.ServiceID); err != nil {
			return err
		}
		if err := ValidateHostname(a.Host); err != nil {
			return err
		}
		if _, ok := p.Domains[a.Host]; ok {
			return conflictf("domain %s is already routed in this project", a.Host)
		}
		w.emit(DomainAdded{EnvironmentID: env.ID, ServiceID: a.ServiceID, Host: a.Host})
		w.d.Claims = append(w.d.Claims, NameClaim{domainHostScope(), a.Host})
	case c.RemoveDomain != nil:
		r := c.RemoveDomain
		route, ok := p.Domains[r.Host]
		if !ok || route.EnvironmentID != env.ID {
			return notFoundf("domain %s", r.Host)
		}
		w.emit(DomainRemoved{EnvironmentID: env.ID, ServiceID: route.ServiceID, Host: r.Host})
		w.d.Releases = append(w.d.Releases, NameClaim{domainHostScope(), r.Host})
	case c.Scale != nil:
		s := c.Scale
		svc, err := p.service(s.ServiceID)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(svc.Processes, func(pr Process) bool { return pr.Name == s.Process }) {
			return notFoundf("service %s has no process %s", svc.Name, s.Process)
		}
		if s.Replicas < 0 || s.Replicas > 1000 {
			return invalidf("replicas %d must be between 0 and 1000", s.Replicas)
		}
		w.emit(ServiceScaled{EnvironmentID: env.ID, ServiceID: svc.ID, Process: s.Process, Replicas: s.Replicas})
		return w.rereleaseAffected(env.ID, svc.ID, m, "scale")
	case c.Deploy != nil:
		d := c.Deploy
		svc, err := p.service(d.ServiceID)
		if err != nil {
			return err
		}
		if err := ValidateID("release", d.ReleaseID); err != nil {
			return err
		}
		if err := ValidateID("deployment", d.DeploymentID); err != nil {
			return err
		}
		if !strings.Contains(d.Image, "@sha256:") {
			return invalidf("image %q is not pinned to a digest", d.Image)
		}
		if err := ValidateText("image", d.Image, 1000); err != nil {
			return err
		}
		if p.Current[env.ID][svc.ID].DeploymentID == d.DeploymentID {
			return conflictf("deployment %s exists", d.DeploymentID)
		}
		if d.ClusterID != "" && d.ClusterID != env.ClusterID {
			return conflictf("environment %s moved to another cluster since the build: its image is in the registry of the cluster it was built on; deploy again to build there", env.Name)
		}
		if d.Automatic && p.Paused[env.ID][svc.ID] {
			// The deploy waits, visible, until someone resumes automatic
			// deploys (which deploys it) or deploys by hand.
			w.emit(DeployWaiting{EnvironmentID: env.ID, ServiceID: svc.ID, Image: d.Image, BuildID: d.BuildID, ClusterID: d.ClusterID})
			return nil
		}
		w.release(env.ID, svc, d.ReleaseID, d.DeploymentID, d.Image, "deploy")
	case c.Rollback != nil:
		r := c.Rollback
		if _, err := p.service(r.ServiceID); err != nil {
			return err
		}
		if err := ValidateID("deployment", r.DeploymentID); err != nil {
			return err
		}
		if err := ValidateID("release", r.ReleaseID); err != nil {
			return err
		}
		rel := r.Release
		if rel.EnvironmentID != env.ID || rel.ServiceID != r.ServiceID || rel.Number < 1 ||
			rel.Number > p.ReleaseCount[env.ID][r.ServiceID] || rel.Image == "" {
			return notFoundf("release %s of this service in this environment", r.ReleaseID)
		}
		cur := p.Current[env.ID][r.ServiceID]
		w.emit(DeploymentRequested{DeploymentID: r.DeploymentID, ReleaseID: r.ReleaseID, EnvironmentID: env.ID, ServiceID: r.ServiceID,
			Rollback: true, Image: rel.Image, Supersedes: cur.DeploymentID})
		if !p.Paused[env.ID][r.ServiceID] {
			w.emit(DeploymentsPaused{EnvironmentID: env.ID, ServiceID: r.ServiceID, Reason: fmt.Sprintf("rolled back to release %d", rel.Number)})
		}
	case c.DeleteService != nil:
		return w.merge(p.decideDeleteService(c.DeleteService.ServiceID))
	case c.DeleteEnvironment != nil:
		return w.merge(p.decideDeleteEnvironment(c.DeleteEnvironment.EnvironmentID))
	case c.DeleteProject != nil:
		return w.merge(p.decideDeleteProject(), nil)
	case c.UpdateEnvironment != nil:
		return w.merge(p.decideUpdateEnvironment(*c.UpdateEnvironment))
	default:
		return invalidf("empty change")
	}
	return nil
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
