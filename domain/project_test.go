package domain_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

const (
	orgID     = "00000000-0000-4000-8000-000000000001"
	projectID = "00000000-0000-4000-8000-000000000002"
	clusterID = "00000000-0000-4000-8000-000000000003"
	stagingID = "00000000-0000-4000-8000-000000000010"
	prodID    = "00000000-0000-4000-8000-000000000011"
	apiID     = "00000000-0000-4000-8000-000000000020"
	webID     = "00000000-0000-4000-8000-000000000021"
	rel1      = "00000000-0000-4000-8000-000000000030"
	dep1      = "00000000-0000-4000-8000-000000000031"
	alice     = "00000000-0000-4000-8000-0000000000a1"
	bob       = "00000000-0000-4000-8000-0000000000b0"
	digest    = "registry.example.com/api@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func meta(person, cmd string) domain.Meta {
	return domain.Meta{Actor: domain.Actor{Kind: domain.ActorUser, ID: person, Name: person}, Person: person, CommandID: cmd, Now: now}
}

// given folds events into a fresh project, as a command handler does after
// reading the stream.
func given(events ...domain.Event) *domain.Project {
	p := domain.NewProject()
	for _, e := range events {
		p.Apply(e)
	}
	return p
}

func decideAll(t *testing.T, p *domain.Project, m domain.Meta, cmds ...domain.ProjectCommand) []domain.Event {
	t.Helper()
	var all []domain.Event
	for _, c := range cmds {
		d, err := p.Decide(c, m)
		require.NoError(t, err, "%T", c)
		for _, e := range d.Events {
			p.Apply(e)
		}
		all = append(all, d.Events...)
	}
	return all
}

var web = []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}

func baseProject(t *testing.T) *domain.Project {
	p := domain.NewProject()
	decideAll(t, p, meta(alice, "c0"),
		domain.CreateProject{ProjectID: projectID, OrgID: orgID, Name: "shop"},
		domain.CreateEnvironment{EnvironmentID: stagingID, Name: "staging", ClusterID: clusterID},
		domain.CreateEnvironment{EnvironmentID: prodID, Name: "production", ClusterID: clusterID, Protected: true},
		domain.CreateService{ServiceID: apiID, Name: "api", Source: domain.Source{Image: "api:1"}, Processes: web},
		domain.CreateService{ServiceID: webID, Name: "web", Source: domain.Source{Image: "web:1"}, Processes: web},
	)
	return p
}

func TestProjectCommandsRejectBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cmd  domain.ProjectCommand
		want error
	}{
		{"project name not DNS-safe", domain.CreateProject{ProjectID: projectID, OrgID: orgID, Name: "Shop_1"}, domain.ErrConflict},
		{"environment name with dot", domain.CreateEnvironment{EnvironmentID: "00000000-0000-4000-8000-0000000000ee", Name: "a.b", ClusterID: clusterID}, domain.ErrInvalid},
		{"duplicate environment name", domain.CreateEnvironment{EnvironmentID: "00000000-0000-4000-8000-0000000000ee", Name: "staging", ClusterID: clusterID}, domain.ErrConflict},
		{"duplicate service name", domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "api", Source: domain.Source{Image: "x"}, Processes: web}, domain.ErrConflict},
		{"service without source", domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "db", Processes: web}, domain.ErrInvalid},
		{"service with both sources", domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "db", Source: domain.Source{Image: "x", GitURL: "https://g", GitBranch: "main"}, Processes: web}, domain.ErrInvalid},
		{"service without processes", domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "db", Source: domain.Source{Image: "x"}}, domain.ErrInvalid},
		{"process port out of range", domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "db", Source: domain.Source{Image: "x"}, Processes: []domain.Process{{Name: "web", Port: 70000}}}, domain.ErrInvalid},
		{"deploy a tag, not a digest", domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: "api:latest"}, domain.ErrInvalid},
		{"deploy to unknown environment", domain.Deploy{EnvironmentID: "00000000-0000-4000-8000-0000000000ff", ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest}, domain.ErrNotFound},
		{"variable name with dash", domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "A-B", Value: "x"}}}, domain.ErrInvalid},
		{"malformed reference", domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "URL", Value: "${{ api PORT }}"}}}, domain.ErrInvalid},
		{"unclosed reference", domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "URL", Value: "${{ api.PORT"}}}, domain.ErrInvalid},
		{"bad domain", domain.AddDomain{EnvironmentID: stagingID, ServiceID: apiID, Host: "-bad-.example.com"}, domain.ErrInvalid},
		{"unset a variable that is not set", domain.UnsetVariables{EnvironmentID: stagingID, Names: []string{"NOPE"}}, domain.ErrNotFound},
		{"scale an unknown process", domain.Scale{EnvironmentID: stagingID, ServiceID: apiID, Process: "worker", Replicas: 3}, domain.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := baseProject(t)
			_, err := p.Decide(tt.cmd, meta(alice, "c1"))
			require.Error(t, err)
			if tt.name == "project name not DNS-safe" {
				// The project exists already; a fresh one must reject the name itself.
				_, err = domain.NewProject().Decide(tt.cmd, meta(alice, "c1"))
				require.ErrorIs(t, err, domain.ErrInvalid)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

func TestDeployCreatesAnImmutableReleaseWithFrozenConfiguration(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	evs := decideAll(t, p, meta(alice, "c1"),
		domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "LOG", Value: "info"}}},
		domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "PORT", Value: "8080"}, {Name: "LOG", Value: "debug"}}},
		domain.Scale{EnvironmentID: stagingID, ServiceID: apiID, Process: "web", Replicas: 3},
		domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest},
	)
	rel := evs[len(evs)-2].(domain.ReleaseCreated)
	require.Equal(t, 1, rel.Number)
	require.Equal(t, "deploy", rel.Reason)
	require.Equal(t, []domain.Variable{{Name: "LOG", Value: "debug"}, {Name: "PORT", Value: "8080"}}, rel.Variables, "service variables win over environment-wide ones")
	require.Equal(t, 3, rel.Processes[0].Replicas, "the environment's replica count is frozen")
	require.Equal(t, domain.DeploymentRequested{DeploymentID: dep1, ReleaseID: rel1, EnvironmentID: stagingID, ServiceID: apiID, Image: digest}, evs[len(evs)-1])

	// Changing a variable later makes a new release; the first stays as it was.
	evs = decideAll(t, p, meta(alice, "c2"),
		domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "PORT", Value: "9090"}}})
	require.Len(t, evs, 3)
	rel2 := evs[1].(domain.ReleaseCreated)
	require.Equal(t, 2, rel2.Number)
	require.Equal(t, digest, rel2.Image, "a configuration release keeps the running image")
	require.Equal(t, "variables", rel2.Reason)
	require.Equal(t, 1, rel2.Base, "the release records its variables against release 1")
	require.Equal(t, []domain.Variable{{Name: "PORT", Value: "9090"}}, rel2.Variables, "only the variable that changed")
	require.Empty(t, rel2.Removed)
	require.Equal(t, []domain.Variable{{Name: "LOG", Value: "debug"}, {Name: "PORT", Value: "9090"}}, domain.ReleaseVariables(rel.Variables, rel2))
	require.Equal(t, "8080", rel.Variables[1].Value, "the first release is unchanged")
	require.Equal(t, domain.DeriveID("c2", "release", stagingID, apiID), rel2.ReleaseID, "ids derive from the command")

	// The web service was never deployed here: the variable change makes no release for it.
	evs = decideAll(t, p, meta(alice, "c3"),
		domain.SetVariables{EnvironmentID: stagingID, ServiceID: webID, Variables: []domain.Variable{{Name: "X", Value: "1"}}})
	require.Len(t, evs, 1)
}

