package api

import "strconv"

// Page is one page of a list, for Go programs that read the API: its items
// and, when there are more, the cursor of the next page (pass it as
// ?cursor=, with the same filters).
type Page[T any] struct {
	Items []T `json:"items"`
	// Next is absent on the last page.
	Next string `json:"next,omitempty"`
}

// PageKey identifies a workload: its service, release and process.
func (w Workload) PageKey() string {
	return w.Service + "/" + strconv.Itoa(w.Release) + "/" + w.Process
}

// PageKey identifies a Kubernetes event: its object and reason in its
// namespace.
func (e ClusterEvent) PageKey() string {
	return e.Namespace + "/" + e.Object + "/" + e.Reason
}

// PageKey identifies a process's replica count: the process.
func (p ProcessReplicas) PageKey() string { return p.Process }

// PageKey identifies a variable: its scope and name (a service's list
// merges the environment-wide ones).
func (v Variable) PageKey() string { return v.Scope + "/" + v.Name }

// PageKey identifies the row for the cursor: its service's id.
func (m MatrixRow) PageKey() string { return m.Service.ID }
