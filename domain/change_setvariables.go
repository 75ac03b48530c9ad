package domain

import (
	"slices"
	"sort"
	"strings"
)

// SetVariablesPayload is a SetVariables waiting in a change set (kind
// setVariables). Version 1, the only one so far, is the JSON SetVariables had
// when change-set events held commands. Variable is already an event's type
// (variables.set), so it is kept as it is: a secret stays sealed.
type SetVariablesPayload struct {
	EnvironmentID string     `json:"environmentId"`
	ServiceID     string     `json:"serviceId,omitempty"`
	Variables     []Variable `json:"variables"`
}

func setVariablesPayload(c SetVariables) SetVariablesPayload {
	return SetVariablesPayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, Variables: c.Variables}
}

// command is the command to decide.
func (p SetVariablesPayload) command() SetVariables {
	return SetVariables{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, Variables: p.Variables}
}

// Kind implements ChangeCommand.
func (SetVariablesPayload) Kind() string { return "setVariables" }

func (p SetVariablesPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p SetVariablesPayload) Describe() string {
	names := make([]string, len(p.Variables))
	for i, v := range p.Variables {
		names[i] = v.Name
	}
	return "set " + strings.Join(names, ", ")
}

// View implements ChangeCommand.
func (p SetVariablesPayload) View() Change {
	c := p.command()
	return Change{SetVariables: &c}
}

func (p SetVariablesPayload) apply(w *pending, env *Environment, m Meta) error {
	s := p.command()
	pr := w.p
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
	if err := pr.checkVariableLimits(env.ID, s.ServiceID); err != nil {
		return err
	}
	// A reference that cannot resolve is refused now, with the reason,
	// rather than accepted and the service silently held later.
	for _, v := range vars {
		if err := pr.checkReferences(env.ID, v); err != nil {
			return err
		}
		if err := pr.checkReferrers(env.ID, s.ServiceID, v); err != nil {
			return err
		}
	}
	return w.rereleaseAffected(env.ID, s.ServiceID, m, "variables")
}
