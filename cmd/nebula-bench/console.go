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

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/console"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
)

// consoleServices is the size of the organisation the console's page
// render is measured with.
const consoleServices = 1000

// benchConsole measures the project page of the console (the matrix of
// environments × services, 50 services a page) for a project of 1,000
// services in one environment, against reading the same data through the
// JSON API over loopback HTTP, one request after another as a client
// would: the project, its environments, the first page of 50 rows of the
// project matrix (every cell: current release, latest deployment, held,
// paused) and the clusters (the new-environment form), as the page does in
// process. It measures the organisation overview the same way: projects,
// clusters (each one's status), deployments in progress, the last 10 audit
// log entries. The first 50 services are deployed (in progress: no
// agent runs); the others have no release.
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
	// The first page's services are deployed (through the command
	// handler, as the API's deploy route would: the image is already pinned
	// to its digest, and no registry answers here). No agent runs: each
	// deployment stays in progress, blocked on delivery, so the page's
	// cells carry a release and a deployment and the overview lists 50
	// deployments in progress.
	getJSON := func(path string, out any) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s answered %d", path, resp.StatusCode)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	var (
		me   api.MeResponse
		proj api.Project
		env  api.Environment
		svcs api.Page[api.Service]
	)
	for path, out := range map[string]any{"/api/v1/me": &me, "/api/v1/orgs/acme/projects/shop": &proj,
		"/api/v1/orgs/acme/projects/shop/environments/production": &env, "/api/v1/orgs/acme/projects/shop/services?limit=50": &svcs} {
		if err := getJSON(path, out); err != nil {
			return nil, err
		}
	}
	if len(me.Organisations) != 1 || len(svcs.Items) != 50 {
		return nil, fmt.Errorf("console: %d organisations, %d services on the first page", len(me.Organisations), len(svcs.Items))
	}
	cmd, err := dispatch.New(dispatch.Config{Store: eventstore.New(pool, nil)})
	if err != nil {
		return nil, err
	}
	as := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: me.User.ID, Name: me.User.Email}, Person: me.User.ID}
	for _, sv := range svcs.Items {
		if _, err := cmd.Project(ctx, as, me.Organisations[0].ID, proj.ID, domain.Deploy{EnvironmentID: env.ID, ServiceID: sv.ID,
			ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(), Image: sv.Source.Image}); err != nil {
			return nil, fmt.Errorf("console: deploying %s: %w", sv.Name, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var inProgress api.Page[api.DeploymentInProgress]
		if err := getJSON("/api/v1/orgs/acme/deployments?limit=1000", &inProgress); err != nil {
			return nil, err
		}
		if len(inProgress.Items) == 50 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("console: %d of 50 deployments projected after a minute", len(inProgress.Items))
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
		for _, path := range []string{p, p + "/environments?limit=1000", p + "/matrix?limit=50", "/api/v1/orgs/acme/clusters?limit=1000"} {
			if err := get(srv.URL, path, false); err != nil {
				return err
			}
		}
		return nil
	}
	overview := func() error { return get(web.URL, "/o/acme", true) }
	overviewAPI := func() error {
		o := "/api/v1/orgs/acme"
		for _, path := range []string{o + "/projects?limit=1000", o + "/clusters?limit=1000", o + "/clusters/eu-1",
			o + "/deployments?status=in-progress&limit=1000", o + "/audit?limit=10"} {
			if err := get(srv.URL, path, false); err != nil {
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
	log.Printf("console: %d renders of the overview, and the same data through the API", runs)
	om, err := measure(overview)
	if err != nil {
		return nil, err
	}
	oam, err := measure(overviewAPI)
	if err != nil {
		return nil, err
	}
	row := func(name string, page, viaAPI []float64, requests int) result {
		p99, a99 := consolePct(page, 0.99), consolePct(viaAPI, 0.99)
		return result{
			name:     name,
			measured: fmt.Sprintf("p99 %.0f, p50 %.0f over %d renders", p99, consolePct(page, 0.5), runs),
			baseline: fmt.Sprintf("p99 %.0f, p50 %.0f: the same data through the JSON API (%d requests)", a99, consolePct(viaAPI, 0.5), requests),
			ratio:    fmt.Sprintf("%.2f×", p99/a99),
			target:   "≤ 50 ms",
			verdict:  verdict(p99 <= 50, fmt.Sprintf("%.0f ms over", p99-50)),
		}
	}
	return []result{
		row(fmt.Sprintf("console project page (%d services × 1 environment, 50 a page) render p99 (ms)", consoleServices), pm, am, 4),
		row(fmt.Sprintf("console organisation overview (%d services) render p99 (ms)", consoleServices), om, oam, 5),
	}, nil
}

// consolePct is the q quantile of xs (nearest rank).
func consolePct(xs []float64, q float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
