// Package compiler turns an environment snapshot into the canonical
// desired-state document. Compile is a pure function, like Nomad's
// reconciler: no context, no I/O, no clock, no randomness. Everything it needs
// is in the Snapshot, so the control plane can compile, hash and compare
// without side effects, and a test can feed it any state it likes.
//
// A service that cannot be compiled (a reference to a deleted service, a
// secret nobody can unseal, ...) is held: it appears in the document with a
// reason and nothing to run, and the agent leaves it as it is. The other
// services still compile, so one broken service never blocks an environment.
package compiler

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
)

// Compile compiles the snapshot into the environment's desired-state
// document. The result is already in canonical order and always has a
// canonical encoding: anything that would break an invariant of the document
// holds the service instead.
//
// The output does not share memory with the snapshot.
func Compile(s Snapshot) desiredstate.Document {
	ns := desiredstate.Namespace(s.OrgName, s.ProjectName, s.EnvironmentName)
	c := newCompilation(s, ns)

	// Only services that are live and deployed here go into the document.
	// Sorting by name, then ID, makes the output independent of input order.
	deployed := make([]*Service, 0, len(s.Services))
	for i := range s.Services {
		svc := &s.Services[i]
		// A nameless service cannot be represented (the document is keyed
		// by name); the domain never creates one.
		if !svc.Deleted && svc.Release != nil && svc.Name != "" {
			deployed = append(deployed, svc)
		}
	}
	slices.SortFunc(deployed, func(a, b *Service) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})

	doc := desiredstate.Document{
		SchemaVersion: desiredstate.SchemaVersion,
		Environment: desiredstate.Environment{
			OrgID:     s.OrgID,
			Org:       s.OrgName,
			ProjectID: s.ProjectID,
			Project:   s.ProjectName,
			ID:        s.EnvironmentID,
			Name:      s.EnvironmentName,
			ClusterID: s.ClusterID,
			Namespace: ns,
		},
		Services: make([]desiredstate.Service, 0, len(deployed)),
	}
	for i, svc := range deployed {
		if i > 0 && deployed[i-1].Name == svc.Name {
			continue // collapsed into the held entry written below
		}
		if c.names[svc.Name].live > 1 {
			// Two live services with one name break a domain invariant. The
			// document is keyed by name, so write one held entry (the lowest
			// ID) rather than guess which one is meant.
			doc.Services = append(doc.Services, held(svc,
				fmt.Sprintf("service name %q is used by more than one service", svc.Name)))
			continue
		}
		doc.Services = append(doc.Services, c.service(svc))
	}
	return doc
}

func held(svc *Service, reason string) desiredstate.Service {
	return desiredstate.Service{ID: svc.ID, Name: svc.Name, Held: true, HeldReason: reason}
}

// service compiles one deployed service, or holds it with the first reason
// found: release shape first, then variables in name order.
func (c *compilation) service(svc *Service) desiredstate.Service {
	rel := svc.Release

	procs := make([]desiredstate.Process, len(rel.Processes))
	for i, p := range rel.Processes {
		procs[i] = convertProcess(p)
	}
	slices.SortStableFunc(procs, func(a, b desiredstate.Process) int { return strings.Compare(a.Name, b.Name) })
	for i, p := range procs {
		if p.Name == "" {
			return held(svc, fmt.Sprintf("release %d has a process without a name", rel.Number))
		}
		if i > 0 && procs[i-1].Name == p.Name {
			return held(svc, fmt.Sprintf("release %d has more than one process named %s", rel.Number, p.Name))
		}
	}

	// Sort pointers rather than the variables themselves: cheaper to swap,
	// and the release is left untouched.
	vars := make([]*domain.Variable, len(rel.Variables))
	for i := range rel.Variables {
		vars[i] = &rel.Variables[i]
	}
	byName := func(a, b *domain.Variable) int { return strings.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(vars, byName) {
		slices.SortStableFunc(vars, byName)
	}
	// Shape first, in a pass of its own: if a duplicate were found while
	// resolving, which reason wins would depend on the order of the copies.
	for i, v := range vars {
		if v.Name == "" {
			return held(svc, fmt.Sprintf("release %d has a variable without a name", rel.Number))
		}
		if i > 0 && vars[i-1].Name == v.Name {
			return held(svc, fmt.Sprintf("release %d has more than one variable named %s", rel.Number, v.Name))
		}
	}
	out := make([]desiredstate.Variable, len(vars))
	for i, v := range vars {
		resolved, reason := c.resolve(*v)
		if reason != "" {
			return held(svc, reason)
		}
		out[i] = resolved
	}

	// Duplicate or empty host names carry no meaning, so they are dropped
	// rather than holding the service.
	domains := slices.DeleteFunc(slices.Clone(svc.Domains), func(h string) bool { return h == "" })
	slices.Sort(domains)
	domains = slices.Compact(domains)

	return desiredstate.Service{
		ID:        svc.ID,
		Name:      svc.Name,
		Release:   &desiredstate.Release{ID: rel.ID, Number: rel.Number, Image: rel.Image, DeploymentID: rel.DeploymentID},
		Processes: emptyToNil(procs),
		Variables: emptyToNil(out),
		Domains:   emptyToNil(domains),
	}
}

// convertProcess copies a process so the document shares no memory with the
// snapshot.
func convertProcess(p domain.Process) desiredstate.Process {
	out := desiredstate.Process{
		Name:     p.Name,
		Command:  emptyToNil(slices.Clone(p.Command)),
		Port:     p.Port,
		Replicas: p.Replicas,
	}
	if hc := p.HealthCheck; hc != nil {
		out.HealthCheck = &desiredstate.HealthCheck{
			Path:                hc.Path,
			Port:                hc.Port,
			InitialDelaySeconds: hc.InitialDelaySeconds,
			PeriodSeconds:       hc.PeriodSeconds,
		}
	}
	return out
}

// emptyToNil matches what the canonical encoding does with empty lists, so a
// compiled document equals its own decoded encoding.
func emptyToNil[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}
