package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/internal/config"
	"github.com/nebulactrl/nebulactrl/internal/server"
)

// plane is a control plane (nebula serve) running in this process; stop
// shuts it down and waits for it to end.
type plane struct {
	addr string
	stop func()
}

// startPlane starts a control plane on cfg.Listen and waits until it
// listens.
func startPlane(ctx context.Context, cfg config.Config) (*plane, error) {
	sctx, cancel := context.WithCancel(ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Run(sctx, cfg, server.Options{Version: "bench", Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 5 * time.Second,
			Ready: func(a string) { ready <- a }})
	}()
	select {
	case a := <-ready:
		return &plane{addr: a, stop: func() {
			cancel()
			if err := <-done; err != nil {
				log.Printf("control plane stopped: %v", err)
			}
		}}, nil
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("starting the control plane: %w", err)
	}
}

// apiToken sets up the first user and organisation (acme) through the API
// and returns the user's token: the storm's API reads are a user's.
func apiToken(ctx context.Context, url string, roots *x509.CertPool) (string, *http.Client, error) {
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, MaxIdleConnsPerHost: 4}}
	body := `{"email":"bench@example.com","password":"correct horse battery staple","organisation":"acme"}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/v1/setup", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return "", nil, fmt.Errorf("agents: setting up the first user: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", nil, fmt.Errorf("agents: setup answered %d: %s", resp.StatusCode, raw)
	}
	var out struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", nil, fmt.Errorf("agents: setup's answer: %w", err)
	}
	return out.Token, hc, nil
}

// apiReads issues GET /api/v1/orgs/acme/projects one after another until
// stop is closed, and returns the latencies of the reads answered 200 and
// how many were not (refused while the control plane was down, or another
// status).
func apiReads(ctx context.Context, hc *http.Client, url, token string, stop <-chan struct{}) (lat []time.Duration, failed int) {
	for {
		select {
		case <-stop:
			return lat, failed
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/v1/orgs/acme/projects", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		t0 := time.Now()
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			failed++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		lat = append(lat, time.Since(t0))
		time.Sleep(5 * time.Millisecond)
	}
}

// stormRow drops every agent at once by restarting the control plane (the
// same address, a new process state: new TLS session keys, so every agent
// makes a full handshake), and measures the time from the drop until every
// agent said hello again and holds its latest revision (base), while a
// user's API reads run.
func stormOnce(ctx context.Context, cfg config.Config, p **plane, got *received, envs []benchEnv, base map[string]int, url, token string, hc *http.Client) (stormRun, error) {
	n := len(envs)
	log.Printf("agents: reconnect storm: restarting the control plane under %d agents", n)
	stopReads := make(chan struct{})
	var lat []time.Duration
	var failed int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); lat, failed = apiReads(ctx, hc, url, token, stopReads) }()
	stopProfile := startPhaseProfile("storm")
	dropped := time.Now()
	(*p).stop()
	down := time.Since(dropped)
	np, err := startPlane(ctx, cfg)
	if err != nil {
		stopProfile()
		close(stopReads)
		wg.Wait()
		return stormRun{}, err
	}
	*p = np
	up := time.Since(dropped)
	ok := got.waitWelcomed(envs, dropped, base, 180*time.Second)
	stopProfile()
	close(stopReads)
	wg.Wait()
	if !ok {
		missing := 0
		for _, e := range envs {
			if !got.welcomedSince(e.id, dropped, base[e.id]) {
				missing++
			}
		}
		return stormRun{}, fmt.Errorf("agents: %d of %d agents had not connected again with their latest revision 180 s after the restart", missing, n)
	}
	var converged time.Time
	for _, e := range envs {
		if t := got.welcomeAt(e.id); t.After(converged) {
			converged = t
		}
	}
	total := converged.Sub(dropped)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var p99 time.Duration
	if len(lat) > 0 {
		p99 = lat[len(lat)*99/100]
	}
	return stormRun{total: total, down: down, up: up, readsP99: p99, answered: len(lat), failed: failed}, nil
}

// stormRun is one reconnect storm: from the drop until every agent holds
// its latest revision again (total); how long the old process took to stop
// (down) and the new one to listen (up); the API reads meanwhile.
type stormRun struct {
	total, down, up  time.Duration
	readsP99         time.Duration
	answered, failed int
}

// row reports this run, the median of runs, with the spread of all.
func (r stormRun) row(n int, runs []stormRun) result {
	return result{
		name: fmt.Sprintf("reconnect storm: the control plane restarted under %d agents, until every agent is connected again and holds its latest revision (backoff 1 s doubling, ±50 %% jitter)", n),
		measured: fmt.Sprintf("%s, median of %d restarts (runs %s; in the median run the old process took %s to stop, the new one listened %s after the drop); API reads meanwhile: p99 %s over %d answered, %d not answered (while no process listened)",
			r.total.Round(time.Millisecond), len(runs), durationSpread(runs, func(s stormRun) time.Duration { return s.total }), r.down.Round(time.Millisecond), r.up.Round(time.Millisecond),
			r.readsP99.Round(100*time.Microsecond), r.answered, r.failed),
		baseline: "–", ratio: "–", target: "≤ 60 s",
		verdict: verdict(r.total <= 60*time.Second, fmt.Sprintf("%s over", (r.total-60*time.Second).Round(time.Millisecond))),
	}
}

// fanoutRow provisions a project of 500 environments, each on a cluster of
// its own with an agent (a second child process), and measures one change
// to the project's service (every environment recompiled), from the command
// to the 500th agent holding its new revision.
func fanoutRow(ctx context.Context, f flags, url, dir, certFile string, roots *x509.CertPool, pool *pgxpool.Pool) (result, error) {
	const size = 500
	log.Printf("agents: a project of %d environments, each on its own cluster", size)
	runs := max(f.runs, 1)
	envs, creds, fe, err := provisionProject(ctx, pool, url, roots, size, runs)
	if err != nil {
		return result{}, err
	}
	credFile := dir + "/fanout-creds.json"
	b, _ := json.Marshal(creds)
	if err := os.WriteFile(credFile, b, 0o600); err != nil {
		return result{}, err
	}
	child := exec.CommandContext(ctx, os.Args[0], "-child-agents", credFile, "-child-url", url, "-child-ca", certFile)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := child.Start(); err != nil {
		return result{}, err
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	got := newReceived()
	go got.read(out)
	if !got.waitBeyond(envs, map[string]int{}, 120*time.Second) {
		return result{}, fmt.Errorf("agents: not every agent of the %d-environment project received its first revision", size)
	}
	time.Sleep(time.Second)
	type fanoutRun struct{ total, accepted, first time.Duration }
	var all []fanoutRun
	for run := range runs {
		base := got.snapshot(envs)
		t0 := time.Now()
		if err := changeService(ctx, fe, run); err != nil {
			return result{}, err
		}
		accepted := time.Since(t0)
		if !got.waitBeyond(envs, base, 120*time.Second) {
			return result{}, fmt.Errorf("agents: not every agent of the %d-environment project received the change", size)
		}
		var first, last time.Time
		for _, e := range envs {
			t := got.heldAt(e.id, base[e.id])
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		all = append(all, fanoutRun{total: last.Sub(t0), accepted: accepted, first: first.Sub(t0)})
		time.Sleep(time.Second)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].total < all[j].total })
	m := all[len(all)/2]
	return result{
		name: fmt.Sprintf("one change to a project of %d environments, each on its own cluster (a service deleted: every one recompiled, every document changed), command → the %dth agent holds its revision (%d other agents connected)", size, size, f.agents),
		measured: fmt.Sprintf("%s, median of %d changes (runs %s; in the median run the command was accepted in %s, the first agent held its revision %s after the command)",
			m.total.Round(time.Millisecond), len(all), durationSpread(all, func(r fanoutRun) time.Duration { return r.total }), m.accepted.Round(time.Millisecond), m.first.Round(time.Millisecond)),
		baseline: "–", ratio: "–", target: "≤ 3 s",
		verdict: verdict(m.total <= 3*time.Second, fmt.Sprintf("%s over", (m.total-3*time.Second).Round(time.Millisecond))),
	}, nil
}
