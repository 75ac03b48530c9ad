package compiler

import (
	"fmt"
	"testing"

	"github.com/nebulactrl/nebulactrl/domain"
)

// bigSnapshot is an environment of n services, each with two processes, ten
// variables (four with references to other services or itself, one of them
// environment-wide; one secret) and one domain. One data key in 50 is unreadable, so some services
// are held, as in a real environment after a partial key rotation.
func bigSnapshot(n int) Snapshot {
	s := snapshot()
	s.Unreadable = map[string]bool{}
	for i := range n {
		name := fmt.Sprintf("svc-%04d", i)
		next := fmt.Sprintf("svc-%04d", (i+1)%n)
		key := fmt.Sprintf("dk_%d", i%100)
		if i%100 == 0 {
			s.Unreadable[key] = true
		}
		vars := []domain.Variable{
			plain("LOG_LEVEL", "info"),
			// Environment-wide, so the same value in every service.
			plain("OTEL_ENDPOINT", "http://${{ svc-0000.HOST }}:4317"),
			plain("FEATURE_FLAGS", "search,checkout,recommendations"),
			plain("TIMEOUT", "30s"),
			plain("WORKERS", "4"),
			plain("USER", "user_"+name),
			plain("UPSTREAM_URL", "http://${{ "+next+".HOST }}:${{ "+next+".PORT }}/api"),
			plain("UPSTREAM_USER", "${{ "+next+".USER }}"),
			plain("SELF_URL", "http://${{ "+name+".HOST }}"),
			secret("API_KEY", key),
		}
		svc := Service{
			ID: "svc_" + name, Name: name,
			Release: &Release{
				ID: "rel_" + name, Number: 1 + i%7,
				Image:     "registry.example.com/" + name + "@sha256:4f1c2e9a8b7d6c5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e",
				Processes: []domain.Process{worker(), web(8080)},
				Variables: vars,
			},
			Variables: vars,
			Domains:   []string{name + ".example.com"},
		}
		s.Services = append(s.Services, svc)
	}
	return s
}

func BenchmarkCompile1000Services(b *testing.B) {
	s := bigSnapshot(1000)
	b.ReportAllocs()
	for b.Loop() {
		_ = Compile(s)
	}
}

// BenchmarkCompileAndHash1000Services is what the control plane pays per
// change: compile, then hash to see whether anything changed.
func BenchmarkCompileAndHash1000Services(b *testing.B) {
	s := bigSnapshot(1000)
	b.ReportAllocs()
	var size int
	for b.Loop() {
		d := Compile(s)
		if _, err := d.Hash(); err != nil {
			b.Fatal(err)
		}
		size = len(d.Services)
	}
	if size != 1000 {
		b.Fatalf("compiled %d services", size)
	}
}

// BenchmarkHash1000Services isolates the canonical encoding and hash.
func BenchmarkHash1000Services(b *testing.B) {
	d := Compile(bigSnapshot(1000))
	canon, err := d.Canonical()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(canon)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Hash(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBigSnapshotIsRealistic keeps the benchmark honest: most services
// compile and resolve their references, a few are held.
func TestBigSnapshotIsRealistic(t *testing.T) {
	d := Compile(bigSnapshot(1000))
	requireWellFormed(t, d)
	held := 0
	for _, s := range d.Services {
		if s.Held {
			held++
		}
	}
	if held != 10 {
		t.Fatalf("held %d services, want 10 (one unreadable data key in 100)", held)
	}
	if got := service(t, d, "svc-0001").Variables; got[len(got)-1].Name != "WORKERS" || len(got) != 10 {
		t.Fatalf("unexpected variables %+v", got)
	}
}
