package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/nebulactrl/nebulactrl/compiler"
	"github.com/nebulactrl/nebulactrl/domain"
)

func bigSnapshot(services int) compiler.Snapshot {
	s := compiler.Snapshot{OrgID: "o", OrgName: "acme", ProjectID: "p", ProjectName: "shop", EnvironmentID: "e", EnvironmentName: "production", ClusterID: "c"}
	for i := 0; i < services; i++ {
		name := fmt.Sprintf("svc-%04d", i)
		vars := []domain.Variable{{Name: "PORT", Value: "8080"}, {Name: "DB_PASSWORD", Secret: &domain.SealedValue{DataKeyID: fmt.Sprint("k", i), Ciphertext: []byte("sealed-bytes")}}}
		for v := 0; v < 6; v++ {
			vars = append(vars, domain.Variable{Name: fmt.Sprintf("SETTING_%d", v), Value: fmt.Sprint("value-", v)})
		}
		next := fmt.Sprintf("svc-%04d", (i+1)%services)
		vars = append(vars, domain.Variable{Name: "NEXT_URL", Value: "http://${{ " + next + ".HOST }}:${{ " + next + ".PORT }}"},
			domain.Variable{Name: "NEXT_SECRET", Value: "${{ " + next + ".DB_PASSWORD }}"})
		s.Services = append(s.Services, compiler.Service{
			ID: fmt.Sprint("id-", i), Name: name, Variables: vars, Domains: []string{name + ".example.com"},
			Release: &compiler.Release{ID: fmt.Sprint("r-", i), Number: 3, Image: "registry.example.com/x@sha256:" + fmt.Sprintf("%064d", i),
				Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}, {Name: "worker", Replicas: 1, Command: []string{"./worker"}}},
				Variables: vars},
		})
	}
	return s
}

func benchCompile() []result {
	snap := bigSnapshot(1000)
	compileOnly := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			compiler.Compile(snap)
		}
	})
	withHash := testing.Benchmark(func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := compiler.Compile(snap).Hash(); err != nil {
				b.Fatal(err)
			}
		}
	})
	out := []result{}
	for _, r := range []struct {
		name string
		res  testing.BenchmarkResult
	}{{"compile a 1,000-service environment", compileOnly}, {"compile a 1,000-service environment and hash it", withHash}} {
		d := time.Duration(r.res.NsPerOp())
		out = append(out, result{
			name: r.name, measured: d.Round(10*time.Microsecond).String() + " per compile", baseline: "–", ratio: "–",
			target: "≤ 5 ms", verdict: verdict(d <= 5*time.Millisecond, fmt.Sprintf("%.1f ms over", float64(d-5*time.Millisecond)/1e6)),
		})
	}
	return out
}
