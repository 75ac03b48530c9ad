package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/forge"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
	"github.com/nebulactrl/nebulactrl/internal/testenv/installtest"
	"github.com/nebulactrl/nebulactrl/internal/testenv/k8stest"
	"github.com/nebulactrl/nebulactrl/packaging/agentinstall"
)

// The builds benchmark: a GitHub push webhook to the build's Job in the
// cluster, end to end (control plane, install manifest, agent, real API
// server), and the webhook verification's cost against the HMAC it must
// compute anyway.

// pushExample is GitHub's branch push example (about 8.9 KB), read from the
// repository's root, where `go tool task bench` runs.
const (
	pushExample       = "internal/forge/testdata/github/push-branch-created.json"
	pushExampleCommit = "6113728f27ae82c7b1a177c8d03f9e96e0adf246"
	// buildPushes is how many pushes the webhook-to-Job latency is measured
	// over, one after another (the next once the last one's Job exists).
	buildPushes = 50
)

func benchBuilds(ctx context.Context, cluster *pgcluster.Cluster, f flags) ([]result, error) {
	example, err := os.ReadFile(pushExample)
	if err != nil {
		return nil, fmt.Errorf("builds: %w (run from the repository's root)", err)
	}
	load := newLoadSampler()
	log.Printf("builds: webhook verification, %d runs of %s", f.runs, f.duration)
	verify, err := benchVerify(example, f)
	if err != nil {
		return nil, err
	}
	verify.verdict = fmt.Sprintf("measured, no bar in the spec (%s, `-only builds`, %d runs, load average %s)", time.Now().UTC().Format("2006-01-02 15:04 MST"), f.runs, load.stop())

	load = newLoadSampler()
	push, err := benchPushToJob(ctx, cluster, example)
	if err != nil {
		return nil, err
	}
	push.verdict = fmt.Sprintf("measured, no bar in the spec (%s, `-only builds`, load average %s)", time.Now().UTC().Format("2006-01-02 15:04 MST"), load.stop())
	return []result{push, verify}, nil
}

// benchVerify: forge.Verify of the signed example against a bare
// HMAC-SHA256 and hmac.Equal of the same body, in turn, one goroutine each.
func benchVerify(body []byte, f flags) (result, error) {
	secret := []byte("bench webhook secret, 32 bytes..")
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	sum := m.Sum(nil)
	// The headers GitHub sends with a push (docs.github.com, "Webhook events
	// and payloads"), the older SHA-1 signature among them.
	h := http.Header{}
	h.Set("User-Agent", "GitHub-Hookshot/044aadd")
	h.Set("Content-Type", "application/json")
	h.Set("X-GitHub-Event", "push")
	h.Set("X-GitHub-Delivery", uuid.NewString())
	h.Set("X-GitHub-Hook-ID", "292430182")
	h.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(sum))
	v := forge.Verifier{Secrets: forge.Secrets{secret}}
	if d, err := v.Verify(h, body); err != nil || d.Push == nil {
		return result{}, fmt.Errorf("builds: the example does not verify as a push: %v", err)
	}
	rate := func(op func() error) (float64, error) {
		n := 0
		start := time.Now()
		for time.Since(start) < f.duration {
			for range 64 {
				if err := op(); err != nil {
					return 0, err
				}
			}
			n += 64
		}
		return float64(n) / time.Since(start).Seconds(), nil
	}
	verifyOp := func() error { _, err := v.Verify(h, body); return err }
	bareOp := func() error {
		m := hmac.New(sha256.New, secret)
		m.Write(body)
		if !hmac.Equal(m.Sum(nil), sum) {
			return fmt.Errorf("no match")
		}
		return nil
	}
	var verifies, bares []float64
	for range f.runs {
		r, err := rate(verifyOp)
		if err != nil {
			return result{}, err
		}
		verifies = append(verifies, r)
		if r, err = rate(bareOp); err != nil {
			return result{}, err
		}
		bares = append(bares, r)
	}
	vm, bm := median(verifies), median(bares)
	// Per request, the HMAC takes 1/bm of the 1/vm a Verify takes.
	hmacShare := vm / bm
	return result{
		name:     fmt.Sprintf("webhook verification throughput against a bare HMAC (GitHub's %.1f KB push example, one goroutine, verifications/s)", float64(len(body))/1000),
		measured: fmt.Sprintf("%.0f forge.Verify/s (runs %s; %.1f µs each)", vm, spread(verifies), 1e6/vm),
		baseline: fmt.Sprintf("%.0f HMAC-SHA256 + hmac.Equal/s (runs %s; %.1f µs each)", bm, spread(bares), 1e6/bm),
		ratio: fmt.Sprintf("bare is %.2f× faster: the HMAC is %.0f %% of a Verify, the rest (headers, JSON parse of the push, cleaning) %.0f %%",
			bm/vm, 100*hmacShare, 100*(1-hmacShare)),
		target: "measured",
	}, nil
}