func TestDeletedServiceCannotBeDeployed(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	decideAll(t, p, meta(alice, "c1"),
		domain.AddDomain{EnvironmentID: stagingID, ServiceID: apiID, Host: "api.example.com"},
	)
	d, err := p.Decide(domain.DeleteService{ServiceID: apiID}, meta(alice, "c2"))
	require.NoError(t, err)
	require.Equal(t, []domain.NameClaim{{Scope: "domain.host", Name: "api.example.com"}}, d.Releases, "its domains are given back")
	require.IsType(t, domain.DomainRemoved{}, d.Events[0])
	for _, e := range d.Events {
		p.Apply(e)
	}
	_, err = p.Decide(domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest}, meta(alice, "c3"))
	require.ErrorIs(t, err, domain.ErrConflict)
	require.ErrorContains(t, err, "was deleted")
	// Its name is free again.
	decideAll(t, p, meta(alice, "c4"),
		domain.CreateService{ServiceID: "00000000-0000-4000-8000-0000000000ef", Name: "api", Source: domain.Source{Image: "api:2"}, Processes: web})
}

func TestProtectedEnvironmentNeedsSomeoneElsesApproval(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	evs := decideAll(t, p, meta(alice, "c1"),
		domain.Deploy{EnvironmentID: prodID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest})
	require.Len(t, evs, 1, "nothing happens but the change set")
	opened := evs[0].(domain.ChangeSetOpened)
	require.Equal(t, alice, opened.OpenedBy)
	require.Empty(t, p.ReleaseCount[prodID])

	_, err := p.Decide(domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID, Version: 1}, meta(alice, "c2"))
	require.ErrorIs(t, err, domain.ErrForbidden, "nobody approves their own change")
	_, err = p.Decide(domain.RejectChangeSet{ChangeSetID: opened.ChangeSetID, Reason: "changed my mind"}, meta(alice, "c2r"))
	require.ErrorIs(t, err, domain.ErrForbidden, "nor rejects it: a decision, either way, is someone else's")

	// A second change of the same person joins the open change set: an
	// approval of the version before is refused.
	evs = decideAll(t, p, meta(alice, "c2b"), domain.Scale{EnvironmentID: prodID, ServiceID: apiID, Process: "web", Replicas: 3})
	changed := evs[0].(domain.ChangeSetChanged)
	require.Equal(t, 2, changed.Version)
	require.Len(t, changed.Changes, 2)
	_, err = p.Decide(domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID, Version: 1}, meta(bob, "c3"))
	require.ErrorIs(t, err, domain.ErrConflict, "the change set changed since version 1")
	_, err = p.Decide(domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID}, meta(bob, "c3"))
	require.ErrorIs(t, err, domain.ErrInvalid, "an approval names a version")

	evs = decideAll(t, p, meta(bob, "c3"), domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID, Version: 2})
	require.Equal(t, []string{"changeset.approved", "release.created", "deployment.requested", "service.scaled", "release.created", "deployment.requested"}, types(evs))
	require.Equal(t, 2, p.ReleaseCount[prodID][apiID])

	_, err = p.Decide(domain.ApproveChangeSet{ChangeSetID: opened.ChangeSetID, Version: 2}, meta(bob, "c4"))
	require.ErrorIs(t, err, domain.ErrNotFound, "a change set applies once")

	// An invalid change never opens a change set.
	_, err = p.Decide(domain.Deploy{EnvironmentID: prodID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: "api:latest"}, meta(alice, "c5"))
	require.ErrorIs(t, err, domain.ErrInvalid)
}

