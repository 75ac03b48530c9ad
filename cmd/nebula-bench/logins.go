package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
	"github.com/nebulactrl/nebulactrl/internal/image"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
	"github.com/nebulactrl/nebulactrl/internal/seal"
	"github.com/nebulactrl/nebulactrl/internal/telemetry"
	"github.com/nebulactrl/nebulactrl/projections"
)

// loginFlood is how many failing sign-ins run at once against the API.
const loginFlood = 24

// benchLogins measures an authenticated GET's p99 latency while 24 clients
// sign in with wrong passwords as fast as they are answered, against the
// same GETs without them: password hashing (bcrypt) must not starve the
// rest of the API. Throttling is set out of reach, so that every attempt
// the hashing gate admits is really hashed (the worst case: an attacker
// spread over many addresses); the gate itself (half the processors, a
// queue of 16, 429 beyond) is what is measured.
func benchLogins(ctx context.Context, cluster *pgcluster.Cluster, f flags) ([]result, error) {
	pool, err := newDB(ctx, cluster, "logins")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	srv, token, stop, err := loginAPI(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer stop()
	var out []result
	for _, spin := range []bool{false, true} {
		r, err := loginFloodRow(ctx, srv, token, f, spin)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// loginFloodRow measures one row: the flood's clients wait out a 429's
// Retry-After (as the API asks), or, with spin, repeat at once.
func loginFloodRow(ctx context.Context, srv *httptest.Server, token string, f flags, spin bool) (result, error) {
	get := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	const requests = 1000
	measure := func() ([]float64, error) {
		ms := make([]float64, 0, requests)
		for i := 0; i < requests+50; i++ {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/orgs/acme/projects", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			start := time.Now()
			resp, err := get.Do(req)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return nil, fmt.Errorf("GET answered %d", resp.StatusCode)
			}
			if i >= 50 {
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
		}
		sort.Float64s(ms)
		return ms, nil
	}
	pct := func(ms []float64, p float64) float64 { return ms[int(float64(len(ms)-1)*p)] }
	var base99, base50, load99, load50 []float64
	var hashed, refused, other atomic.Int64
	var elapsed time.Duration
	for run := 0; run < f.runs; run++ {
		log.Printf("logins: run %d: %d authenticated GETs alone", run+1, requests)
		ms, err := measure()
		if err != nil {
			return result{}, err
		}
		base99, base50 = append(base99, pct(ms, 0.99)), append(base50, pct(ms, 0.5))

		log.Printf("logins: run %d: the same with %d failing sign-ins in parallel (repeating a 429 at once: %v)", run+1, loginFlood, spin)
		fctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		flood := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loginFlood}}
		for i := 0; i < loginFlood; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, _ := json.Marshal(api.LoginRequest{Email: fmt.Sprintf("nobody-%d@example.com", i), Password: "not the password at all"})
				for fctx.Err() == nil {
					req, _ := http.NewRequestWithContext(fctx, http.MethodPost, srv.URL+"/api/v1/sessions", bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					resp, err := flood.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusUnauthorized:
						hashed.Add(1)
					case http.StatusTooManyRequests:
						refused.Add(1)
						if !spin {
							select {
							case <-fctx.Done():
							case <-time.After(time.Second):
							}
						}
					default:
						other.Add(1)
						if other.Load() < 3 {
							log.Printf("logins: a sign-in answered %d", resp.StatusCode)
						}
					}
				}
			}()
		}
		// Let the gate fill before measuring.
		time.Sleep(time.Second)
		start := time.Now()
		ms, err = measure()
		elapsed += time.Since(start)
		cancel()
		wg.Wait()
		if err != nil {
			return result{}, err
		}
		load99, load50 = append(load99, pct(ms, 0.99)), append(load50, pct(ms, 0.5))
	}
	b, l := median(base99), median(load99)
	ratio := l / b
	verdict := "met"
	if ratio > 2 {
		verdict = "NOT MET"
	}
	name := fmt.Sprintf("authenticated GET p99 with %d parallel failing logins (ms)", loginFlood)
	if spin {
		name = fmt.Sprintf("the same, the %d clients repeating a 429 at once instead of after Retry-After", loginFlood)
	}
	return result{
		name: name,
		measured: fmt.Sprintf("p99 %.1f (runs %s), p50 %.1f; %.1f failing sign-ins hashed/s (401), %.0f/s answered 429", l, spreadMs(load99), median(load50),
			float64(hashed.Load())/elapsed.Seconds(), float64(refused.Load())/elapsed.Seconds()),
		baseline: fmt.Sprintf("p99 %.1f (runs %s), p50 %.1f without", b, spreadMs(base99), median(base50)),
		ratio:    fmt.Sprintf("%.2f×", ratio),
		target:   "≤ 2×",
		verdict:  verdict,
	}, nil
}

func spreadMs(xs []float64) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.1f–%.1f", s[0], s[len(s)-1])
}

// loginAPI serves the API on pool with the projections running, with the
// first user (setup) and a project: it returns the server, the user's token
// and how to stop it all.
func loginAPI(ctx context.Context, pool *pgxpool.Pool) (*httptest.Server, string, func(), error) {
	key, err := seal.GenerateMasterKey()
	if err != nil {
		return nil, "", nil, err
	}
	mk, err := seal.ParseMasterKey(key)
	if err != nil {
		return nil, "", nil, err
	}
	store := eventstore.New(pool, nil)
	cmd, err := dispatch.New(dispatch.Config{Store: store})
	if err != nil {
		return nil, "", nil, err
	}
	sealer := seal.New(pool, mk, nil)
	proj, err := projections.New(projections.Config{Store: store, Keys: sealer})
	if err != nil {
		return nil, "", nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	waker := store.NewWaker("bench", projections.ProjectedChannel)
	go func() { _ = waker.Run(pctx) }()
	go func() { _ = store.RunNotifier(pctx) }()
	go func() { _ = proj.Run(pctx, waker.Subscribe()) }()
	a, err := httpapi.New(httpapi.Config{Pool: pool, Commands: cmd, Sealer: sealer, Images: image.NewResolver(image.Config{}),
		Telemetry: telemetry.New(pool, nil), Changed: waker.Changed, LoginLimit: 1 << 30})
	if err != nil {
		cancel()
		return nil, "", nil, err
	}
	srv := httptest.NewServer(a.Handler())
	stop := func() { srv.Close(); cancel() }
	post := func(path, token string, in, out any) error {
		body, _ := json.Marshal(in)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("POST %s answered %d: %s", path, resp.StatusCode, raw)
		}
		if out != nil {
			return json.Unmarshal(raw, out)
		}
		return nil
	}
	var setup api.SetupResponse
	if err := post("/api/v1/setup", "", api.SetupRequest{Email: "ada@example.com", Password: "correct horse battery staple", Organisation: "acme"}, &setup); err != nil {
		stop()
		return nil, "", nil, err
	}
	if err := post("/api/v1/orgs/acme/projects", setup.Token, map[string]string{"name": "shop"}, nil); err != nil {
		stop()
		return nil, "", nil, err
	}
	return srv, setup.Token, stop, nil
}
