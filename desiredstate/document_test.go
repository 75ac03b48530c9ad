package desiredstate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// sample returns a document that uses every field, with every list already in
// canonical order.
func sample() Document {
	return Document{
		SchemaVersion: SchemaVersion,
		Environment: Environment{
			OrgID: "org_1", Org: "acme", ProjectID: "prj_1", Project: "shop",
			ID: "env_1", Name: "production", ClusterID: "cls_1",
			Namespace: Namespace("acme", "shop", "production"),
		},
		Services: []Service{
			{
				ID: "svc_api", Name: "api",
				Release: &Release{ID: "rel_7", Number: 7, Image: "registry.example.com/api@sha256:aaaa"},
				Processes: []Process{
					{Name: "web", Command: []string{"./api", "serve"}, Port: 8080, Replicas: 2,
						HealthCheck: &HealthCheck{Path: "/healthz", Port: 8080, InitialDelaySeconds: 5, PeriodSeconds: 10}},
					{Name: "worker", Command: []string{"./api", "work"}, Replicas: 1},
				},
				Variables: []Variable{
					{Name: "DATABASE_URL", Value: "postgres://db.acme-shop-production.svc.cluster.local:5432/app?a=1&b=<2>"},
					{Name: "DB_PASSWORD", Secret: &Sealed{DataKeyID: "dk_1", Ciphertext: []byte{1, 2, 3}}},
					{Name: "EMPTY"},
				},
				Domains: []string{"api.example.com", "www.example.com"},
			},
			{ID: "svc_db", Name: "db", Held: true, HeldReason: "secret PASSWORD cannot be unsealed with the current master key"},
			{
				ID: "svc_web", Name: "web",
				Release:   &Release{ID: "rel_3", Number: 3, Image: "registry.example.com/web@sha256:bbbb"},
				Processes: []Process{{Name: "web", Port: 3000, Replicas: 0}},
			},
		},
	}
}

// scrambled returns a deep copy of d with every list in a random order.
func scrambled(d Document, r *rand.Rand) Document {
	out := d
	out.Services = make([]Service, len(d.Services))
	for i, s := range d.Services {
		s.Processes = shuffled(s.Processes, r)
		s.Variables = shuffled(s.Variables, r)
		s.Domains = shuffled(s.Domains, r)
		out.Services[i] = s
	}
	out.Services = shuffled(out.Services, r)
	return out
}

