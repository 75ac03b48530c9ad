package compiler

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/stretchr/testify/require"
)

// gen builds random snapshots from a small vocabulary, so that names collide,
// references hit and miss, secrets are sometimes unreadable and services are
// sometimes deleted: every rule gets exercised by chance.
type gen struct{ r *rand.Rand }

var (
	genServices  = []string{"api", "db", "cache", "web", "worker", "queue"}
	genVariables = []string{"HOST", "PORT", "URL", "USER", "PASSWORD", "TOKEN"}
	genProcesses = []string{"web", "worker", "cron", "admin"}
	genDataKeys  = []string{"dk_1", "dk_2", "dk_3"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

func (g gen) snapshot() Snapshot {
	s := snapshot()
	s.Unreadable = map[string]bool{}
	for _, k := range genDataKeys {
		if g.r.IntN(4) == 0 {
			s.Unreadable[k] = true
		}
	}
	names := shuffled(g.r, genServices)
	for i := range g.r.IntN(8) {
		// Mostly distinct names; a collision now and then, which matters
		// mostly when one of the two is deleted.
		name := names[i%len(names)]
		if g.r.IntN(10) == 0 {
			name = pick(g.r, genServices)
		}
		svc := Service{ID: fmt.Sprintf("svc_%d", i), Name: name, Deleted: g.r.IntN(6) == 0}
		if g.r.IntN(5) > 0 {
			svc.Release = g.release(i)
		}
		svc.Variables = g.variables(4)
		for range g.r.IntN(3) {
			svc.Domains = append(svc.Domains, pick(g.r, []string{"a.example.com", "b.example.com", "c.example.com"}))
		}
		s.Services = append(s.Services, svc)
	}
	return s
}

func (g gen) release(i int) *Release {
	rel := &Release{ID: fmt.Sprintf("rel_%d", i), Number: 1 + g.r.IntN(20), Image: fmt.Sprintf("img@sha256:%d", i)}
	names := shuffled(g.r, genProcesses)
	for i := range g.r.IntN(4) {
		p := domain.Process{Name: names[i], Replicas: g.r.IntN(3)}
		if g.r.IntN(20) == 0 {
			p.Name = pick(g.r, genProcesses)
		}
		if g.r.IntN(2) == 0 {
			p.Port = 8000 + g.r.IntN(3)
			p.HealthCheck = &domain.HealthCheck{Path: "/healthz", Port: p.Port}
		}
		if g.r.IntN(2) == 0 {
			p.Command = []string{"./run", p.Name}
		}
		rel.Processes = append(rel.Processes, p)
	}
	rel.Variables = g.variables(6)
	return rel
}

func (g gen) variables(max int) []domain.Variable {
	var vs []domain.Variable
	names := shuffled(g.r, genVariables)
	for i := range g.r.IntN(max + 1) {
		// Mostly distinct names, with the odd duplicate.
		v := domain.Variable{Name: names[i%len(names)]}
		if g.r.IntN(20) == 0 {
			v.Name = pick(g.r, genVariables)
		}
		ref := func() string { return "${{ " + pick(g.r, genServices) + "." + pick(g.r, genVariables) + " }}" }
		switch g.r.IntN(5) {
		case 0:
			v.Value = fmt.Sprint(g.r.IntN(100))
		case 1:
			v.Secret = &domain.SealedValue{DataKeyID: pick(g.r, genDataKeys), Ciphertext: []byte{byte(g.r.IntN(256))}}
		case 2:
			v.Value = ref()
		case 3:
			v.Value = "x://" + ref() + ":" + ref()
		case 4:
			v.Value = ""
		}
		vs = append(vs, v)
	}
	return vs
}

// shuffle returns a deep copy of s with every list in a new random order.
func (g gen) shuffle(s Snapshot) Snapshot {
	out := s
	out.Services = shuffled(g.r, s.Services)
	for i := range out.Services {
		svc := &out.Services[i]
		svc.Variables = shuffled(g.r, svc.Variables)
		svc.Domains = shuffled(g.r, svc.Domains)
		if svc.Release != nil {
			rel := *svc.Release
			rel.Processes = shuffled(g.r, rel.Processes)
			rel.Variables = shuffled(g.r, rel.Variables)
			svc.Release = &rel
		}
	}
	return out
}

func shuffled[T any](r *rand.Rand, xs []T) []T {
	if xs == nil {
		return nil
	}
	out := append([]T(nil), xs...)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestProperties checks, over many random snapshots, that compiling is a
// function of the snapshot's content alone.
func TestProperties(t *testing.T) {
	const runs = 2000
	held := 0
	for seed := range uint64(runs) {
		g := gen{rand.New(rand.NewPCG(seed, 42))}
		s := g.snapshot()
		before := deepString(t, s)

		d := Compile(s)
		requireWellFormed(t, d) // also: held services never carry a release or variables
		b, h := canonical(t, d), hash(t, d)

		require.Equal(t, string(b), string(canonical(t, Compile(s))), "seed %d: same input, same bytes", seed)
		for range 3 {
			sh := Compile(g.shuffle(s))
			require.Equal(t, string(b), string(canonical(t, sh)), "seed %d: input order must not matter", seed)
			require.Equal(t, h, hash(t, sh), "seed %d", seed)
		}
		require.Equal(t, before, deepString(t, s), "seed %d: Compile must not modify its input", seed)

		live := map[string]bool{}
		for _, svc := range s.Services {
			if !svc.Deleted && svc.Release != nil {
				live[svc.ID] = true
			}
		}
		for _, svc := range d.Services {
			require.True(t, live[svc.ID], "seed %d: %s is not a live deployed service", seed, svc.Name)
			if svc.Held {
				held++
				require.Nil(t, svc.Release)
				require.Nil(t, svc.Variables)
			}
		}
	}
	// Guard against a generator that never reaches the interesting cases.
	require.Greater(t, held, runs/10, "the generator should produce held services")
}

// deepString renders every field of s, following pointers, in slice order.
func deepString(t *testing.T, s Snapshot) string {
	b, err := json.Marshal(s)
	require.NoError(t, err)
	return string(b)
}

// TestShuffleIsDeep makes sure the property above compares independent
// copies: a shallow shuffle could hide a Compile that sorts its input.
func TestShuffleIsDeep(t *testing.T) {
	g := gen{rand.New(rand.NewPCG(1, 1))}
	s := snapshot(deployed("api", release("api", plain("A", "1"), plain("B", "2"), plain("C", "3"))))
	c := g.shuffle(s)
	require.False(t, reflect.ValueOf(s.Services).Pointer() == reflect.ValueOf(c.Services).Pointer())
	require.NotSame(t, s.Services[0].Release, c.Services[0].Release)
}
