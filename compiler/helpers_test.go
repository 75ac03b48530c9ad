package compiler

import (
	"testing"

	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/stretchr/testify/require"
)

// Builders for readable snapshots in tests.

func plain(name, value string) domain.Variable { return domain.Variable{Name: name, Value: value} }

func secret(name, dataKey string) domain.Variable {
	return domain.Variable{Name: name, Secret: &domain.SealedValue{DataKeyID: dataKey, Ciphertext: []byte("sealed:" + name)}}
}

func web(port int) domain.Process {
	return domain.Process{Name: "web", Command: []string{"./serve"}, Port: port, Replicas: 2,
		HealthCheck: &domain.HealthCheck{Path: "/healthz", Port: port, PeriodSeconds: 10}}
}

func worker() domain.Process {
	return domain.Process{Name: "worker", Command: []string{"./work", "--queue", "default"}, Replicas: 1}
}

// release returns release 1 of a service with a web process on 8080 and the
// given frozen variables.
func release(name string, vars ...domain.Variable) *Release {
	return &Release{
		ID: "rel_" + name + "_1", Number: 1,
		Image:     "registry.example.com/" + name + "@sha256:" + name,
		Processes: []domain.Process{web(8080)},
		Variables: vars,
	}
}

// deployed returns a live service running rel, with live variables.
func deployed(name string, rel *Release, live ...domain.Variable) Service {
	return Service{ID: "svc_" + name, Name: name, Release: rel, Variables: live}
}

// notDeployed returns a live service with no release in this environment.
func notDeployed(name string, live ...domain.Variable) Service {
	return Service{ID: "svc_" + name, Name: name, Variables: live}
}

func deleted(name string, live ...domain.Variable) Service {
	return Service{ID: "svc_" + name + "_old", Name: name, Deleted: true, Release: release(name), Variables: live}
}

func snapshot(services ...Service) Snapshot {
	return Snapshot{
		OrgID: "org_1", OrgName: "acme",
		ProjectID: "prj_1", ProjectName: "shop",
		EnvironmentID: "env_1", EnvironmentName: "production",
		ClusterID: "cls_1",
		Services:  services,
	}
}

// service finds a service of the document by name.
func service(t *testing.T, d desiredstate.Document, name string) desiredstate.Service {
	t.Helper()
	for _, s := range d.Services {
		if s.Name == name {
			return s
		}
	}
	require.Failf(t, "service not in document", "%s", name)
	return desiredstate.Service{}
}

func canonical(t testing.TB, d desiredstate.Document) []byte {
	t.Helper()
	b, err := d.Canonical()
	require.NoError(t, err)
	return b
}

func hash(t testing.TB, d desiredstate.Document) string {
	t.Helper()
	h, err := d.Hash()
	require.NoError(t, err)
	return h
}

// requireWellFormed checks what every compiled document must satisfy: it
// has a canonical form, is already in canonical shape (decoding its encoding
// gives it back), and held services carry nothing to run.
func requireWellFormed(t testing.TB, d desiredstate.Document) {
	t.Helper()
	b := canonical(t, d)
	back, err := desiredstate.Decode(b)
	require.NoError(t, err)
	require.Equal(t, d, back, "a compiled document must already be canonical")
	for _, s := range d.Services {
		if s.Held {
			require.NotEmpty(t, s.HeldReason)
			require.Equal(t, desiredstate.Service{ID: s.ID, Name: s.Name, Held: true, HeldReason: s.HeldReason}, s,
				"a held service carries only its id, name and reason")
		}
	}
}
