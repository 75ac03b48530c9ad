package domain

import (
	"maps"
	"slices"
)

// rereleaseAffected gives every service that runs in env and is affected by a
// configuration change (one service, or all for an environment-wide change) a
// new release of the image it runs, so the change rolls out.
func (w *pending) rereleaseAffected(envID, serviceID string, m Meta, reason string) error {
	p := w.p
	for _, id := range sortedKeys(p.Current[envID]) {
		if serviceID != "" && id != serviceID {
			continue
		}
		svc := p.Services[id]
		if svc == nil || svc.Deleted {
			continue
		}
		cur := p.Current[envID][id]
		if cur.DeploymentID == "" || cur.Image == "" {
			continue
		}
		relID := DeriveID(m.CommandID, "release", envID, id)
		depID := DeriveID(m.CommandID, "deployment", envID, id)
		w.release(envID, svc, relID, depID, cur.Image, reason)
	}
	return nil
}

// release freezes the configuration of svc in env into a new release and
// requests its deployment.
func (w *pending) release(envID string, svc *Service, releaseID, deploymentID, image, reason string) {
	p := w.p
	procs := make([]Process, len(svc.Processes))
	for i, pr := range svc.Processes {
		if n, ok := p.Replicas[envID][svc.ID][pr.Name]; ok {
			pr.Replicas = n
		}
		pr.Command = slices.Clone(pr.Command)
		procs[i] = pr
	}
	merged := map[string]Variable{}
	for n, v := range p.Variables[envID][""] {
		merged[n] = v
	}
	for n, v := range p.Variables[envID][svc.ID] {
		merged[n] = v
	}
	number := p.ReleaseCount[envID][svc.ID] + 1
	// The variables are recorded against the release before: what is new or
	// changed, and what is gone.
	base := number - 1
	before := p.Released[envID][svc.ID]
	var vars []Variable
	var removed []string
	for _, n := range sortedKeys(merged) {
		if old, ok := before[n]; base == 0 || !ok || !old.Equal(merged[n]) {
			vars = append(vars, merged[n])
		}
	}
	if base > 0 {
		for _, n := range sortedKeys(before) {
			if _, ok := merged[n]; !ok {
				removed = append(removed, n)
			}
		}
	}
	if vars == nil {
		vars = []Variable{}
	}
	previous := p.Current[envID][svc.ID].DeploymentID
	w.emit(ReleaseCreated{ReleaseID: releaseID, EnvironmentID: envID, ServiceID: svc.ID, Number: number, Image: image, Processes: procs,
		Base: base, Variables: vars, Removed: removed, Reason: reason})
	w.emit(DeploymentRequested{DeploymentID: deploymentID, ReleaseID: releaseID, EnvironmentID: envID, ServiceID: svc.ID, Image: image, Supersedes: previous})
}

// clone deep-copies the mutable parts of the state that applying events
// touches. The state is bounded by what the project is now, so this does not
// grow with history.
func (p *Project) clone() *Project {
	c := *p
	c.Environments = cloneMap(p.Environments, func(v *Environment) *Environment { x := *v; return &x })
	c.Services = cloneMap(p.Services, func(v *Service) *Service { x := *v; return &x })
	c.Variables = cloneMap(p.Variables, func(bySvc map[string]map[string]Variable) map[string]map[string]Variable {
		return cloneMap(bySvc, func(vars map[string]Variable) map[string]Variable { return maps.Clone(vars) })
	})
	c.Domains = maps.Clone(p.Domains)
	c.Replicas = cloneMap(p.Replicas, func(bySvc map[string]map[string]int) map[string]map[string]int {
		return cloneMap(bySvc, func(procs map[string]int) map[string]int { return maps.Clone(procs) })
	})
	c.ReleaseCount = cloneMap(p.ReleaseCount, func(m map[string]int) map[string]int { return maps.Clone(m) })
	c.Released = cloneMap(p.Released, func(bySvc map[string]map[string]Variable) map[string]map[string]Variable {
		return cloneMap(bySvc, func(vars map[string]Variable) map[string]Variable { return maps.Clone(vars) })
	})
	c.Current = cloneMap(p.Current, func(m map[string]CurrentDeployment) map[string]CurrentDeployment { return maps.Clone(m) })
	c.Paused = cloneMap(p.Paused, func(m map[string]bool) map[string]bool { return maps.Clone(m) })
	c.ChangeSets = cloneMap(p.ChangeSets, func(v *ChangeSet) *ChangeSet { x := *v; return &x })
	c.Tracking = cloneMap(p.Tracking, func(m map[string]Track) map[string]Track { return maps.Clone(m) })
	c.Waiting = cloneMap(p.Waiting, func(m map[string]DeployWaiting) map[string]DeployWaiting { return maps.Clone(m) })
	return &c
}

func cloneMap[V any](m map[string]V, cp func(V) V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = cp(v)
	}
	return out
}
