package dispatch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nebulactrl/nebulactrl/domain"
)

// The metrics' outcome of a command names the kind of refusal, wrapped or
// not; anything else is an error.
func TestOutcome(t *testing.T) {
	for err, want := range map[error]string{
		nil: "ok",
		fmt.Errorf("%w: bad name", domain.ErrInvalid):    "invalid",
		fmt.Errorf("%w: project", domain.ErrNotFound):    "not_found",
		fmt.Errorf("%w: name taken", domain.ErrConflict): "conflict",
		domain.ErrForbidden:                              "forbidden",
		fmt.Errorf("%w: at version 3", ErrStale):         "stale",
		errors.New("connection refused"):                 "error",
	} {
		if got := Outcome(err); got != want {
			t.Errorf("Outcome(%v) = %q, want %q", err, got, want)
		}
	}
	if got := commandName(domain.CreateProject{}); got != "CreateProject" {
		t.Errorf("commandName = %q", got)
	}
	if got := commandName(&domain.CreateProject{}); got != "CreateProject" {
		t.Errorf("commandName of a pointer = %q", got)
	}
}