func shuffled[T any](in []T, r *rand.Rand) []T {
	if in == nil {
		return nil
	}
	out := append([]T(nil), in...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func mustCanonical(t *testing.T, d Document) []byte {
	t.Helper()
	b, err := d.Canonical()
	require.NoError(t, err)
	return b
}

func mustHash(t *testing.T, d Document) string {
	t.Helper()
	h, err := d.Hash()
	require.NoError(t, err)
	return h
}

func TestCanonicalExactBytes(t *testing.T) {
	d := Document{
		SchemaVersion: 1,
		Environment:   Environment{Org: "acme", Namespace: "acme-shop-dev"},
		Services: []Service{{
			ID: "s1", Name: "api",
			Release:   &Release{ID: "r1", Number: 1, Image: "img@sha256:ab"},
			Processes: []Process{{Name: "web", Command: []string{}, Replicas: 0}},
			Variables: []Variable{{Name: "Q", Value: "a<b&c>d"}, {Name: "K", Secret: &Sealed{DataKeyID: "dk", Ciphertext: []byte("hi")}}},
			Domains:   []string{},
		}},
	}
	// Field order follows the struct, lists are sorted, empty lists are left
	// out, replicas 0 is kept, and <, >, & are not HTML-escaped.
	want := `{"schemaVersion":1,"environment":{"orgId":"","org":"acme","projectId":"","project":"","id":"","name":"","clusterId":"","namespace":"acme-shop-dev"},` +
		`"services":[{"id":"s1","name":"api","release":{"id":"r1","number":1,"image":"img@sha256:ab"},` +
		`"processes":[{"name":"web","replicas":0}],` +
		`"variables":[{"name":"K","secret":{"dataKeyId":"dk","ciphertext":"aGk="}},{"name":"Q","value":"a<b&c>d"}]}]}`
	require.Equal(t, want, string(mustCanonical(t, d)))
}

func TestCanonicalNilServicesIsEmptyArray(t *testing.T) {
	for _, svcs := range [][]Service{nil, {}} {
		b := mustCanonical(t, Document{SchemaVersion: 1, Services: svcs})
		require.Contains(t, string(b), `"services":[]`)
	}
}

func TestCanonicalStableRegardlessOfOrder(t *testing.T) {
	base := sample()
	want := mustCanonical(t, base)
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		d := scrambled(base, r)
		require.Equal(t, string(want), string(mustCanonical(t, d)))
		require.Equal(t, mustHash(t, base), mustHash(t, d))
	}
}

func TestCanonicalDoesNotMutateReceiver(t *testing.T) {
	d := scrambled(sample(), rand.New(rand.NewPCG(3, 4)))
	// Snapshot through JSON, which keeps slice order, before and after.
	before, err := json.Marshal(d)
	require.NoError(t, err)
	_ = mustCanonical(t, d)
	after, err := json.Marshal(d)
	require.NoError(t, err)
	require.Equal(t, string(before), string(after))
}

var hashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func TestHashChangesWhenAnyFieldChanges(t *testing.T) {
	mutations := map[string]func(d *Document){
		"orgId":               func(d *Document) { d.Environment.OrgID = "x" },
		"org":                 func(d *Document) { d.Environment.Org = "x" },
		"projectId":           func(d *Document) { d.Environment.ProjectID = "x" },
		"project":             func(d *Document) { d.Environment.Project = "x" },
		"envId":               func(d *Document) { d.Environment.ID = "x" },
		"envName":             func(d *Document) { d.Environment.Name = "x" },
		"clusterId":           func(d *Document) { d.Environment.ClusterID = "x" },
		"namespace":           func(d *Document) { d.Environment.Namespace = "x" },
		"service id":          func(d *Document) { d.Services[0].ID = "x" },
		"service name":        func(d *Document) { d.Services[0].Name = "x" },
		"held reason":         func(d *Document) { d.Services[1].HeldReason = "x" },
		"hold":                func(d *Document) { d.Services[2] = Service{ID: "svc_web", Name: "web", Held: true, HeldReason: "x"} },
		"release id":          func(d *Document) { d.Services[0].Release.ID = "x" },
		"release number":      func(d *Document) { d.Services[0].Release.Number = 8 },
		"image":               func(d *Document) { d.Services[0].Release.Image = "x" },
		"process name":        func(d *Document) { d.Services[0].Processes[1].Name = "x" },
		"command":             func(d *Document) { d.Services[0].Processes[0].Command[1] = "x" },
		"command dropped":     func(d *Document) { d.Services[0].Processes[0].Command = nil },
		"port":                func(d *Document) { d.Services[0].Processes[0].Port = 1 },
		"replicas":            func(d *Document) { d.Services[0].Processes[0].Replicas = 3 },
		"health path":         func(d *Document) { d.Services[0].Processes[0].HealthCheck.Path = "/x" },
		"health port":         func(d *Document) { d.Services[0].Processes[0].HealthCheck.Port = 1 },
		"health delay":        func(d *Document) { d.Services[0].Processes[0].HealthCheck.InitialDelaySeconds = 1 },
		"health period":       func(d *Document) { d.Services[0].Processes[0].HealthCheck.PeriodSeconds = 1 },
		"health dropped":      func(d *Document) { d.Services[0].Processes[0].HealthCheck = nil },
		"variable name":       func(d *Document) { d.Services[0].Variables[2].Name = "X" },
		"variable value":      func(d *Document) { d.Services[0].Variables[0].Value = "x" },
		"empty value set":     func(d *Document) { d.Services[0].Variables[2].Value = "x" },
		"data key":            func(d *Document) { d.Services[0].Variables[1].Secret.DataKeyID = "x" },
		"ciphertext":          func(d *Document) { d.Services[0].Variables[1].Secret.Ciphertext = []byte{1, 2, 4} },
		"domain":              func(d *Document) { d.Services[0].Domains[0] = "x.example.com" },
		"domain dropped":      func(d *Document) { d.Services[0].Domains = d.Services[0].Domains[:1] },
		"service dropped":     func(d *Document) { d.Services = d.Services[:2] },
		"process dropped":     func(d *Document) { d.Services[0].Processes = d.Services[0].Processes[:1] },
		"variable dropped":    func(d *Document) { d.Services[0].Variables = d.Services[0].Variables[:2] },
		"replicas 0 to 1":     func(d *Document) { d.Services[2].Processes[0].Replicas = 1 },
		"secret becomes text": func(d *Document) { d.Services[0].Variables[1] = Variable{Name: "DB_PASSWORD", Value: "AQID"} },
	}
	base := mustHash(t, sample())
	require.Regexp(t, hashRE, base)
	seen := map[string]string{base: "base"}
	for name, mutate := range mutations {
		d := sample() // fresh: sample shares no memory between calls
		mutate(&d)
		h := mustHash(t, d)
		if other, dup := seen[h]; dup {
			t.Errorf("%s hashes like %s", name, other)
		}
		seen[h] = name
	}
}

func TestValidate(t *testing.T) {
	rel := &Release{ID: "r", Number: 1, Image: "i"}
	svc := func(s Service) Document { return Document{SchemaVersion: 1, Services: []Service{s}} }
	tests := map[string]Document{
		"schema 0":            {},
		"schema 2":            {SchemaVersion: 2},
		"duplicate service":   {SchemaVersion: 1, Services: []Service{{ID: "a", Name: "x", Release: rel}, {ID: "b", Name: "x", Release: rel}}},
		"unnamed service":     svc(Service{ID: "a", Release: rel}),
		"held without reason": svc(Service{Name: "a", Held: true}),
		"held with release":   svc(Service{Name: "a", Held: true, HeldReason: "r", Release: rel}),
		"held with domains":   svc(Service{Name: "a", Held: true, HeldReason: "r", Domains: []string{"a.example.com"}}),
		"reason but not held": svc(Service{Name: "a", HeldReason: "r", Release: rel}),
		"no release":          svc(Service{Name: "a"}),
		"duplicate process":   svc(Service{Name: "a", Release: rel, Processes: []Process{{Name: "web"}, {Name: "web"}}}),
		"unnamed process":     svc(Service{Name: "a", Release: rel, Processes: []Process{{}}}),
		"duplicate variable":  svc(Service{Name: "a", Release: rel, Variables: []Variable{{Name: "A"}, {Name: "A", Value: "1"}}}),
		"unnamed variable":    svc(Service{Name: "a", Release: rel, Variables: []Variable{{Value: "1"}}}),
		"value and secret":    svc(Service{Name: "a", Release: rel, Variables: []Variable{{Name: "A", Value: "1", Secret: &Sealed{DataKeyID: "k", Ciphertext: []byte{1}}}}}),
		"secret without key":  svc(Service{Name: "a", Release: rel, Variables: []Variable{{Name: "A", Secret: &Sealed{Ciphertext: []byte{1}}}}}),
		"secret without data": svc(Service{Name: "a", Release: rel, Variables: []Variable{{Name: "A", Secret: &Sealed{DataKeyID: "k"}}}}),
		"duplicate domain":    svc(Service{Name: "a", Release: rel, Domains: []string{"a.example.com", "a.example.com"}}),
		"empty domain":        svc(Service{Name: "a", Release: rel, Domains: []string{""}}),
	}
	for name, d := range tests {
		t.Run(name, func(t *testing.T) {
			require.Error(t, d.Validate())
			_, err := d.Canonical()
			require.Error(t, err, "a document without a canonical form must not encode")
			_, err = d.Hash()
			require.Error(t, err)
		})
	}
	require.NoError(t, sample().Validate())
}

// Hash streams into SHA-256 instead of hashing Canonical(); both must agree.
func TestHashIsSHA256OfCanonical(t *testing.T) {
	for _, d := range []Document{sample(), {SchemaVersion: 1}} {
		sum := sha256.Sum256(mustCanonical(t, d))
		require.Equal(t, "sha256:"+hex.EncodeToString(sum[:]), mustHash(t, d))
	}
}

func TestHoldLastByteWhateverTheChunks(t *testing.T) {
	in := []byte("{\"a\":1}\n")
	for size := 1; size <= len(in); size++ {
		var out bytes.Buffer
		w := &holdLastByte{w: &out}
		for i := 0; i < len(in); i += size {
			_, err := w.Write(in[i:min(i+size, len(in))])
			require.NoError(t, err)
		}
		require.Equal(t, `{"a":1}`, out.String())
		require.True(t, w.held)
		require.Equal(t, byte('\n'), w.last)
	}
}
