package domain

import (
	"fmt"
	"slices"
)

// ScalePayload is a Scale waiting in a change set (kind scale). Version 1 is
// the JSON Scale had when change-set events held commands.
type ScalePayload struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Process       string `json:"process"`
	Replicas      int    `json:"replicas"`
}

func scalePayload(c Scale) ScalePayload {
	return ScalePayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, Process: c.Process, Replicas: c.Replicas}
}

// command is the command to decide.
func (p ScalePayload) command() Scale {
	return Scale{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, Process: p.Process, Replicas: p.Replicas}
}

// Kind implements ChangeCommand.
func (ScalePayload) Kind() string { return "scale" }

func (p ScalePayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p ScalePayload) Describe() string { return fmt.Sprintf("scale %s to %d", p.Process, p.Replicas) }

// View implements ChangeCommand.
func (p ScalePayload) View() Change {
	c := p.command()
	return Change{Scale: &c}
}

func (p ScalePayload) apply(w *pending, env *Environment, m Meta) error {
	s := p.command()
	svc, err := w.p.service(s.ServiceID)
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
}