// benchPushToJob runs a control plane, a Kubernetes API server with the
// install manifest applied and an agent with builds on, and measures each
// signed push from sending the webhook to its build's Job existing in
// nebula-build, as a watch on the Jobs sees it.
func benchPushToJob(ctx context.Context, cluster *pgcluster.Cluster, example []byte) (result, error) {
	pool, err := newDB(ctx, cluster, "builds")
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	key, _ := seal.GenerateMasterKey()
	cfg := config.Config{DatabaseURL: cluster.URL("builds"), SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "http://127.0.0.1", LogLevel: "error"}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- server.Run(sctx, cfg, server.Options{Version: "1.0.0", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})), Ready: func(a string) { ready <- a }})
	}()
	var url string
	select {
	case a := <-ready:
		url = "http://" + a
	case err := <-served:
		return result{}, fmt.Errorf("builds: the control plane did not start: %v", err)
	}
	defer func() { stop(); <-served }()
	token, err := setupFirstUser(ctx, url)
	if err != nil {
		return result{}, err
	}
	rc, err := client.New(url, token)
	if err != nil {
		return result{}, err
	}

	log.Printf("builds: starting the Kubernetes API server")
	k, err := k8stest.Launch(k8stest.Options{Nodes: 1})
	if err != nil {
		return result{}, err
	}
	defer k.Stop()
	admin, err := kubernetes.NewForConfig(rest.CopyConfig(k.Admin))
	if err != nil {
		return result{}, err
	}
	cl, err := rc.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"})
	if err != nil {
		return result{}, err
	}
	manifest, err := agentinstall.Manifest(agentinstall.Options{ControlPlaneURL: url, JoinToken: cl.JoinToken.Token, Image: agentinstall.DefaultImage("1.0.0"), Cluster: "acme/eu-1"})
	if err != nil {
		return result{}, err
	}
	objs, err := installtest.Objects(manifest)
	if err != nil {
		return result{}, err
	}
	for _, o := range objs {
		if err := installtest.Create(ctx, admin, o); err != nil {
			return result{}, err
		}
	}
	stopAgent, err := runBuildAgent(ctx, k, admin, url, cl.JoinToken.Token)
	if err != nil {
		return result{}, err
	}
	defer stopAgent()
	if err := waitConnected(ctx, rc, "eu-1"); err != nil {
		return result{}, err
	}

	if _, err := rc.CreateProject(ctx, "acme", "shop"); err != nil {
		return result{}, err
	}
	if _, err := rc.CreateEnvironment(ctx, "acme", "shop", api.CreateEnvironmentRequest{Name: "staging", Cluster: "eu-1"}); err != nil {
		return result{}, err
	}
	port := 8080
	if _, err := rc.CreateService(ctx, "acme", "shop", api.ServiceRequest{Name: "web", GitURL: "https://github.com/Codertocat/Hello-World", GitBranch: "master", Port: &port}); err != nil {
		return result{}, err
	}
	hook, err := rc.RotateWebhook(ctx, "acme", "shop")
	if err != nil {
		return result{}, err
	}
	hookURL := url + strings.TrimPrefix(hook.URL, "http://127.0.0.1")

	jobs, err := watchBuildJobs(sctx, admin)
	if err != nil {
		return result{}, err
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	// push sends one signed push of a new commit and returns its build's id
	// and the time the request was sent (after signing, as the forge
	// signs before it sends).
	push := func() (pushed, error) {
		commit := make([]byte, 20)
		_, _ = rand.Read(commit)
		body := bytes.ReplaceAll(example, []byte(pushExampleCommit), []byte(hex.EncodeToString(commit)))
		m := hmac.New(sha256.New, []byte(hook.Secret))
		m.Write(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, hookURL, bytes.NewReader(body))
		if err != nil {
			return pushed{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "GitHub-Hookshot/044aadd")
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", uuid.NewString())
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return pushed{}, err
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered := time.Since(t0)
		var out api.HookResponse
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil || out.Outcome != "building" || len(out.Builds) != 1 {
			return pushed{}, fmt.Errorf("builds: the push was answered %d: %s", resp.StatusCode, raw)
		}
		return pushed{build: out.Builds[0], delivery: out.DeliveryID, sent: t0, answered: answered}, nil
	}

	// One push first, not counted: the first build of a fresh control plane
	// and agent.
	log.Printf("builds: %d pushes, each to its build's Job", buildPushes)
	p, err := push()
	if err != nil {
		return result{}, err
	}
	at, err := jobs.wait(p.build, 60*time.Second)
	if err != nil {
		return result{}, err
	}
	first := at.Sub(p.sent)
	var lat, answers []time.Duration
	var steps [4][]time.Duration
	for range buildPushes {
		p, err := push()
		if err != nil {
			return result{}, err
		}
		at, err := jobs.wait(p.build, 60*time.Second)
		if err != nil {
			return result{}, err
		}
		lat = append(lat, at.Sub(p.sent))
		answers = append(answers, p.answered)
		// Where the time went, from the events' times (the control plane's
		// clock, this process's): delivery recorded, build queued (a
		// reaction), build started (admitted, a reaction), then the Job.
		var recorded, queued, started time.Time
		if err := pool.QueryRow(ctx, `SELECT
			(SELECT min(occurred_at) FROM events WHERE stream_id = $1 AND event_type = 'webhook.delivery.recorded'),
			(SELECT min(occurred_at) FROM events WHERE stream_id = $2 AND event_type = 'build.queued'),
			(SELECT min(occurred_at) FROM events WHERE stream_id = $2 AND event_type = 'build.started')`,
			domain.DeliveryStream(p.delivery), domain.BuildStream(p.build)).Scan(&recorded, &queued, &started); err != nil {
			return result{}, fmt.Errorf("builds: the events of build %s: %w", p.build, err)
		}
		steps[0] = append(steps[0], recorded.Sub(p.sent))
		steps[1] = append(steps[1], queued.Sub(recorded))
		steps[2] = append(steps[2], started.Sub(queued))
		steps[3] = append(steps[3], at.Sub(started))
	}
	sortDur := func(xs []time.Duration) { sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] }) }
	sortDur(lat)
	sortDur(answers)
	for _, s := range steps {
		sortDur(s)
	}
	pct := func(xs []time.Duration, p int) time.Duration { return xs[(len(xs)-1)*p/100] }
	r := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	rs := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	log.Printf("builds: latencies %v", lat)
	log.Printf("builds: sent→recorded %v", steps[0])
	log.Printf("builds: recorded→queued %v", steps[1])
	log.Printf("builds: queued→started %v", steps[2])
	log.Printf("builds: started→Job %v", steps[3])
	stepText := fmt.Sprintf("p50 (p99) of the steps: sent → delivery recorded %s (%s), → build queued %s (%s), → admitted %s (%s), → Job seen %s (%s)",
		rs(pct(steps[0], 50)), rs(pct(steps[0], 99)), rs(pct(steps[1], 50)), rs(pct(steps[1], 99)),
		rs(pct(steps[2], 50)), rs(pct(steps[2], 99)), rs(pct(steps[3], 50)), rs(pct(steps[3], 99)))
	return result{
		name: "webhook receipt → build Job created (signed GitHub push on loopback → the Job with the build's id in nebula-build, seen by a watch)",
		measured: fmt.Sprintf("p50 %s, p99 %s (min %s, max %s) over %d pushes, one at a time; webhook answered 200 in p50 %s, p99 %s; a first push before them, not counted: %s; %s",
			r(pct(lat, 50)), r(pct(lat, 99)), r(lat[0]), r(lat[len(lat)-1]), len(lat), r(pct(answers, 50)), r(pct(answers, 99)), r(first), stepText),
		baseline: "–", ratio: "–", target: "measured",
	}, nil
}

