package domain

import "fmt"

// Organisation is a tenant: its members own projects and clusters.
type Organisation struct {
	ID      string
	Name    string
	Exists  bool
	Members map[string]Role
	// Rollouts are its staged agent rollouts (upgrade.go).
	Rollouts AgentRollouts
}

// NewOrganisation returns the empty state of an organisation stream.
func NewOrganisation() *Organisation { return &Organisation{Members: map[string]Role{}} }

// Apply folds an event into the state.
func (o *Organisation) Apply(e Event) {
	switch e := e.(type) {
	case OrganisationCreated:
		o.ID, o.Name, o.Exists = e.OrgID, e.Name, true
	case MemberAdded:
		o.Members[e.UserID] = e.Role
	case MemberRoleChanged:
		o.Members[e.UserID] = e.Role
	case MemberRemoved:
		delete(o.Members, e.UserID)
	default:
		o.Rollouts.Apply(e)
	}
}

// CreateOrganisation creates an organisation with its first owner.
type CreateOrganisation struct {
	OrgID string
	Name  string
	Owner string // user id
}

// AddMember adds a user with a role.
type AddMember struct {
	UserID string
	Role   Role
}

// ChangeMemberRole changes a member's role.
type ChangeMemberRole struct {
	UserID string
	Role   Role
}

// RemoveMember removes a member.
type RemoveMember struct{ UserID string }

func (o *Organisation) owners() int {
	n := 0
	for _, r := range o.Members {
		if r == RoleOwner {
			n++
		}
	}
	return n
}

// ownersOnly refuses a change that grants, changes or takes the Owner role
// unless a person who is an Owner asks for it: an Admin cannot demote or
// remove an Owner, nor make anyone one.
func (o *Organisation) ownersOnly(touchesOwner bool, m Meta) error {
	if touchesOwner && (m.Person == "" || o.Members[m.Person] != RoleOwner) {
		return fmt.Errorf("%w: only an Owner grants, changes or removes the Owner role", ErrForbidden)
	}
	return nil
}

// Decide decides an organisation command.
func (o *Organisation) Decide(cmd OrganisationCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if c, ok := cmd.(CreateOrganisation); ok {
		if o.Exists {
			return Decision{}, conflictf("organisation %s exists", o.Name)
		}
		if err := ValidateID("organisation", c.OrgID); err != nil {
			return Decision{}, err
		}
		if err := ValidateName("organisation", c.Name); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("user", c.Owner); err != nil {
			return Decision{}, err
		}
		return Decision{
			Events: []Event{OrganisationCreated{OrgID: c.OrgID, Name: c.Name}, MemberAdded{OrgID: c.OrgID, UserID: c.Owner, Role: RoleOwner}},
			Claims: []NameClaim{{orgNameScope(), c.Name}},
		}, nil
	}
	if !o.Exists {
		return Decision{}, notFoundf("organisation")
	}
	switch c := cmd.(type) {
	case RolloutCommand:
		return o.Rollouts.Decide(o.ID, c, m)
	case AddMember:
		if err := ValidateID("user", c.UserID); err != nil {
			return Decision{}, err
		}
		if _, err := ParseRole(string(c.Role)); err != nil {
			return Decision{}, err
		}
		if _, ok := o.Members[c.UserID]; ok {
			return Decision{}, conflictf("user is already a member")
		}
		if err := o.ownersOnly(c.Role == RoleOwner, m); err != nil {
			return Decision{}, err
		}
		return decided(MemberAdded{OrgID: o.ID, UserID: c.UserID, Role: c.Role}), nil
	case ChangeMemberRole:
		cur, ok := o.Members[c.UserID]
		if !ok {
			return Decision{}, notFoundf("member")
		}
		if _, err := ParseRole(string(c.Role)); err != nil {
			return Decision{}, err
		}
		if cur == c.Role {
			return Decision{}, nil
		}
		if err := o.ownersOnly(cur == RoleOwner || c.Role == RoleOwner, m); err != nil {
			return Decision{}, err
		}
		if cur == RoleOwner && o.owners() == 1 {
			return Decision{}, conflictf("the last owner of an organisation cannot be demoted")
		}
		return decided(MemberRoleChanged{OrgID: o.ID, UserID: c.UserID, Role: c.Role}), nil
	case RemoveMember:
		cur, ok := o.Members[c.UserID]
		if !ok {
			return Decision{}, notFoundf("member")
		}
		if err := o.ownersOnly(cur == RoleOwner, m); err != nil {
			return Decision{}, err
		}
		if cur == RoleOwner && o.owners() == 1 {
			return Decision{}, conflictf("the last owner of an organisation cannot be removed")
		}
		return decided(MemberRemoved{OrgID: o.ID, UserID: c.UserID}), nil
	}
	return Decision{}, invalidf("command %T is not an organisation command", cmd)
}

// OrganisationCommand is a command of the organisation aggregate.
type OrganisationCommand interface{ organisationCommand() }

func (CreateOrganisation) organisationCommand() {}
func (AddMember) organisationCommand()          {}
func (ChangeMemberRole) organisationCommand()   {}
func (RemoveMember) organisationCommand()       {}
