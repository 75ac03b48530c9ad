package api

// VariableInput is one variable to set. A secret's value is sealed before it
// is stored and never returned.
type VariableInput struct {
	Name   string `json:"name"`
	Value  string `json:"value" input:"opaque,max=32768"`
	Secret bool   `json:"secret,omitempty"`
}

// SetVariablesRequest sets variables.
type SetVariablesRequest struct {
	Variables []VariableInput `json:"variables"`
}

// VariablesResponse lists variables after a change, or the change set that
// holds the change for a protected environment.
type VariablesResponse struct {
	Variables []Variable `json:"variables"`
	ChangeSet *ChangeSet `json:"changeSet,omitempty"`
}

// AddDomainRequest routes a host name to a service.
type AddDomainRequest struct {
	Host string `json:"host"`
}
