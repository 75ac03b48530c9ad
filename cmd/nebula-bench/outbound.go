package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/client"
	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/mcpserver"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/server"
)

// The other users of the event stream (-only webhooks, -only mcp): a whole
// control plane (server.Run, in this process, plain HTTP on loopback) and
// a webhook receiver on loopback that answers 204 at once.

const (
	hookLatencyRuns = 200
	hookBurst       = 1000
	mcpRuns         = 200
)

// outboundPlane is a control plane with an organisation acme, its owner's
// token, a cluster and a project, and a receiver listed as allowed.
type outboundPlane struct {
	url, token string
	api        *client.Client
	receiver   *hookReceiver
	// db reads the deliveries written (the backlog of a burst).
	db   *pgxpool.Pool
	stop func()
}

// hookReceiver records when each change set's changeset.opened arrived.
type hookReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	got      map[string]time.Time
	waiters  map[string]chan struct{}
	received atomic.Int64
	// gate, while set, holds every delivery's answer until it is closed.
	gate atomic.Pointer[chan struct{}]
}

func newHookReceiver() *hookReceiver {
	h := &hookReceiver{got: map[string]time.Time{}, waiters: map[string]chan struct{}{}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g := h.gate.Load(); g != nil {
			<-*g
		}
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Type string `json:"type"`
			Data struct {
				ChangeSetID string `json:"changeSetId"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &p) != nil || r.Header.Get("webhook-signature") == "" {
			http.Error(w, "not a signed webhook", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		if p.Type != "changeset.opened" {
			return
		}
		h.received.Add(1)
		h.mu.Lock()
		if _, dup := h.got[p.Data.ChangeSetID]; !dup {
			h.got[p.Data.ChangeSetID] = at
			if ch, ok := h.waiters[p.Data.ChangeSetID]; ok {
				close(ch)
			}
		}
		h.mu.Unlock()
	}))
	return h
}

// wait returns when the change set's webhook arrived, and when.
func (h *hookReceiver) wait(ctx context.Context, id string) (time.Time, error) {
	h.mu.Lock()
	if at, ok := h.got[id]; ok {
		h.mu.Unlock()
		return at, nil
	}
	ch := make(chan struct{})
	h.waiters[id] = ch
	h.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return time.Time{}, fmt.Errorf("webhooks: no changeset.opened for %s within 30 s", id)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[id], nil
}

func startOutboundPlane(ctx context.Context, cluster *pgcluster.Cluster, db string) (*outboundPlane, error) {
	pool, err := newDB(ctx, cluster, db)
	if err != nil {
		return nil, err
	}
	rcv := newHookReceiver()
	key, _ := seal.GenerateMasterKey()
	cfg := config.Config{DatabaseURL: cluster.URL(db), SecretKey: key, Listen: "127.0.0.1:0", PublicURL: "http://127.0.0.1", LogLevel: "error",
		WebhookAllowedHosts: []string{strings.TrimPrefix(rcv.srv.URL, "http://")}}
	sctx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := server.Run(sctx, cfg, server.Options{Version: "bench", Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
			Ready: func(a string) { ready <- a }}); err != nil && sctx.Err() == nil {
			log.Printf("control plane: %v", err)
		}
	}()
	stop := func() { cancel(); <-done; rcv.srv.Close(); pool.Close() }
	var addr string
	select {
	case addr = <-ready:
	case <-done:
		rcv.srv.Close()
		pool.Close()
		return nil, fmt.Errorf("webhooks: the control plane did not start")
	}
	url := "http://" + addr
	token, err := setupFirstUser(ctx, url)
	if err != nil {
		stop()
		return nil, err
	}
	c, err := client.New(url, token)
	if err != nil {
		stop()
		return nil, err
	}
	if _, err := c.CreateCluster(ctx, "acme", api.CreateClusterRequest{Name: "eu-1"}); err != nil {
		stop()
		return nil, err
	}
	if _, err := c.CreateProject(ctx, "acme", "shop"); err != nil {
		stop()
		return nil, err
	}
	return &outboundPlane{url: url, token: token, api: c, receiver: rcv, db: pool, stop: stop}, nil
}

// protectedEnvironments makes n protected environments in project; a
// variable set in each opens a change set there (one open change set per
// environment). A project is one stream: its environments are made one
// after another.
func (p *outboundPlane) protectedEnvironments(ctx context.Context, project string, n int) ([]string, error) {
	if project != "shop" {
		if _, err := p.api.CreateProject(ctx, "acme", project); err != nil {
			return nil, err
		}
	}
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("env-%04d", i)
		if _, err := p.api.CreateEnvironment(ctx, "acme", project, api.CreateEnvironmentRequest{Name: names[i], Cluster: "eu-1", Protected: true}); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// openChangeSet sets a variable in a protected environment: the change
// waits in a change set, whose id the answer names.
func (p *outboundPlane) openChangeSet(ctx context.Context, project, env string) (string, error) {
	res, err := p.api.SetVariables(ctx, "acme", project, env, "", []api.VariableInput{{Name: "LOG_LEVEL", Value: "debug"}})
	if err != nil {
		return "", err
	}
	if res.ChangeSet == nil {
		return "", fmt.Errorf("webhooks: setting a variable in protected %s opened no change set", env)
	}
	return res.ChangeSet.ID, nil
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s))*p+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// benchWebhooks: (1) a change's command sent -> its changeset.opened
// webhook received, one change at a time, against the command's own answer;
// (2) a burst of changes, one per environment, sent by 8 clients at once:
// the first command -> the last webhook received, against signed POSTs
// from 16 goroutines (the sender's concurrency) straight to the receiver.
func benchWebhooks(ctx context.Context, cluster *pgcluster.Cluster, f flags) ([]result, error) {
	load := newLoadSampler()
	p, err := startOutboundPlane(ctx, cluster, "webhooks")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	log.Printf("webhooks: %d + %d protected environments", hookLatencyRuns, hookBurst)
	single, err := p.protectedEnvironments(ctx, "shop", hookLatencyRuns)
	if err != nil {
		return nil, err
	}
	// The burst's 8 clients each change the environments of a project of
	// their own (a project is one stream: writers of one project contend).
	const clients = 8
	var burst [][]string
	for k := range clients {
		envs, err := p.protectedEnvironments(ctx, fmt.Sprintf("burst-%d", k), hookBurst/clients)
		if err != nil {
			return nil, err
		}
		burst = append(burst, envs)
	}
	if _, err := p.api.CreateWebhookEndpoint(ctx, "acme", api.CreateWebhookRequest{URL: p.receiver.srv.URL + "/hook", EventTypes: []string{"changeset.opened"}}); err != nil {
		return nil, err
	}

	log.Printf("webhooks: %d changes one at a time", hookLatencyRuns)
	var toHook, toAnswer []time.Duration
	for _, env := range single {
		start := time.Now()
		id, err := p.openChangeSet(ctx, "shop", env)
		if err != nil {
			return nil, err
		}
		answered := time.Since(start)
		at, err := p.receiver.wait(ctx, id)
		if err != nil {
			return nil, err
		}
		toHook = append(toHook, at.Sub(start))
		toAnswer = append(toAnswer, answered)
	}
	latency := result{
		name:     fmt.Sprintf("command sent → its webhook received (changeset.opened, %d changes one at a time, loopback)", hookLatencyRuns),
		measured: fmt.Sprintf("p50 %s, p99 %s", ms(percentile(toHook, 0.5)), ms(percentile(toHook, 0.99))),
		baseline: fmt.Sprintf("the command's own answer: p50 %s, p99 %s", ms(percentile(toAnswer, 0.5)), ms(percentile(toAnswer, 0.99))),
		ratio:    fmt.Sprintf("%.1fx", float64(percentile(toHook, 0.5))/float64(percentile(toAnswer, 0.5))),
		target:   "none in the spec",
	}
	latency.verdict = fmt.Sprintf("measured (%s, `-only webhooks`, load average %s)", time.Now().UTC().Format("2006-01-02 15:04 MST"), load.stop())

	load = newLoadSampler()
	log.Printf("webhooks: a burst of %d changes from %d clients", hookBurst, clients)
	before := p.receiver.received.Load()
	var written int
	if err := p.db.QueryRow(ctx, `SELECT count(*) FROM outbound_webhook_deliveries`).Scan(&written); err != nil {
		return nil, err
	}
	// The receiver holds its answers while the burst is sent and until every
	// delivery is written: then the sender works through a backlog.
	gate := make(chan struct{})
	p.receiver.gate.Store(&gate)
	ids := make([]string, 0, hookBurst)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for k, envs := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, env := range envs {
				id, err := p.openChangeSet(ctx, fmt.Sprintf("burst-%d", k), env)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	issued := time.Since(start)
	if err, ok := firstErr.Load().(error); ok {
		close(gate)
		return nil, err
	}
	for {
		var n int
		if err := p.db.QueryRow(ctx, `SELECT count(*) FROM outbound_webhook_deliveries`).Scan(&n); err != nil {
			close(gate)
			return nil, err
		}
		if n >= written+hookBurst {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	backlogAt := time.Now()
	backlog := backlogAt.Sub(start)
	p.receiver.gate.Store(nil)
	close(gate)
	var last time.Time
	for _, id := range ids {
		at, err := p.receiver.wait(ctx, id)
		if err != nil {
			return nil, err
		}
		if at.After(last) {
			last = at
		}
	}
	delivered := last.Sub(start)
	drained := last.Sub(backlogAt)
	if got := p.receiver.received.Load() - before; got != hookBurst {
		log.Printf("webhooks: %d deliveries of %d change sets (at least once: a retried delivery arrives again)", got, hookBurst)
	}
	raw, err := rawPosts(ctx, p.receiver.srv.URL+"/hook", f.duration)
	if err != nil {
		return nil, err
	}
	rate := float64(hookBurst) / drained.Seconds()
	throughput := result{
		name: fmt.Sprintf("deliveries/s to one fast receiver (a backlog of %d deliveries, from a burst of %d changes by %d clients)", hookBurst, hookBurst, clients),
		measured: fmt.Sprintf("%.0f/s: the backlog sent in %.2f s (the commands took %.2f s to send, %.0f/s; every delivery was written %.2f s after the first command, the last received %.2f s after it)",
			rate, drained.Seconds(), issued.Seconds(), float64(hookBurst)/issued.Seconds(), backlog.Seconds(), delivered.Seconds()),
		baseline: fmt.Sprintf("%.0f signed POSTs/s straight to the receiver (16 goroutines)", raw),
		ratio:    fmt.Sprintf("%.0f %%", 100*rate/raw),
		target:   "none in the spec",
	}
	throughput.verdict = fmt.Sprintf("measured (%s, `-only webhooks`, load average %s)", time.Now().UTC().Format("2006-01-02 15:04 MST"), load.stop())
	return []result{latency, throughput}, nil
}

// rawPosts is the receiver's ceiling: POSTs of a payload of the same size
// with the three headers, from 16 goroutines, for d.
func rawPosts(ctx context.Context, url string, d time.Duration) (float64, error) {
	body := `{"type":"changeset.opened","timestamp":"2026-12-02T00:00:00Z","data":{"orgId":"3f1c8c52-0000-4000-8000-000000000000","changeSetId":"raw"}}`
	var n atomic.Int64
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	start := time.Now()
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("webhook-id", "msg_raw")
				req.Header.Set("webhook-timestamp", fmt.Sprint(time.Now().Unix()))
				req.Header.Set("webhook-signature", "v1,cmF3")
				resp, err := hc.Do(req)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(n.Load()) / time.Since(start).Seconds(), nil
}

// benchMCP: an MCP tool call that reads (list_projects, with the Go SDK's
// client over streamable HTTP) against the same read through the REST API
// (GET /api/v1/orgs/acme/projects), one call after another, in turn.
func benchMCP(ctx context.Context, cluster *pgcluster.Cluster) (result, error) {
	load := newLoadSampler()
	p, err := startOutboundPlane(ctx, cluster, "mcp")
	if err != nil {
		return result{}, err
	}
	defer p.stop()
	hc := &http.Client{Transport: &bearerTransport{token: p.token, base: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "nebula-bench", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: p.url + mcpserver.Path, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil)
	if err != nil {
		return result{}, err
	}
	defer cs.Close()
	callMCP := func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_projects", Arguments: map[string]any{"org": "acme"}})
		if err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("mcp: list_projects failed: %v", res.Content)
		}
		return nil
	}
	callREST := func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/api/v1/orgs/acme/projects", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("mcp: the REST read answered %d", resp.StatusCode)
		}
		return nil
	}
	// A token may call 10 tools a second (60 at once): the calls are paced
	// under that, as an assistant's are.
	pace := time.NewTicker(120 * time.Millisecond)
	defer pace.Stop()
	for range 20 { // warm both paths up
		<-pace.C
		if err := callMCP(); err != nil {
			return result{}, err
		}
		if err := callREST(); err != nil {
			return result{}, err
		}
	}
	log.Printf("mcp: %d reads through each", mcpRuns)
	var viaMCP, viaREST []time.Duration
	for range mcpRuns {
		<-pace.C
		start := time.Now()
		if err := callMCP(); err != nil {
			return result{}, err
		}
		viaMCP = append(viaMCP, time.Since(start))
		start = time.Now()
		if err := callREST(); err != nil {
			return result{}, err
		}
		viaREST = append(viaREST, time.Since(start))
	}
	r := result{
		name:     fmt.Sprintf("MCP tool call that reads (list_projects, Go SDK client, streamable HTTP, %d calls, loopback)", mcpRuns),
		measured: fmt.Sprintf("p50 %s, p99 %s", ms(percentile(viaMCP, 0.5)), ms(percentile(viaMCP, 0.99))),
		baseline: fmt.Sprintf("the same read through the REST API: p50 %s, p99 %s", ms(percentile(viaREST, 0.5)), ms(percentile(viaREST, 0.99))),
		ratio:    fmt.Sprintf("%.2fx", float64(percentile(viaMCP, 0.5))/float64(percentile(viaREST, 0.5))),
		target:   "none in the spec",
	}
	r.verdict = fmt.Sprintf("measured (%s, `-only mcp`, load average %s)", time.Now().UTC().Format("2006-01-02 15:04 MST"), load.stop())
	return r, nil
}

type bearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b *bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

const outboundNotes = `- **command sent → its webhook received**: a whole control plane (server.Run, in the
  benchmark's process, plain HTTP on loopback) with one endpoint for ` + "`changeset.opened`" + ` and a
  receiver on loopback that answers 204 at once (listed in NEBULACTRL_WEBHOOK_ALLOWED_HOSTS). One
  change at a time: a variable set in a protected environment (the change set opens), from
  sending the request to the receiver holding the signed delivery naming that change set: the
  command, the webhooks' subscription writing the delivery, the sender leasing and signing it,
  the POST. The baseline is the command's own answer (the same requests).
- **deliveries/s to one fast receiver**: 1,000 such changes (one per environment) sent by 8
  clients at once, each changing the environments of a project of its own, while the receiver
  holds its answers; once all 1,000 deliveries are written (counted in the database), the
  receiver answers, and the rate is the 1,000 over the time to the last one received: the
  sender working through a backlog (16 at a time per replica). The
  baseline is the receiver's ceiling: POSTs of a payload of the same size with the three
  headers from 16 goroutines (the sender's concurrency per replica), each run ` + "`-duration`" + ` long.
- **MCP tool call that reads**: list_projects through the Go SDK's client (streamable HTTP,
  stateless: each call one POST, the token checked, the tool calling the REST route in
  process) against GET /api/v1/orgs/acme/projects with the same token over the same loopback,
  in turn, after 20 warm-up calls of each, one pair every 120 ms (a token may call 10 tools a
  second).
`