func TestRollbackDeploysTheEarlierReleaseAgain(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	decideAll(t, p, meta(alice, "c1"),
		domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest},
		domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "A", Value: "1"}}},
	)
	latest := p.Current[stagingID][apiID].DeploymentID
	dep := "00000000-0000-4000-8000-0000000000d9"
	ref := domain.ReleaseRef{EnvironmentID: stagingID, ServiceID: apiID, Number: 1, Image: digest}
	_, err := p.Decide(domain.Rollback{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep,
		Release: domain.ReleaseRef{EnvironmentID: prodID, ServiceID: apiID, Number: 1, Image: digest}}, meta(alice, "c2"))
	require.ErrorIs(t, err, domain.ErrNotFound, "a release of another environment is not this service's")
	evs := decideAll(t, p, meta(alice, "c2"), domain.Rollback{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep, Release: ref})
	require.Equal(t, domain.DeploymentRequested{DeploymentID: dep, ReleaseID: rel1, EnvironmentID: stagingID, ServiceID: apiID,
		Rollback: true, Image: digest, Supersedes: latest}, evs[0])
	require.Equal(t, "service.rollback", domain.Audit(evs[0]).Action)
	require.Equal(t, "service.deploys.paused", evs[1].EventType())
	require.True(t, p.Paused[stagingID][apiID])

	// Automatic deploys wait, visible, until someone resumes them, which
	// deploys the one that waited; people still deploy.
	auto := domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: "00000000-0000-4000-8000-0000000000da",
		DeploymentID: "00000000-0000-4000-8000-0000000000db", Image: digest, Automatic: true, BuildID: "00000000-0000-4000-8000-0000000000dc"}
	evs = decideAll(t, p, meta(alice, "c3"), auto)
	require.Equal(t, []domain.Event{domain.DeployWaiting{EnvironmentID: stagingID, ServiceID: apiID, Image: digest, BuildID: auto.BuildID}}, evs)
	require.Equal(t, dep, p.Current[stagingID][apiID].DeploymentID, "nothing deployed while paused")
	evs = decideAll(t, p, meta(alice, "c4"), domain.ResumeDeploys{EnvironmentID: stagingID, ServiceID: apiID})
	require.Equal(t, []string{"service.deploys.resumed", "release.created", "deployment.requested"}, types(evs))
	require.Equal(t, dep, evs[2].(domain.DeploymentRequested).Supersedes, "the waiting deploy supersedes the rollback")
	require.Empty(t, p.Waiting[stagingID][apiID])
	evs = decideAll(t, p, meta(alice, "c5"), auto)
	require.Equal(t, []string{"release.created", "deployment.requested"}, types(evs), "not paused any more: deploys at once")
	// The configuration change after the rollback re-releases the rolled-back image.
	require.Equal(t, digest, p.Current[stagingID][apiID].Image)
}

func TestChangeSetExpires(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	m := meta(alice, "c1")
	d, err := p.Decide(domain.Scale{EnvironmentID: prodID, ServiceID: apiID, Process: "web", Replicas: 2}, m)
	require.NoError(t, err)
	p.ApplyAt(d.Events[0], now)
	id := d.Events[0].(domain.ChangeSetOpened).ChangeSetID
	early := meta("reactions", "c2")
	early.Now = now.Add(71 * time.Hour)
	d, err = p.Decide(domain.ExpireChangeSet{ChangeSetID: id, TTL: 72 * time.Hour}, early)
	require.NoError(t, err)
	require.Empty(t, d.Events, "not before its time")
	late := meta("reactions", "c3")
	late.Now = now.Add(72 * time.Hour)
	evs := decideAll(t, p, late, domain.ExpireChangeSet{ChangeSetID: id, TTL: 72 * time.Hour})
	require.Equal(t, []string{"changeset.expired"}, types(evs))
	_, err = p.Decide(domain.ApproveChangeSet{ChangeSetID: id, Version: 1}, meta(bob, "c4"))
	require.ErrorIs(t, err, domain.ErrNotFound, "an expired change set cannot be approved")
}

func TestNameClaimsOfCreation(t *testing.T) {
	t.Parallel()
	d, err := domain.NewProject().Decide(domain.CreateProject{ProjectID: projectID, OrgID: orgID, Name: "shop"}, meta(alice, "c"))
	require.NoError(t, err)
	require.Equal(t, []domain.NameClaim{{Scope: "org:" + orgID + ":project", Name: "shop"}}, d.Claims)

	p := baseProject(t)
	d, err = p.Decide(domain.AddDomain{EnvironmentID: stagingID, ServiceID: apiID, Host: "shop.example.com"}, meta(alice, "c"))
	require.NoError(t, err)
	require.Equal(t, []domain.NameClaim{{Scope: "domain.host", Name: "shop.example.com"}}, d.Claims)
}

func TestDecideNeedsMeta(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	_, err := p.Decide(domain.DeleteService{ServiceID: apiID}, domain.Meta{})
	require.ErrorIs(t, err, domain.ErrInvalid)
}

func types(evs []domain.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.EventType()
	}
	return out
}