// pushed is one push: its build, its delivery, when it was sent and how
// long the webhook took to answer.
type pushed struct {
	build, delivery string
	sent            time.Time
	answered        time.Duration
}

// buildsNotes describe the builds rows under "What each row measures".
const buildsNotes = `- **webhook receipt → build Job created**: a whole control plane (server.Run, in the
  benchmark's process, loopback HTTP), the real API server of the tests with the install
  manifest created object by object (installtest.Objects/Create), and an agent in process as
  the manifest's service account with builds in nebula-build (as agent/build_e2e_test.go
  wires it). A Git service tracks master in one environment; each push is GitHub's
  branch-push example with a new random commit in place of the example's, signed with the
  project's rotated secret (X-Hub-Signature-256) and sent to the project's webhook. The time
  runs from sending the request to a watch on the Jobs of nebula-build (not polling) seeing
  the Job labelled with the build id the webhook answered. One push at a time: the next is
  sent as soon as the last one's Job is seen, so each push also cancels the build before it
  (its Job is deleted) and the builds that finish deploy (kwok finishes build pods). One
  push before the 50 warms up and is reported apart; with 50 pushes the p99 is the 49th.
  The steps come from the events' times (delivery recorded, build queued, build started).
- **webhook verification throughput**: forge.Verify (GitHub's headers, the SHA-256
  signature, the delivery id, the push parsed and cleaned) of GitHub's 8.9 KB branch-push
  example, one goroutine, against a bare HMAC-SHA256 of the same body and hmac.Equal, in
  turn, each run ` + "`-duration`" + ` long; medians over ` + "`-runs`" + ` runs. The HMAC's share of a
  Verify is the ratio of their rates.
`
