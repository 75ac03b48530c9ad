package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/transport"
)

// The agents benchmark: N simulated agents (protocol clients in a child
// process, over TLS), one per cluster, on one control plane in this process.

type agentCred struct {
	Env        string `json:"env"`
	Credential string `json:"credential"`
}

func selfSigned(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool, nil
}

func memNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

func benchAgents(ctx context.Context, cluster *pgcluster.Cluster, f flags) ([]result, error) {
	db := fmt.Sprintf("agents%d", f.agents)
	pool, err := newDB(ctx, cluster, db)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	dir, err := os.MkdirTemp("", "nebula-bench-tls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	certFile, keyFile, roots, err := selfSigned(dir)
	if err != nil {
		return nil, err
	}
	key, _ := seal.GenerateMasterKey()
	cfg := config.Config{DatabaseURL: cluster.URL(db), SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "https://127.0.0.1", LogLevel: "error", TLSCert: certFile, TLSKey: keyFile}
	n := f.agents
	// Each process holds a socket per agent: this one the control plane's
	// side of n + 500 (the fan-out project's), the children theirs.
	fdLimit := fileLimit()
	if need := uint64(n + 500 + 1000); fdLimit < need {
		return nil, fmt.Errorf("agents: %d agents need about %d open files in this process and in the agents' (the limit is %d; raise the hard limit, ulimit -Hn)", n, need, fdLimit)
	}
	p, err := startPlane(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { p.stop() }()
	// The restart of the reconnect storm listens on the same address.
	cfg.Listen = p.addr
	url := "https://" + p.addr
	token, hc, err := apiToken(ctx, url, roots)
	if err != nil {
		return nil, err
	}

	log.Printf("agents: creating %d clusters, environments and servers", n)
	envs, creds, err := provision(ctx, pool, url, roots, n)
	if err != nil {
		return nil, err
	}
	credFile := filepath.Join(dir, "creds.json")
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: mustRead(certFile)}), 0o600); err != nil {
		return nil, err
	}
	before, rssBefore := memNow(), rss()
	child := exec.CommandContext(ctx, os.Args[0], "-child-agents", credFile, "-child-url", url, "-child-ca", certFile)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := child.Start(); err != nil {
		return nil, err
	}
	childStarted := time.Now()
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()

	got := newReceived()
	go got.read(out)
	// Each first connect is recorded (a commit): 10,000 take minutes on a
	// loaded machine.
	connectWait := max(120*time.Second, time.Duration(n)*30*time.Millisecond)
	if !got.waitBeyond(envs, map[string]int{}, connectWait) {
		return nil, fmt.Errorf("not every agent received its first revision within %s", connectWait)
	}
	log.Printf("agents: all %d connected, %s after the child started", n, time.Since(childStarted).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // let connections settle into idle
	after, rssAfter := memNow(), rss()
	writeHeapProfile(*agentsHeapProfile)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	log.Printf("agents: idle: %d goroutines, heap in use %d KiB, stacks %d KiB", runtime.NumGoroutine(), ms.HeapInuse>>10, ms.StackInuse>>10)
	perConn := float64(after-before) / float64(n)
	rssPerConn := (float64(rssAfter) - float64(rssBefore)) / float64(n)

	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	if err != nil {
		return nil, err
	}
	// The burst: one new revision for every cluster at once, f.runs times.
	var bursts []burstRun
	for run := 0; run < max(f.runs, 1); run++ {
		br, err := burstOnce(ctx, cmd, pool, got, envs, run)
		if err != nil {
			return nil, err
		}
		bursts = append(bursts, br)
	}

	// Latency: command accepted -> the agent holds the new revision,
	// f.latencyRuns single changes f.runs times.
	var p50s, p99s []time.Duration
	var slowSteps []string
	stopProfile := startPhaseProfile("latency")
	for run := 0; run < max(f.runs, 1); run++ {
		log.Printf("agents: latency of %d single changes (run %d)", f.latencyRuns, run+1)
		var lat []latencySample
		e := envs[0]
		for i := 0; i < f.latencyRuns; i++ {
			base := got.snapshot([]benchEnv{e})
			t0 := time.Now()
			if _, err := cmd.Project(ctx, dispatch.Context{Actor: domain.System("bench")}, e.org, e.project,
				domain.SetVariables{EnvironmentID: e.id, ServiceID: e.service, Variables: []domain.Variable{{Name: "N", Value: fmt.Sprintf("%d-%d", run, i)}}}); err != nil {
				return nil, err
			}
			accepted := time.Since(t0)
			if !got.waitBeyond([]benchEnv{e}, base, 10*time.Second) {
				return nil, fmt.Errorf("change %d did not arrive", i)
			}
			held := got.heldAt(e.id, base[e.id])
			// Where the time went: the revision's compile time is what the
			// compiler recorded in its event.
			var compiled time.Time
			if err := pool.QueryRow(ctx, `SELECT occurred_at FROM events WHERE stream_id = $1 ORDER BY stream_version DESC LIMIT 1`,
				domain.RevisionStream(e.id)).Scan(&compiled); err != nil {
				return nil, err
			}
			lat = append(lat, latencySample{total: held.Sub(t0), accepted: accepted, compiled: compiled.Sub(t0), held: held.Sub(compiled)})
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i].total < lat[j].total })
		p99 := lat[len(lat)*99/100]
		p50s, p99s = append(p50s, lat[len(lat)/2].total), append(p99s, p99.total)
		slowSteps = append(slowSteps, p99.String())
		log.Printf("agents: latency run %d: p99 change %s", run+1, p99)
	}

	stopProfile()
	log.Printf("agents: the p99 changes' steps: %s", strings.Join(slowSteps, "; "))
	var storms []stormRun
	for run := 0; run < max(f.runs, 1); run++ {
		sr, err := stormOnce(ctx, cfg, &p, got, envs, got.snapshot(envs), url, token, hc)
		if err != nil {
			return nil, err
		}
		storms = append(storms, sr)
	}
	fanout, err := fanoutRow(ctx, f, url, dir, certFile, roots, pool)
	if err != nil {
		return nil, err
	}
	runs := len(bursts)
	sort.Slice(bursts, func(i, j int) bool { return bursts[i].total < bursts[j].total })
	burst := bursts[runs/2]
	sort.Slice(storms, func(i, j int) bool { return storms[i].total < storms[j].total })
	storm := storms[len(storms)/2]
	p50, p99 := medianDuration(p50s), medianDuration(p99s)
	worstP99 := slices.Max(p99s)
	return []result{
		{name: fmt.Sprintf("server memory per idle agent connection (%d agents over TLS, heap and stacks after GC)", n),
			measured: fmt.Sprintf("%.1f KiB (the process's RSS grew %.1f KiB per connection; %.0f MiB in all; open-file limit %d in each process; one measure, once every agent connected)", perConn/1024, rssPerConn/1024, float64(rssAfter)/(1<<20), fdLimit),
			baseline: "–", ratio: "–", target: "≤ 32 KiB",
			verdict: verdict(perConn <= 32*1024, fmt.Sprintf("%.1f KiB over", perConn/1024-32))},
		// What the operator waits for: from the first of the commands to the
		// last agent holding its revision.
		{name: fmt.Sprintf("burst: one change for each of %d environments (%d clusters), first command → every agent holds its revision", n, n),
			measured: fmt.Sprintf("%s, median of %d bursts (runs %s; in the median run issuing the %d commands, 16 at a time, took %s, the last revision was recorded %s after the first command, the last agent held it %s later)",
				burst.total.Round(time.Millisecond), runs, durationSpread(bursts, func(b burstRun) time.Duration { return b.total }), n, burst.issued.Round(time.Millisecond),
				(burst.total - burst.afterRecorded).Round(time.Millisecond), burst.afterRecorded.Round(time.Millisecond)),
			baseline: "–", ratio: "–", target: "≤ 5 s", verdict: verdict(burst.total <= 5*time.Second, fmt.Sprintf("%s over", (burst.total-5*time.Second).Round(time.Millisecond)))},
		{name: fmt.Sprintf("command accepted → agent holds the new revision (%d agents connected, loopback)", n),
			measured: fmt.Sprintf("p50 %s, p99 %s: medians of %d runs of %d changes (p99 of each run: %s; that change's steps in each run: %s)", p50.Round(100*time.Microsecond), p99.Round(100*time.Microsecond), len(p99s), f.latencyRuns, durationList(p99s), strings.Join(slowSteps, "; ")),
			baseline: "–", ratio: "–", target: "p99 ≤ 100 ms on every run", verdict: verdict(worstP99 <= 100*time.Millisecond, fmt.Sprintf("the worst run's p99 %s over", (worstP99-100*time.Millisecond).Round(time.Millisecond)))},
		storm.row(n, storms), fanout,
	}, nil
}