func TestOrganisationKeepsAnOwner(t *testing.T) {
	t.Parallel()
	o := domain.NewOrganisation()
	d, err := o.Decide(domain.CreateOrganisation{OrgID: orgID, Name: "acme", Owner: alice}, meta(alice, "c"))
	require.NoError(t, err)
	require.Equal(t, []domain.NameClaim{{Scope: "organisation.name", Name: "acme"}}, d.Claims)
	for _, e := range d.Events {
		o.Apply(e)
	}
	require.Equal(t, domain.RoleOwner, o.Members[alice])
	_, err = o.Decide(domain.RemoveMember{UserID: alice}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrConflict)
	_, err = o.Decide(domain.ChangeMemberRole{UserID: alice, Role: domain.RoleAdmin}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrConflict)
	_, err = o.Decide(domain.AddMember{UserID: bob, Role: "boss"}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrInvalid)
	d, err = o.Decide(domain.AddMember{UserID: bob, Role: domain.RoleOwner}, meta(alice, "c"))
	require.NoError(t, err)
	o.Apply(d.Events[0])
	_, err = o.Decide(domain.RemoveMember{UserID: alice}, meta(alice, "c"))
	require.NoError(t, err, "with a second owner the first may leave")
}

func TestJoinTokensAndServers(t *testing.T) {
	t.Parallel()
	c := domain.NewCluster()
	tok := "00000000-0000-4000-8000-0000000000c1"
	d, err := c.Decide(domain.CreateCluster{ClusterID: clusterID, OrgID: orgID, Name: "eu-1",
		JoinToken: domain.IssueJoinToken{TokenID: tok, TokenHash: "h", ExpiresAt: now.Add(time.Hour)}}, meta(alice, "c"))
	require.NoError(t, err)
	for _, e := range d.Events {
		c.Apply(e)
	}
	srv := domain.RegisterServer{ServerID: "00000000-0000-4000-8000-0000000000c2", Name: "agent-0", CredentialHash: "ch", JoinTokenID: tok}
	late := meta("agent", "c")
	late.Now = now.Add(2 * time.Hour)
	_, err = c.Decide(srv, late)
	require.ErrorIs(t, err, domain.ErrForbidden, "an expired join token is refused")
	d, err = c.Decide(domain.RevokeJoinToken{TokenID: tok}, meta(alice, "c"))
	require.NoError(t, err)
	c.Apply(d.Events[0])
	_, err = c.Decide(srv, meta("agent", "c"))
	require.ErrorIs(t, err, domain.ErrForbidden, "a revoked join token is refused")
}

func TestUserTokens(t *testing.T) {
	t.Parallel()
	u := domain.NewUser()
	d, err := u.Decide(domain.RegisterUser{UserID: alice, Email: " Alice@Example.com ", PasswordHash: "x"}, meta(alice, "c"))
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", d.Events[0].(domain.UserRegistered).Email)
	u.Apply(d.Events[0])
	tok := domain.CreateToken{TokenID: "00000000-0000-4000-8000-0000000000d1", Name: "ci", Scopes: []domain.Scope{"projects:read"}, TokenHash: "h"}
	_, err = u.Decide(domain.CreateToken{TokenID: tok.TokenID, Name: "ci", Scopes: []domain.Scope{"instance:admin"}, TokenHash: "h"}, meta(alice, "c"))
	require.True(t, errors.Is(err, domain.ErrForbidden), "only the instance administrator gets instance:admin")
	_, err = u.Decide(domain.CreateToken{TokenID: tok.TokenID, Name: "ci", Scopes: []domain.Scope{"root"}, TokenHash: "h"}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrInvalid)
	_, err = u.Decide(tok, meta(alice, "c"))
	require.NoError(t, err)
}

