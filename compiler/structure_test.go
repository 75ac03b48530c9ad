package compiler

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/stretchr/testify/require"
)

func TestEnvironmentBlock(t *testing.T) {
	d := Compile(snapshot())
	require.Equal(t, desiredstate.SchemaVersion, d.SchemaVersion)
	require.Equal(t, desiredstate.Environment{
		OrgID: "org_1", Org: "acme", ProjectID: "prj_1", Project: "shop",
		ID: "env_1", Name: "production", ClusterID: "cls_1",
		Namespace: "acme-shop-production",
	}, d.Environment)
	require.NotNil(t, d.Services, "an empty environment still lists its services: none")
	require.Empty(t, d.Services)
	requireWellFormed(t, d)
}

func TestOnlyLiveDeployedServicesAreCompiled(t *testing.T) {
	d := Compile(snapshot(
		deployed("web", release("web")),
		deleted("old"),
		notDeployed("draft"),
		deployed("api", release("api")),
		deleted("api"), // an older, deleted "api" next to the live one
	))
	requireWellFormed(t, d)
	var names []string
	for _, s := range d.Services {
		names = append(names, s.Name)
		require.False(t, s.Held, s.HeldReason)
	}
	require.Equal(t, []string{"api", "web"}, names)
	require.Equal(t, "svc_api", d.Services[0].ID)
}

func TestServiceConversion(t *testing.T) {
	rel := &Release{
		ID: "rel_9", Number: 9, Image: "registry.example.com/api@sha256:abc",
		Processes: []domain.Process{worker(), {Name: "cron", Command: []string{}, Replicas: 0}, web(3000)},
	}
	svc := deployed("api", rel)
	svc.Domains = []string{"www.example.com", "api.example.com", "", "www.example.com"}
	d := Compile(snapshot(svc))
	requireWellFormed(t, d)
	require.Equal(t, desiredstate.Service{
		ID: "svc_api", Name: "api",
		Release: &desiredstate.Release{ID: "rel_9", Number: 9, Image: "registry.example.com/api@sha256:abc"},
		Processes: []desiredstate.Process{
			{Name: "cron", Replicas: 0},
			{Name: "web", Command: []string{"./serve"}, Port: 3000, Replicas: 2,
				HealthCheck: &desiredstate.HealthCheck{Path: "/healthz", Port: 3000, PeriodSeconds: 10}},
			{Name: "worker", Command: []string{"./work", "--queue", "default"}, Replicas: 1},
		},
		Domains: []string{"api.example.com", "www.example.com"},
	}, d.Services[0])
}

func TestHeldServiceCarriesOnlyItsReason(t *testing.T) {
	svc := deployed("api", release("api", secret("KEY", "dk_old"), plain("A", "1")))
	svc.Domains = []string{"api.example.com"}
	s := snapshot(svc, deployed("web", release("web")))
	s.Unreadable = map[string]bool{"dk_old": true}
	d := Compile(s)
	requireWellFormed(t, d)
	require.Equal(t, desiredstate.Service{
		ID: "svc_api", Name: "api", Held: true,
		HeldReason: "secret KEY cannot be unsealed with the current master key",
	}, d.Services[0])
	require.False(t, d.Services[1].Held, "one held service does not hold the others")
}

func TestReleaseShapeHolds(t *testing.T) {
	tests := map[string]struct {
		procs []domain.Process
		held  string
	}{
		"duplicate process": {[]domain.Process{web(80), worker(), web(81)}, "release 1 has more than one process named web"},
		"unnamed process":   {[]domain.Process{web(80), {Replicas: 1}}, "release 1 has a process without a name"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rel := release("api")
			rel.Processes = tt.procs
			d := Compile(snapshot(deployed("api", rel)))
			requireWellFormed(t, d)
			require.Equal(t, tt.held, d.Services[0].HeldReason)
		})
	}
	rel := release("api", plain("A", "1"), domain.Variable{Value: "x"})
	d := Compile(snapshot(deployed("api", rel)))
	require.Equal(t, "release 1 has a variable without a name", d.Services[0].HeldReason)
}

func TestDuplicateLiveNamesCollapseIntoOneHeldService(t *testing.T) {
	a := deployed("api", release("api"))
	b := deployed("api", release("api"))
	b.ID = "svc_api_2"
	c := notDeployed("db")
	c2 := notDeployed("db")
	c2.ID = "svc_db_2"
	d := Compile(snapshot(b, a, c, c2))
	requireWellFormed(t, d)
	require.Equal(t, []desiredstate.Service{{
		ID: "svc_api", Name: "api", Held: true,
		HeldReason: `service name "api" is used by more than one service`,
	}}, d.Services)

	// A live, deployed service that shares its name with a live service that
	// is not deployed is just as ambiguous.
	d = Compile(snapshot(a, notDeployed("api")))
	require.True(t, d.Services[0].Held)
}

func TestCompileSharesNoMemoryWithSnapshot(t *testing.T) {
	svc := deployed("api", release("api", secret("KEY", "dk_1"), plain("A", "1")))
	svc.Domains = []string{"api.example.com"}
	s := snapshot(svc)
	d := Compile(s)
	want := canonical(t, d)

	rel := s.Services[0].Release
	rel.Processes[0].Command[0] = "changed"
	rel.Processes[0].HealthCheck.Port = 1
	rel.Variables[0].Secret.Ciphertext[0] = 'X'
	rel.ID = "changed"
	s.Services[0].Domains[0] = "changed.example.com"
	require.Equal(t, string(want), string(canonical(t, d)))
}

func TestCompileDoesNotReorderInput(t *testing.T) {
	s := snapshot(deployed("b", release("b", plain("Z", "1"), plain("A", "2"))), deployed("a", release("a")))
	s.Services[0].Domains = []string{"z.example.com", "a.example.com"}
	Compile(s)
	require.Equal(t, "b", s.Services[0].Name)
	require.Equal(t, "Z", s.Services[0].Release.Variables[0].Name)
	require.Equal(t, "z.example.com", s.Services[0].Domains[0])
}
