package domain

import (
	"fmt"
	"slices"
	"strings"
)

// openChangeSet puts a change to a protected environment into a change set:
// the open change set of the same person there, whose version grows, or a new
// one.
func (p *Project) openChangeSet(env *Environment, c Change, m Meta) (Decision, error) {
	// A system job (a build's automatic deploy) opens a change set of its
	// own, which any person may approve.
	if m.Person == "" && m.Actor.Kind == ActorSystem {
		m.Person = SystemOpener
	}
	if m.Person == "" {
		return Decision{}, fmt.Errorf("%w: changes to the protected environment %s need a person to open a change set", ErrForbidden, env.Name)
	}
	// Check now that the change would apply, after the changes already
	// waiting, so a change set never holds a change that was invalid from
	// the start.
	var joined *ChangeSet
	for _, id := range sortedKeys(p.ChangeSets) {
		if cs := p.ChangeSets[id]; cs.EnvironmentID == env.ID && cs.OpenedBy == m.Person {
			joined = cs
			break
		}
	}
	w := &pending{p: p.clone()}
	if joined != nil {
		for i, ch := range joined.Changes {
			sub := m
			sub.CommandID = fmt.Sprintf("%s/%d", joined.ID, i)
			if err := w.applyChange(ch, sub); err != nil {
				return Decision{}, fmt.Errorf("the open change set %s can no longer be applied (%s): %w", joined.ID, ch.Describe(), err)
			}
		}
	}
	// The change waits as its payload, and is checked as the approval will
	// decide it: from that payload.
	cc, err := c.payload()
	if err != nil {
		return Decision{}, err
	}
	if err := w.applyChange(cc, m); err != nil {
		return Decision{}, err
	}
	if joined != nil {
		if len(joined.Changes) >= MaxChangesPerSet {
			return Decision{}, conflictf("change set %s already holds %d changes; have it decided first", joined.ID, MaxChangesPerSet)
		}
		changes := append(slices.Clone(joined.Changes), cc)
		descs := make([]string, len(changes))
		for i, ch := range changes {
			descs[i] = ch.Describe()
		}
		return decided(ChangeSetChanged{ChangeSetID: joined.ID, Version: joined.Version + 1, Description: strings.Join(descs, "; "), Changes: changes}), nil
	}
	id := DeriveID(m.CommandID, "changeset")
	return decided(ChangeSetOpened{ChangeSetID: id, EnvironmentID: env.ID, Description: cc.Describe(), Changes: ChangeList{cc}, OpenedBy: m.Person}), nil
}

// MaxChangesPerSet bounds one change set.
const MaxChangesPerSet = 100

func (p *Project) openChangeSetByID(id string) (*ChangeSet, error) {
	cs, ok := p.ChangeSets[id]
	if !ok {
		return nil, notFoundf("open change set %s (it may have been approved, rejected or expired)", id)
	}
	return cs, nil
}

func (p *Project) approve(c ApproveChangeSet, m Meta) (Decision, error) {
	cs, err := p.openChangeSetByID(c.ChangeSetID)
	if err != nil {
		return Decision{}, err
	}
	if m.Person == "" || m.Person == cs.OpenedBy {
		return Decision{}, fmt.Errorf("%w: a change set needs the approval of someone other than who opened it", ErrForbidden)
	}
	if c.Version < 1 {
		return Decision{}, invalidf("an approval names the version of the change set it approves (now %d)", cs.Version)
	}
	if c.Version != cs.Version {
		return Decision{}, conflictf("change set %s changed since version %d (it is at version %d): review it again", cs.ID, c.Version, cs.Version)
	}
	w := &pending{p: p.clone()}
	w.emit(ChangeSetApproved{ChangeSetID: cs.ID, ApprovedBy: m.Person, Version: cs.Version})
	// Each change is decided as its payload's command (change_<kind>.go).
	for i, ch := range cs.Changes {
		// Ids the changes derive are unique per change set and change.
		sub := m
		sub.CommandID = fmt.Sprintf("%s/%d", cs.ID, i)
		if err := w.applyChange(ch, sub); err != nil {
			return Decision{}, fmt.Errorf("change set %s can no longer be applied (%s): %w", cs.ID, ch.Describe(), err)
		}
	}
	return w.d, nil
}