func TestPrincipalAllow(t *testing.T) {
	t.Parallel()
	viewer := domain.Principal{UserID: alice, Roles: map[string]domain.Role{orgID: domain.RoleViewer}}
	require.NoError(t, viewer.Allow(orgID, domain.ScopeProjectsRead))
	require.ErrorIs(t, viewer.Allow(orgID, domain.ScopeProjectsWrite), domain.ErrForbidden)
	require.ErrorIs(t, viewer.Allow("00000000-0000-4000-8000-0000000000ff", domain.ScopeProjectsRead), domain.ErrNotFound, "other organisations do not exist for you")
	tokenOwner := domain.Principal{UserID: alice, Roles: map[string]domain.Role{orgID: domain.RoleOwner}, TokenScopes: []domain.Scope{domain.ScopeProjectsRead}}
	err := tokenOwner.Allow(orgID, domain.ScopeDeploymentsWrite)
	require.ErrorIs(t, err, domain.ErrForbidden)
	require.ErrorContains(t, err, "deployments:write", "a denial names the missing scope")
	require.ErrorIs(t, domain.Principal{UserID: alice}.Allow("", domain.ScopeInstanceAdmin), domain.ErrForbidden)
}

func TestNameRules(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"a": true, "api": true, "api-2": true, "a1": true, strings.Repeat("a", 63): true,
		"": false, "1api": false, "api-": false, "-api": false, "Api": false, "a_b": false, "a.b": false, strings.Repeat("a", 64): false,
	} {
		require.Equal(t, ok, domain.ValidateName("service", name) == nil, "%q", name)
	}
	for name, ok := range map[string]bool{
		"A": true, "_x": true, "DATABASE_URL": true, "a1": true, strings.Repeat("A", 255): true,
		"": false, "1A": false, "A-B": false, "A.B": false, "A B": false, strings.Repeat("A", 256): false,
	} {
		require.Equal(t, ok, domain.ValidateVariableName(name) == nil, "%q", name)
	}
}

// Four-eyes without exceptions: in a protected environment, deleting a
// service that runs there, deleting the environment or its project, turning
// protection off or moving it to another cluster each wait for someone
// else's approval; turning protection on does not.
func TestFourEyesCoversDeletesAndProtection(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	opened := func(evs []domain.Event) domain.ChangeSetOpened {
		t.Helper()
		require.Len(t, evs, 1, "nothing happens but the change set: %v", types(evs))
		return evs[0].(domain.ChangeSetOpened)
	}
	approve := func(cs domain.ChangeSetOpened, cmd string) []domain.Event {
		t.Helper()
		_, err := p.Decide(domain.ApproveChangeSet{ChangeSetID: cs.ChangeSetID, Version: 1}, meta(alice, cmd))
		require.ErrorIs(t, err, domain.ErrForbidden, "the requester cannot approve")
		return decideAll(t, p, meta(bob, cmd), domain.ApproveChangeSet{ChangeSetID: cs.ChangeSetID, Version: 1})
	}

	// The service runs in production once its deploy there is approved.
	approve(opened(decideAll(t, p, meta(alice, "d"), domain.Deploy{EnvironmentID: prodID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest})), "d2")
	cs := opened(decideAll(t, p, meta(alice, "c1"), domain.DeleteService{ServiceID: apiID}))
	require.Equal(t, prodID, cs.EnvironmentID)
	require.False(t, p.Services[apiID].Deleted)
	require.Contains(t, types(approve(cs, "c2")), "service.deleted")
	require.True(t, p.Services[apiID].Deleted)

	// A service that does not run in a protected environment goes at once.
	evs := decideAll(t, p, meta(alice, "c3"), domain.DeleteService{ServiceID: webID})
	require.Contains(t, types(evs), "service.deleted")

	off := domain.UpdateEnvironment{EnvironmentID: prodID, ClusterID: clusterID, Protected: false}
	cs = opened(decideAll(t, p, meta(alice, "c4"), off))
	require.True(t, p.Environments[prodID].Protected)
	require.Equal(t, []string{"changeset.approved", "environment.updated"}, types(approve(cs, "c5")))
	require.False(t, p.Environments[prodID].Protected)
	evs = decideAll(t, p, meta(alice, "c6"), domain.UpdateEnvironment{EnvironmentID: prodID, ClusterID: clusterID, Protected: true})
	require.Equal(t, []string{"environment.updated"}, types(evs), "protecting needs no approval")

	cs = opened(decideAll(t, p, meta(alice, "c7"), domain.DeleteProject{}))
	require.False(t, p.Deleted)
	d, err := p.Decide(domain.DeleteEnvironment{EnvironmentID: prodID}, meta(alice, "c8"))
	require.NoError(t, err)
	require.Equal(t, []string{"changeset.changed"}, types(d.Events), "a second change of the same person joins the open change set")
	for _, e := range d.Events {
		p.Apply(e)
	}
	_, err = p.Decide(domain.ApproveChangeSet{ChangeSetID: cs.ChangeSetID, Version: 2}, meta(bob, "c9"))
	require.NoError(t, err, "deleting the project, then its environment, applies in order")
}

