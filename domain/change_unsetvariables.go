package domain

import (
	"slices"
	"sort"
	"strings"
)

// UnsetVariablesPayload is an UnsetVariables waiting in a change set (kind
// unsetVariables). Version 1 is the JSON UnsetVariables had when change-set
// events held commands.
type UnsetVariablesPayload struct {
	EnvironmentID string   `json:"environmentId"`
	ServiceID     string   `json:"serviceId,omitempty"`
	Names         []string `json:"names"`
}

func unsetVariablesPayload(c UnsetVariables) UnsetVariablesPayload {
	return UnsetVariablesPayload{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, Names: c.Names}
}

// command is the command to decide.
func (p UnsetVariablesPayload) command() UnsetVariables {
	return UnsetVariables{EnvironmentID: p.EnvironmentID, ServiceID: p.ServiceID, Names: p.Names}
}

// Kind implements ChangeCommand.
func (UnsetVariablesPayload) Kind() string { return "unsetVariables" }

func (p UnsetVariablesPayload) environmentID() string { return p.EnvironmentID }

// Describe implements ChangeCommand.
func (p UnsetVariablesPayload) Describe() string { return "unset " + strings.Join(p.Names, ", ") }

// View implements ChangeCommand.
func (p UnsetVariablesPayload) View() Change {
	c := p.command()
	return Change{UnsetVariables: &c}
}

func (p UnsetVariablesPayload) apply(w *pending, env *Environment, m Meta) error {
	u := p.command()
	if err := w.checkTarget(u.ServiceID); err != nil {
		return err
	}
	names := slices.Clone(u.Names)
	sort.Strings(names)
	names = slices.Compact(names)
	for _, n := range names {
		if _, ok := w.p.Variables[env.ID][u.ServiceID][n]; !ok {
			return notFoundf("variable %s is not set", n)
		}
	}
	if len(names) == 0 {
		return invalidf("no variables to unset")
	}
	w.emit(VariablesUnset{EnvironmentID: env.ID, ServiceID: u.ServiceID, Names: names})
	return w.rereleaseAffected(env.ID, u.ServiceID, m, "variables")
}
