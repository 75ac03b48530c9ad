package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nebulactrl/nebulactrl/agent/reconcile"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
)

func bigDocument(services int) desiredstate.Document {
	doc := desiredstate.Document{SchemaVersion: desiredstate.SchemaVersion, Environment: desiredstate.Environment{
		OrgID: "00000000-0000-4000-8000-000000000001", Org: "acme", ProjectID: "00000000-0000-4000-8000-000000000002", Project: "shop",
		ID: "00000000-0000-4000-8000-000000000003", Name: "bench", ClusterID: "00000000-0000-4000-8000-000000000004",
		Namespace: desiredstate.Namespace("acme", "shop", "bench")}}
	for i := 0; i < services; i++ {
		doc.Services = append(doc.Services, desiredstate.Service{
			ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", 1000+i), Name: fmt.Sprintf("svc-%03d", i),
			Release:   &desiredstate.Release{ID: fmt.Sprintf("r-%d", i), Number: 1, Image: "registry.example.com/x@sha256:" + fmt.Sprintf("%064d", i)},
			Processes: []desiredstate.Process{{Name: "web", Port: 8080, Replicas: 1}},
			Variables: []desiredstate.Variable{{Name: "PORT", Value: "8080"}, {Name: "MODE", Value: "bench"}},
		})
	}
	return doc
}

// benchReconcile applies an environment of 200 services to a real API server:
// cold (everything is created) and warm (unchanged: reads only).
func benchReconcile() ([]result, error) {
	k, err := k8stest.Launch(k8stest.Options{Nodes: 2})
	if err != nil {
		return nil, err
	}
	defer k.Stop()
	cs, err := kubernetes.NewForConfig(k.Admin)
	if err != nil {
		return nil, err
	}
	r, err := reconcile.New(reconcile.Config{Client: cs})
	if err != nil {
		return nil, err
	}
	doc := bigDocument(200)
	ctx := context.Background()
	start := time.Now()
	if _, err := r.Apply(ctx, 1, "h1", doc); err != nil {
		return nil, err
	}
	cold := time.Since(start)
	start = time.Now()
	if _, err := r.Apply(ctx, 2, "h2", doc); err != nil {
		return nil, err
	}
	warm := time.Since(start)
	return []result{{
		name:     "apply an environment of 200 services to a real API server (admin client, 100 requests/s)",
		measured: fmt.Sprintf("cold %s, warm (unchanged) %s", cold.Round(time.Millisecond), warm.Round(time.Millisecond)),
		baseline: "–", ratio: fmt.Sprintf("warm is %.0f× faster", float64(cold)/float64(warm)), target: "measured, no target",
		verdict: "–",
	}}, nil
}