func TestOnlyOwnersTouchOwners(t *testing.T) {
	t.Parallel()
	o := domain.NewOrganisation()
	carol := "00000000-0000-4000-8000-0000000000c0"
	for _, cmd := range []domain.OrganisationCommand{
		domain.CreateOrganisation{OrgID: orgID, Name: "acme", Owner: alice},
		domain.AddMember{UserID: bob, Role: domain.RoleAdmin},
	} {
		d, err := o.Decide(cmd, meta(alice, "c"))
		require.NoError(t, err)
		for _, e := range d.Events {
			o.Apply(e)
		}
	}
	for _, cmd := range []domain.OrganisationCommand{
		domain.ChangeMemberRole{UserID: alice, Role: domain.RoleMember},
		domain.RemoveMember{UserID: alice},
		domain.AddMember{UserID: carol, Role: domain.RoleOwner},
		domain.ChangeMemberRole{UserID: bob, Role: domain.RoleOwner},
	} {
		_, err := o.Decide(cmd, meta(bob, "c"))
		require.ErrorIs(t, err, domain.ErrForbidden, "an Admin: %#v", cmd)
	}
	_, err := o.Decide(domain.AddMember{UserID: carol, Role: domain.RoleAdmin}, meta(bob, "c"))
	require.NoError(t, err, "an Admin still adds Admins")
	_, err = o.Decide(domain.ChangeMemberRole{UserID: bob, Role: domain.RoleOwner}, meta(alice, "c"))
	require.NoError(t, err, "an Owner makes an Owner")
	_, err = o.Decide(domain.RemoveMember{UserID: alice}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrConflict, "the last Owner cannot leave")
}

// A reference that cannot resolve is refused when it is set (found from
// outside: a loop a -> b -> a, or a reference to a missing variable, was
// accepted and the services silently held).
func TestReferencesAreCheckedWhenSet(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	set := func(svc string, name, value string) error {
		d, err := p.Decide(domain.SetVariables{EnvironmentID: stagingID, ServiceID: svc, Variables: []domain.Variable{{Name: name, Value: value}}}, meta(alice, "c-"+name))
		if err == nil {
			for _, e := range d.Events {
				p.Apply(e)
			}
		}
		return err
	}
	require.ErrorIs(t, set(apiID, "A", "${{ nope.X }}"), domain.ErrInvalid, "no such service")
	require.ErrorContains(t, set(apiID, "A", "${{ web.MISSING }}"), "not set")
	require.NoError(t, set(apiID, "A", "${{ web.HOST }}:${{ web.PORT }}"), "built-ins")
	require.NoError(t, set(webID, "B", "plain"))
	require.NoError(t, set(apiID, "C", "${{ web.B }}"))
	require.ErrorContains(t, set(webID, "B", "${{ api.A }}"), "itself contains references", "a loop is refused")
	require.ErrorContains(t, set(webID, "B", "${{ api.HOST }}"), "referenced by C", "a chain is refused")
	require.ErrorContains(t, set(webID, "D", "${{ api.A }}"), "itself contains references")
	require.ErrorContains(t, set(apiID, "E", "${{ api.E }}"), "itself contains references", "a variable cannot reference itself")
}

