package api

// ChangeSetDecision approves or rejects a change set. An approval must name
// the version of the change set it approves, as the change set's read shows
// it: 422 without one, 409 when changes joined the change set since (review
// it again). A rejection may give a reason.
type ChangeSetDecision struct {
	Reason  string `json:"reason,omitempty" input:"text,max=4096"`
	Version int    `json:"version,omitempty"`
}

// ChangeSetView is a change set with what each of its changes changes.
type ChangeSetView struct {
	ChangeSet
	Diff []ChangeDiff `json:"diff"`
}