// burstRun is one burst: from the first command to the last agent holding
// its revision (total), the commands' own issue time, and the time from the
// last revision recorded to the last agent holding it.
type burstRun struct{ total, issued, afterRecorded time.Duration }

// burstOnce sets a variable in every environment (16 commands at a time)
// and waits for every agent to hold its new revision.
func burstOnce(ctx context.Context, cmd *dispatch.Handler, pool *pgxpool.Pool, got *received, envs []benchEnv, run int) (burstRun, error) {
	log.Printf("agents: a burst of %d revisions (run %d)", len(envs), run+1)
	base := got.snapshot(envs)
	stopProfile := startPhaseProfile("burst")
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var firstErr atomic.Value
	for _, e := range envs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := cmd.Project(ctx, dispatch.Context{Actor: domain.System("bench")}, e.org, e.project,
				domain.SetVariables{EnvironmentID: e.id, ServiceID: e.service, Variables: []domain.Variable{{Name: "BURST", Value: fmt.Sprint(run + 1)}}}); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		stopProfile()
		return burstRun{}, err
	}
	issued := time.Since(start)
	ok := got.waitBeyond(envs, base, 120*time.Second)
	stopProfile()
	if !ok {
		return burstRun{}, fmt.Errorf("not every agent received the burst")
	}
	// From the last revision recorded to the last agent holding it.
	var lastRecorded time.Time
	if err := pool.QueryRow(ctx, `SELECT max(occurred_at) FROM events WHERE event_type = 'revision.compiled'`).Scan(&lastRecorded); err != nil {
		return burstRun{}, err
	}
	var allHeld time.Time
	for _, e := range envs {
		if t := got.heldAt(e.id, base[e.id]); t.After(allHeld) {
			allHeld = t
		}
	}
	return burstRun{total: allHeld.Sub(start), issued: issued, afterRecorded: allHeld.Sub(lastRecorded)}, nil
}