// Variables are bounded (found from outside: nothing limited their number or
// size, and each change froze them all again into a release).
func TestVariableLimits(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	big := strings.Repeat("x", domain.MaxVariableValue+1)
	_, err := p.Decide(domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "A", Value: big}}}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrInvalid)
	var many []domain.Variable
	for i := 0; i <= domain.MaxVariablesPerScope; i++ {
		many = append(many, domain.Variable{Name: fmt.Sprintf("V%d", i), Value: "1"})
	}
	_, err = p.Decide(domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: many}, meta(alice, "c"))
	require.ErrorContains(t, err, "at most")
	var heavy []domain.Variable
	for i := 0; i < 9; i++ {
		heavy = append(heavy, domain.Variable{Name: fmt.Sprintf("H%d", i), Value: strings.Repeat("y", domain.MaxVariableValue)})
	}
	_, err = p.Decide(domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: heavy}, meta(alice, "c"))
	require.ErrorContains(t, err, "total at most")
	_, err = p.Decide(domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "N", Value: "a\x00b"}}}, meta(alice, "c"))
	require.ErrorIs(t, err, domain.ErrInvalid, "a NUL never reaches an event")
}

// A release records the variables that differ from the release before it:
// the event of one update holds that update, however many variables the
// service has, and folding the changes gives every release's whole set.
func TestReleasesRecordOnlyChangedVariables(t *testing.T) {
	t.Parallel()
	p := baseProject(t)
	var many []domain.Variable
	for i := 0; i < 500; i++ {
		many = append(many, domain.Variable{Name: fmt.Sprintf("V%03d", i), Value: strings.Repeat("x", 100)})
	}
	evs := decideAll(t, p, meta(alice, "c1"),
		domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "SHARED", Value: "a"}}},
		domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: many},
		domain.Deploy{EnvironmentID: stagingID, ServiceID: apiID, ReleaseID: rel1, DeploymentID: dep1, Image: digest},
	)
	first := evs[len(evs)-2].(domain.ReleaseCreated)
	require.Equal(t, 0, first.Base, "the first release holds its whole set")
	require.Len(t, first.Variables, 501)
	whole := map[int][]domain.Variable{1: first.Variables}

	steps := []struct {
		cmd         domain.ProjectCommand
		set, remove []string
	}{
		{domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "V007", Value: "changed"}}}, []string{"V007"}, nil},
		{domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "V007", Value: "changed"}}}, nil, nil},
		{domain.UnsetVariables{EnvironmentID: stagingID, ServiceID: apiID, Names: []string{"V100", "V200"}}, nil, []string{"V100", "V200"}},
		// An environment-wide change reaches the service's release too.
		{domain.SetVariables{EnvironmentID: stagingID, Variables: []domain.Variable{{Name: "SHARED", Value: "b"}}}, []string{"SHARED"}, nil},
		// A service's own value hides the environment-wide one.
		{domain.SetVariables{EnvironmentID: stagingID, ServiceID: apiID, Variables: []domain.Variable{{Name: "SHARED", Value: "c"}}}, []string{"SHARED"}, nil},
		{domain.Scale{EnvironmentID: stagingID, ServiceID: apiID, Process: "web", Replicas: 2}, nil, nil},
	}
	for i, st := range steps {
		evs := decideAll(t, p, meta(alice, fmt.Sprint("s", i)), st.cmd)
		var rel domain.ReleaseCreated
		for _, e := range evs {
			if r, ok := e.(domain.ReleaseCreated); ok {
				rel = r
			}
		}
		require.Equal(t, i+2, rel.Number, "step %d", i)
		require.Equal(t, rel.Number-1, rel.Base)
		var names []string
		for _, v := range rel.Variables {
			names = append(names, v.Name)
		}
		require.Equal(t, st.set, names, "step %d: the release records only what changed", i)
		require.Equal(t, st.remove, rel.Removed, "step %d", i)
		whole[rel.Number] = domain.ReleaseVariables(whole[rel.Base], rel)
	}
	require.Len(t, whole[4], 499)
	last := whole[len(steps)+1]
	require.Len(t, last, 499)
	require.Contains(t, last, domain.Variable{Name: "SHARED", Value: "c"})
	require.Contains(t, last, domain.Variable{Name: "V007", Value: "changed"})
	require.Equal(t, p.Released[stagingID][apiID]["SHARED"], domain.Variable{Name: "SHARED", Value: "c"}, "the state keeps the latest release's set")
	require.Len(t, p.Released[stagingID][apiID], 499)
}
