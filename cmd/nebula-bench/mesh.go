package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/transport"
)

func meshKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// benchMesh measures the peer lists' compile for an organisation of 1,000
// nodes (50 clusters of 20) against encoding the same lists as JSON (what a
// delivery does with them anyway), and the time from a node's report to
// every cluster's agent holding a mesh state with it as a peer.
func benchMesh(ctx context.Context, cluster *pgcluster.Cluster) ([]result, error) {
	m := domain.NewMesh()
	now := time.Now()
	n := 0
	for c := range 50 {
		id := fmt.Sprintf("%08d-0000-4000-8000-000000000000", c)
		r := domain.ReportMeshNodes{OrgID: "o", ClusterID: id, ServiceCIDRs: []string{fmt.Sprintf("10.%d.0.0/16", 128+c)}}
		for i := range 20 {
			name := fmt.Sprintf("node-%d", i)
			r.ClusterNodes = append(r.ClusterNodes, name)
			r.Nodes = append(r.Nodes, domain.MeshNodeReport{Node: name, PublicKey: meshKey(), Endpoint: fmt.Sprintf("198.51.%d.%d:51820", c, i+1),
				PodCIDRs: []string{fmt.Sprintf("10.%d.%d.0/24", 64+c, i)}})
		}
		n++
		d, err := m.Decide(r, domain.Meta{Actor: domain.System("bench"), CommandID: fmt.Sprint(n), Now: now})
		if err != nil {
			return nil, err
		}
		for _, e := range d.Events {
			m.ApplyAt(e, now)
		}
	}
	compile := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			_ = m.CompileAll()
		}
	})
	compiled := m.CompileAll()
	encode := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			for _, c := range compiled {
				if _, err := json.Marshal(c); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	dc, de := time.Duration(compile.NsPerOp()), time.Duration(encode.NsPerOp())
	out := []result{{
		name:     "mesh peer lists for an organisation of 1,000 nodes (50 clusters of 20): compile every cluster's",
		measured: fmt.Sprintf("%.1f ms", float64(dc)/1e6), baseline: fmt.Sprintf("%.1f ms encoding the same lists as JSON", float64(de)/1e6),
		ratio: fmt.Sprintf("%.2f×", float64(dc)/float64(de)), target: "measured", verdict: "measured, no bar in the spec",
	}}
	r, err := benchMeshJoin(ctx, cluster)
	if err != nil {
		return nil, err
	}
	return append(out, r), nil
}

// benchMeshJoin: clusters' agents as protocol clients over TLS on loopback,
// one control plane; each round one cluster's agent reports a new node, and
// the time runs until every cluster's agent holds a mesh state with the new
// node's key among its peers.
func benchMeshJoin(ctx context.Context, cluster *pgcluster.Cluster) (result, error) {
	const clusters, rounds = 10, 30
	pool, err := newDB(ctx, cluster, "mesh")
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	dir, err := os.MkdirTemp("", "nebula-bench-mesh-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	certFile, keyFile, roots, err := selfSigned(dir)
	if err != nil {
		return result{}, err
	}
	key, _ := seal.GenerateMasterKey()
	cfg := config.Config{DatabaseURL: cluster.URL("mesh"), SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "https://127.0.0.1", LogLevel: "error", TLSCert: certFile, TLSKey: keyFile}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	go func() {
		if err := server.Run(sctx, cfg, server.Options{Version: "bench", Logger: slog.New(slog.DiscardHandler), Ready: func(a string) { ready <- a }}); err != nil && sctx.Err() == nil {
			log.Printf("control plane: %v", err)
		}
	}()
	url := "https://" + <-ready
	log.Printf("mesh: %d clusters with an agent each", clusters)
	_, creds, err := provision(ctx, pool, url, roots, clusters)
	if err != nil {
		return result{}, err
	}
	type held struct {
		mu    sync.Mutex
		peers map[string]time.Time // public key -> when first held
	}
	agents := make([]*held, clusters)
	clients := make([]*transport.Client, clusters)
	for i, c := range creds {
		h := &held{peers: map[string]time.Time{}}
		agents[i] = h
		cl, err := transport.NewClient(transport.ClientConfig{URL: url, Credential: c.Credential, TLS: &tls.Config{RootCAs: roots},
			Hello: func(context.Context) transport.Hello {
				return transport.Hello{Protocol: transport.ProtocolVersion, Version: "bench", Arch: "amd64", Applied: map[string]int{}, Mesh: true}
			},
			Apply: func(_ context.Context, ds transport.DesiredState) transport.Ack {
				return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Ignored: true, Services: []transport.ServiceOutcome{}}
			},
			MeshState: func(s transport.MeshState) {
				at := time.Now()
				h.mu.Lock()
				for _, p := range s.Peers {
					if _, ok := h.peers[p.PublicKey]; !ok {
						h.peers[p.PublicKey] = at
					}
				}
				h.mu.Unlock()
			},
		})
		if err != nil {
			return result{}, err
		}
		clients[i] = cl
		go func() { _ = cl.Run(sctx) }()
	}
	time.Sleep(2 * time.Second) // connected
	nodes := make([][]transport.MeshNodeReport, clusters)
	var lat []time.Duration
	// join adds a node to cluster c and waits until every agent holds it.
	// The first round of each cluster gives it a node (a cluster without
	// any has no peer list): those rounds are not counted.
	for round := range rounds + clusters {
		c := round % clusters
		k := meshKey()
		nodes[c] = append(nodes[c], transport.MeshNodeReport{Node: fmt.Sprintf("node-%d", len(nodes[c])), PublicKey: k,
			Endpoints: []string{fmt.Sprintf("198.51.100.%d:51820", round+1)}})
		rep := transport.MeshReport{Nodes: nodes[c]}
		for _, nr := range nodes[c] {
			rep.ClusterNodes = append(rep.ClusterNodes, transport.MeshClusterNode{Name: nr.Node})
		}
		start := time.Now()
		if err := clients[c].Send(transport.TypeMeshReport, rep); err != nil {
			return result{}, err
		}
		deadline := time.Now().Add(30 * time.Second)
		var last time.Time
		for {
			all := true
			last = time.Time{}
			for _, h := range agents {
				h.mu.Lock()
				at, ok := h.peers[k]
				h.mu.Unlock()
				if !ok {
					all = false
					break
				}
				if at.After(last) {
					last = at
				}
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				return result{}, fmt.Errorf("mesh: round %d: not every agent got the new node within 30 s", round)
			}
			if round < clusters && c != clusters-1 {
				all = true // only the clusters with a node so far have peer lists
				for _, h := range agents[:c+1] {
					h.mu.Lock()
					_, ok := h.peers[k]
					h.mu.Unlock()
					all = all && ok
				}
				if all {
					break
				}
			}
			time.Sleep(time.Millisecond)
		}
		if round >= clusters {
			lat = append(lat, last.Sub(start))
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	return result{
		name: fmt.Sprintf("mesh: a node's report → every cluster's agent holds it as a peer (%d clusters, loopback, TLS)", clusters),
		measured: fmt.Sprintf("p50 %s, p99 %s over %d joins (min %s, max %s)", p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), rounds,
			lat[0].Round(100*time.Microsecond), lat[len(lat)-1].Round(100*time.Microsecond)),
		baseline: "–", ratio: "–", target: "measured", verdict: "measured, no bar in the spec",
	}, nil
}