func medianDuration(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// durationSpread is "min–max" of what of each run measures.
func durationSpread[T any](runs []T, of func(T) time.Duration) string {
	ds := make([]time.Duration, len(runs))
	for i, r := range runs {
		ds[i] = of(r)
	}
	return fmt.Sprintf("%s–%s", slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}

// durationList lists durations in the order measured.
func durationList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Round(100 * time.Microsecond).String()
	}
	return strings.Join(parts, ", ")
}

func mustRead(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	blk, _ := pem.Decode(b)
	return blk.Bytes
}

type benchEnv struct{ id, org, project, service string }

// provision makes n clusters, each with one environment of its own project,
// and registers one server per cluster through the real endpoint.
func provision(ctx context.Context, pool *pgxpool.Pool, url string, roots *x509.CertPool, n int) ([]benchEnv, []agentCred, error) {
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	if err != nil {
		return nil, nil, err
	}
	sys := dispatch.Context{Actor: domain.System("bench")}
	org := uuid.NewString()
	if _, err := cmd.Organisation(ctx, sys, org, domain.CreateOrganisation{OrgID: org, Name: "bench", Owner: uuid.NewString()}); err != nil {
		return nil, nil, err
	}
	envs := make([]benchEnv, n)
	creds := make([]agentCred, n)
	tlsCfg := &tls.Config{RootCAs: roots}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var firstErr atomic.Value
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			fail := func(err error) { firstErr.CompareAndSwap(nil, err) }
			cluster, project, env := uuid.NewString(), uuid.NewString(), uuid.NewString()
			tok, joinToken, hash, err := credential.New()
			if err != nil {
				fail(err)
				return
			}
			if _, err := cmd.Cluster(ctx, sys, org, cluster, domain.CreateCluster{ClusterID: cluster, OrgID: org, Name: fmt.Sprintf("c%04d", i),
				JoinToken: domain.IssueJoinToken{TokenID: tok, TokenHash: hash, ExpiresAt: time.Now().Add(time.Hour)}}); err != nil {
				fail(err)
				return
			}
			if _, err := cmd.Project(ctx, sys, org, project, domain.CreateProject{ProjectID: project, OrgID: org, Name: fmt.Sprintf("p%04d", i)}); err != nil {
				fail(err)
				return
			}
			if _, err := cmd.Project(ctx, sys, org, project, domain.CreateEnvironment{EnvironmentID: env, Name: "production", ClusterID: cluster}); err != nil {
				fail(err)
				return
			}
			svc := uuid.NewString()
			if _, err := cmd.Project(ctx, sys, org, project, domain.CreateService{ServiceID: svc, Name: "api", Source: domain.Source{Image: "api"},
				Processes: []domain.Process{{Name: "web", Port: 8080, Replicas: 2}}}); err != nil {
				fail(err)
				return
			}
			if _, err := cmd.Project(ctx, sys, org, project, domain.Deploy{EnvironmentID: env, ServiceID: svc, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
				Image: "registry.example.com/api@sha256:" + strings.Repeat("ab", 32)}); err != nil {
				fail(err)
				return
			}
			envs[i] = benchEnv{id: env, org: org, project: project, service: svc}
			cred, err := registerAgent(ctx, url, tlsCfg, joinToken)
			if err != nil {
				fail(err)
				return
			}
			creds[i] = agentCred{Env: env, Credential: cred}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return nil, nil, err
	}
	return envs, creds, nil
}

