package api

// ScaleRequest sets how many copies of one of a service's processes run in
// an environment. Process may be left out when the service has one process.
type ScaleRequest struct {
	Process  string `json:"process,omitempty"`
	Replicas *int   `json:"replicas"`
}

// ReplicasResponse is the replica count of every process of the service in
// the environment, after a change.
type ReplicasResponse struct {
	Replicas []ProcessReplicas `json:"replicas"`
}

// ProcessReplicas is how many copies of one of a service's processes run in
// an environment. Scaled says the count was set for this environment; when
// false it is the process's default from the service.
type ProcessReplicas struct {
	Process  string `json:"process"`
	Replicas int    `json:"replicas"`
	Scaled   bool   `json:"scaled"`
}
