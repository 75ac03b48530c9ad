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
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/console"
	"github.com/nebulactrl/nebulactrl/pgcluster"
)

// consoleServices is the size of the organisation the console's page
// render is measured with.
const consoleServices = 1000

// benchConsole measures the project page of the console (the matrix of
// environments × services, 50 services a page) for a project of 1,000
// services in one environment, against reading the same data through the
// JSON API over loopback HTTP, one request after another as a client
// would: the project, its environments, the first 50 services, the
// environment's desired state (held services) and each of the 50 services'
// target view (current release, latest deployment, paused deploys), as the
// page does in process (on 4 goroutines). The services have no release yet.
func benchConsole(ctx context.Context, cluster *pgcluster.Cluster) ([]result, error) {
	pool, err := newDB(ctx, cluster, "console")
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	srv, token, stop, err := loginAPI(ctx, pool)
	if err != nil {
		return nil, err
	}
	defer stop()
	do := func(method, path string, in any, want int) error {
		var body io.Reader
		if in != nil {
			b, _ := json.Marshal(in)
			body = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, body)
		req.Header.Set("Authorization", "Bearer "+token)
		if in != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s %s answered %d: %s", method, path, resp.StatusCode, raw)
		}
		return nil
	}
	log.Printf("console: creating a project of %d services", consoleServices)
	if err := do("POST", "/api/v1/orgs/acme/clusters", map[string]string{"name": "eu-1"}, http.StatusCreated); err != nil {
		return nil, err
	}
	if err := do("POST", "/api/v1/orgs/acme/projects/shop/environments", map[string]string{"name": "production", "cluster": "eu-1"}, http.StatusCreated); err != nil {
		return nil, err
	}
	for i := range consoleServices {
		svc := map[string]any{"name": fmt.Sprintf("svc-%04d", i), "image": "registry.example.com/api@sha256:" + strings.Repeat("a", 64)}
		if err := do("POST", "/api/v1/orgs/acme/projects/shop/services", svc, http.StatusCreated); err != nil {
			return nil, err
		}
	}
	con, err := console.New(console.Config{API: srv.Config.Handler})
	if err != nil {
		return nil, err
	}
	web := httptest.NewServer(con.Handler())
	defer web.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(base, path string, cookie bool) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if cookie {
			req.AddCookie(&http.Cookie{Name: "nebulactrl_session", Value: token})
		} else {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s answered %d", path, resp.StatusCode)
		}
		return nil
	}
	page := func() error { return get(web.URL, "/o/acme/p/shop", true) }
	viaAPI := func() error {
		p := "/api/v1/orgs/acme/projects/shop"
		for _, path := range []string{p, p + "/environments?limit=1000", p + "/services?limit=50", p + "/environments/production/state"} {
			if err := get(srv.URL, path, false); err != nil {
				return err
			}
		}
		for i := range 50 {
			if err := get(srv.URL, fmt.Sprintf("%s/environments/production/services/svc-%04d", p, i), false); err != nil {
				return err
			}
		}
		return nil
	}
	const runs = 30
	measure := func(f func() error) ([]float64, error) {
		var ms []float64
		for i := range runs + 3 {
			start := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			if i >= 3 {
				ms = append(ms, float64(time.Since(start))/1e6)
			}
		}
		return ms, nil
	}
	log.Printf("console: %d renders of the project page, and the same data through the API", runs)
	pm, err := measure(page)
	if err != nil {
		return nil, err
	}
	am, err := measure(viaAPI)
	if err != nil {
		return nil, err
	}
	p99, a99 := consolePct(pm, 0.99), consolePct(am, 0.99)
	return []result{{
		name:     fmt.Sprintf("console project page (%d services × 1 environment, 50 a page) render p99 (ms)", consoleServices),
		measured: fmt.Sprintf("p99 %.0f, p50 %.0f over %d renders", p99, consolePct(pm, 0.5), runs),
		baseline: fmt.Sprintf("p99 %.0f, p50 %.0f: the same data through the JSON API (54 requests)", a99, consolePct(am, 0.5)),
		ratio:    fmt.Sprintf("%.2f×", p99/a99),
		target:   "≤ 50 ms",
		verdict:  verdict(p99 <= 50, fmt.Sprintf("%.0f ms over", p99-50)),
	}}, nil
}

// consolePct is the q quantile of xs (nearest rank).
func consolePct(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