// received collects "env revision unixnano" lines from the child: for each
// environment, when the agent first held each revision or a newer one.
type received struct {
	mu  sync.Mutex
	at  map[string]map[int]time.Time
	max map[string]int
	// welcomed is when each environment's agent was last welcomed ("W env
	// unixnano" lines).
	welcomed map[string]time.Time
	cond     chan struct{}
}

func newReceived() *received {
	return &received{at: map[string]map[int]time.Time{}, max: map[string]int{}, welcomed: map[string]time.Time{}, cond: make(chan struct{}, 1)}
}

func (r *received) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		var env string
		var rev int
		var ns int64
		if w, ok := strings.CutPrefix(sc.Text(), "W "); ok {
			if n, _ := fmt.Sscanf(w, "%s %d", &env, &ns); n == 2 {
				r.mu.Lock()
				r.welcomed[env] = time.Unix(0, ns)
				r.mu.Unlock()
				r.wake()
			}
			continue
		}
		if n, _ := fmt.Sscanf(sc.Text(), "%s %d %d", &env, &rev, &ns); n != 3 {
			continue
		}
		r.mu.Lock()
		if r.at[env] == nil {
			r.at[env] = map[int]time.Time{}
		}
		r.at[env][rev] = time.Unix(0, ns)
		r.max[env] = max(r.max[env], rev)
		r.mu.Unlock()
		r.wake()
	}
}

func (r *received) wake() {
	select {
	case r.cond <- struct{}{}:
	default:
	}
}

// welcomedSince says whether the environment's agent was welcomed after t
// and holds revision rev or a newer one.
func (r *received) welcomedSince(env string, t time.Time, rev int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.welcomed[env].After(t) && r.max[env] >= rev
}

// welcomeAt is when the environment's agent was last welcomed.
func (r *received) welcomeAt(env string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.welcomed[env]
}

// waitWelcomed waits until every environment's agent was welcomed after t
// and holds its revision in base (or a newer one).
func (r *received) waitWelcomed(envs []benchEnv, t time.Time, base map[string]int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	next := 0
	for {
		for next < len(envs) && r.welcomedSince(envs[next].id, t, base[envs[next].id]) {
			next++
		}
		if next == len(envs) {
			return true
		}
		select {
		case <-r.cond:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			return false
		}
	}
}

// snapshot returns each environment's newest revision held now.
func (r *received) snapshot(envs []benchEnv) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, e := range envs {
		out[e.id] = r.max[e.id]
	}
	return out
}

// waitBeyond waits until every environment holds a revision newer than base.
// An environment that does stays so: each look starts at the first that
// did not (looking at all 10,000 at every line the agents print took an
// eighth of the CPU of a burst).
func (r *received) waitBeyond(envs []benchEnv, base map[string]int, timeout time.Duration) bool {
	deadline := time.After(timeout)
	next := 0
	for {
		r.mu.Lock()
		for next < len(envs) && r.max[envs[next].id] > base[envs[next].id] {
			next++
		}
		r.mu.Unlock()
		if next == len(envs) {
			return true
		}
		select {
		case <-r.cond:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			return false
		}
	}
}

// heldAt is when the environment first held a revision newer than base.
// latencySample is one change of the latency runs: from the command to its
// agent holding the revision, and the steps on the way.
type latencySample struct {
	total    time.Duration // command sent → the agent holds the revision
	accepted time.Duration // command sent → accepted
	compiled time.Duration // command sent → the revision compiled (its event's time)
	held     time.Duration // compiled → the agent holds it
}

func (l latencySample) String() string {
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	return fmt.Sprintf("accepted %s, compiled %s after the command, held %s after that", r(l.accepted), r(l.compiled), r(l.held))
}

func (r *received) heldAt(env string, base int) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t time.Time
	for rev, at := range r.at[env] {
		if rev > base && (t.IsZero() || at.Before(t)) {
			t = at
		}
	}
	return t
}

// childAgents runs the simulated agents: one protocol client per credential,
// printing each desired state it receives.
func childAgents(credFile, url, caFile string) error {
	var creds []agentCred
	b, err := os.ReadFile(credFile)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &creds); err != nil {
		return err
	}
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots.AppendCertsFromPEM(ca)
	out := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	tlsCfg := &tls.Config{RootCAs: roots, ClientSessionCache: tls.NewLRUClientSessionCache(len(creds))}
	ctx := context.Background()
	// applied is what each agent applied: its hello says so, as a real
	// agent's does (reconnected, it is sent only what is newer).
	applied := map[string]int{}
	for _, c := range creds {
		cl, err := transport.NewClient(transport.ClientConfig{
			URL: url, Credential: c.Credential, TLS: tlsCfg,
			Hello: func(context.Context) transport.Hello {
				mu.Lock()
				defer mu.Unlock()
				have := map[string]int{}
				if rev := applied[c.Env]; rev > 0 {
					have[c.Env] = rev
				}
				return transport.Hello{Protocol: transport.ProtocolVersion, Version: "1.0.0", Arch: runtime.GOARCH, Applied: have}
			},
			OnConnected: func(transport.Welcome) {
				now := time.Now().UnixNano()
				mu.Lock()
				fmt.Fprintf(out, "W %s %d\n", c.Env, now)
				out.Flush()
				mu.Unlock()
			},
			Apply: func(ctx context.Context, ds transport.DesiredState) transport.Ack {
				now := time.Now().UnixNano()
				mu.Lock()
				applied[ds.EnvironmentID] = max(applied[ds.EnvironmentID], ds.Revision)
				fmt.Fprintf(out, "%s %d %d\n", ds.EnvironmentID, ds.Revision, now)
				out.Flush()
				mu.Unlock()
				return transport.Ack{EnvironmentID: ds.EnvironmentID, Revision: ds.Revision, Hash: ds.Hash, Services: []transport.ServiceOutcome{}}
			},
		})
		if err != nil {
			return err
		}
		go func() { _ = cl.Run(ctx) }()
		time.Sleep(time.Millisecond) // spread the handshakes a little
	}
	select {}
}
