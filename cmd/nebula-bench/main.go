// Command bench measures NebulaCtrl's quality bars against raw baselines
// measured in the same run on the same PostgreSQL, and writes the table to
// docs/benchmarks.md. Run it with `go tool task bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nebulactrl/nebulactrl/internal/database"
	"github.com/nebulactrl/nebulactrl/internal/pgcluster"
)

type result struct {
	name     string
	measured string
	baseline string
	ratio    string
	target   string
	verdict  string
	// when is stamped by the runner: the date the row was measured, the
	// machine's 1-minute load average during its benchmark, and how long
	// the benchmark took.
	when string
}

type flags struct {
	out      string
	runs     int
	duration time.Duration
	events   int
	only     string
	profile  string
	// agents is the count one agents benchmark runs with; agentCounts
	// every count the agents rows are measured at (-agents).
	agents      int
	agentCounts []int
	// latencyRuns is how many single changes the latency is measured over.
	latencyRuns int
	// statements loads pg_stat_statements and logs the statements that took
	// the database's time, after each benchmark.
	statements int
}

func main() {
	var f flags
	flag.StringVar(&f.out, "out", "docs/benchmarks.md", "where to write the report")
	flag.IntVar(&f.runs, "runs", 3, "runs of each comparison (medians are reported)")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "length of each throughput run")
	flag.IntVar(&f.events, "events", 1_000_000, "events for the projection rebuild")
	flag.StringVar(&f.only, "only", "", "run only this benchmark: appends, rebuild, agents, reconcile, commands, compile, varbytes, logins, console, builds, mesh, webhooks or mcp")
	agentCounts := flag.String("agents", "2000,10000", "simulated agents (one per cluster): the agents rows are measured at each of these counts")
	flag.IntVar(&f.latencyRuns, "latency-runs", 200, "single changes to measure the command-to-agent latency over")
	childCreds := flag.String("child-agents", "", "internal: run the simulated agents of this credentials file")
	childURL := flag.String("child-url", "", "internal: the control plane of the simulated agents")
	childCA := flag.String("child-ca", "", "internal: the CA of the control plane")
	flag.StringVar(&f.profile, "cpuprofile", "", "write a CPU profile of this process")
	memProfile := flag.String("memprofile", "", "write a profile of every allocation this process made (pprof's allocs) when it ends")
	flag.IntVar(&f.statements, "statements", 0, "log the N statements that took PostgreSQL's time (pg_stat_statements) after each benchmark: the profile of the database's side")
	flag.Parse()
	counts, err := parseCounts(*agentCounts)
	if err != nil {
		log.Fatalf("-agents: %v", err)
	}
	f.agentCounts = counts
	raiseFileLimit()
	if *childCreds != "" {
		if err := childAgents(*childCreds, *childURL, *childCA); err != nil {
			log.Fatal(err)
		}
		return
	}
	if f.profile != "" {
		pf, err := os.Create(f.profile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		defer writeAllocs(*memProfile)
	}
	if err := run(context.Background(), f); err != nil {
		log.Print(err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// writeAllocs writes the allocations profile to path.
func writeAllocs(path string) {
	pf, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	defer pf.Close()
	if err := pprof.Lookup("allocs").WriteTo(pf, 0); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, f flags) error {
	start := time.Now()
	dir, err := os.MkdirTemp("", "nebula-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Durable settings (fsync and synchronous_commit on): what production has.
	settings := map[string]string{"shared_buffers": "'512MB'", "max_wal_size": "'4GB'"}
	if f.statements > 0 {
		settings["shared_preload_libraries"] = "'pg_stat_statements'"
		settings["pg_stat_statements.track"] = "'all'"
	}
	cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Settings: settings})
	if err != nil {
		return err
	}
	defer cluster.Stop(context.WithoutCancel(ctx))
	pool, err := newDB(ctx, cluster, "bench")
	if err != nil {
		return err
	}
	defer pool.Close()

	var results []result
	one := func(r result, err error) ([]result, error) { return []result{r}, err }
	benches := []struct {
		name string
		run  func() ([]result, error)
	}{
		{"appends", func() ([]result, error) {
			log.Printf("appends: 8 writers, single events, %d runs of %s", f.runs, f.duration)
			r1, err := benchAppends(ctx, pool, f, 1)
			if err != nil {
				return nil, err
			}
			log.Printf("appends: 8 writers, 100 events per transaction")
			r100, err := benchAppends(ctx, pool, f, 100)
			return []result{r1, r100}, err
		}},
		{"rebuild", func() ([]result, error) { return one(rebuildAll(ctx, cluster, f)) }},
		{"agents", func() ([]result, error) {
			var all []result
			for _, n := range f.agentCounts {
				g := f
				g.agents = n
				rs, err := benchAgents(ctx, cluster, g)
				if err != nil {
					return nil, err
				}
				all = append(all, rs...)
			}
			return all, nil
		}},
		{"reconcile", func() ([]result, error) {
			log.Printf("applying an environment of 200 services to a real API server")
			return benchReconcile()
		}},
		{"commands", func() ([]result, error) { return one(benchDeployLatency(ctx, pool, 200)) }},
		{"compile", func() ([]result, error) {
			log.Printf("compiling a 1,000-service environment")
			return benchCompile(), nil
		}},
		{"logins", func() ([]result, error) { return benchLogins(ctx, cluster, f) }},
		{"console", func() ([]result, error) { return benchConsole(ctx, cluster) }},
		{"builds", func() ([]result, error) { return benchBuilds(ctx, cluster, f) }},
		{"mesh", func() ([]result, error) { return benchMesh(ctx, cluster) }},
		{"webhooks", func() ([]result, error) { return benchWebhooks(ctx, cluster, f) }},
		{"mcp", func() ([]result, error) { return one(benchMCP(ctx, cluster)) }},
		{"varbytes", func() ([]result, error) { return one(benchVariableBytes(ctx, cluster)) }},
	}
	if f.statements > 0 {
		defer topStatements(ctx, cluster, f.statements)
	}
	known := false
	for _, b := range benches {
		known = known || f.only == b.name
	}
	if f.only != "" && !known {
		return fmt.Errorf("-only %q: no such benchmark", f.only)
	}
	var failed []string
	for _, b := range benches {
		if f.only != "" && f.only != b.name {
			continue
		}
		if f.statements > 0 {
			if len(results) > 0 {
				topStatements(ctx, cluster, f.statements)
			}
			resetStatements(ctx, cluster)
			log.Printf("statements: measuring %s", b.name)
		}
		load, began := newLoadSampler(), time.Now()
		rs, err := b.run()
		if err != nil {
			// The others' rows are still written; this one's stay as they
			// were, and the run fails at the end.
			load.stop()
			log.Printf("%s: FAILED: %v", b.name, err)
			failed = append(failed, fmt.Sprintf("%s: %v", b.name, err))
			continue
		}
		when := fmt.Sprintf("%s, load %s, %s", began.UTC().Format("2006-01-02 15:04 MST"), load.stop(), time.Since(began).Round(time.Second))
		for i := range rs {
			rs[i].when = when
		}
		log.Printf("%s: done in %s", b.name, time.Since(began).Round(time.Second))
		results = append(results, rs...)
	}
	pgVersion := "unknown"
	if out, err := exec.Command(cluster.BinDir()+"/postgres", "--version").Output(); err == nil {
		pgVersion = strings.TrimSpace(string(out))
	}
	if err := write(f.out, results, pgVersion, f.only, len(failed) > 0, time.Since(start)); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d benchmarks failed (their earlier rows are kept): %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}

func rebuildAll(ctx context.Context, cluster *pgcluster.Cluster, f flags) (result, error) {

	rebuildPool, err := newDB(ctx, cluster, "rebuild")
	if err != nil {
		return result{}, err
	}
	defer rebuildPool.Close()
	log.Printf("projection rebuild of %d events", f.events)
	return benchRebuild(ctx, rebuildPool, f)
}

func newDB(ctx context.Context, c *pgcluster.Cluster, name string) (*pgxpool.Pool, error) {
	admin, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, err
	}
	pool, err := database.Open(ctx, c.URL(name))
	if err != nil {
		return nil, err
	}
	if err := database.Migrate(ctx, pool, nil); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// parseCounts reads -agents: positive counts, comma-separated.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number of agents (say, for example, 2000,10000)", part)
		}
		out = append(out, n)
	}
	return out, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func spread(xs []float64) string {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.0f–%.0f", s[0], s[len(s)-1])
}

// write writes the report to path. Rows this run did not measure (a run
// with -only) are kept from the report already there, each with its own date
// and load, and so is everything below the table (the notes, which explain
// the rows: edited by hand as they change).
func write(path string, results []result, pgVersion, only string, someFailed bool, took time.Duration) error {
	oldRows, oldNotes := readReport(path)
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `go tool task bench` (cmd/nebula-bench). Each bar is measured against a raw\n")
	b.WriteString("baseline in the same run, on the same private PostgreSQL cluster with durable settings\n")
	b.WriteString("(fsync and synchronous_commit on). Throughputs are medians of several runs, with the\n")
	b.WriteString("spread of the runs; on a shared 2-core machine absolute numbers move, ratios less. Each\n")
	b.WriteString("row says when it was measured, the machine's 1-minute load average during its benchmark\n")
	b.WriteString("and how long the benchmark took (`-only NAME` measures one benchmark again and keeps the\n")
	b.WriteString("other rows).\n\n")
	what := "every benchmark"
	if only != "" {
		what = "`-only " + only + "`"
	}
	if someFailed {
		what += ", some failed: their rows are from earlier runs"
	}
	fmt.Fprintf(&b, "Last run: %s (%s, %s) · %d CPUs · %s · %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), what,
		took.Round(time.Second), runtime.NumCPU(), runtime.Version(), pgVersion)
	b.WriteString("| benchmark | measured | baseline | ratio | target | result | measured on |\n|---|---|---|---|---|---|---|\n")
	fresh := map[string]string{}
	for _, r := range results {
		fresh[r.name] = fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.name, r.measured, r.baseline, r.ratio, r.target, r.verdict, r.when)
	}
	written := map[string]bool{}
	for _, row := range oldRows {
		if line, ok := fresh[row.name]; ok {
			b.WriteString(line + "\n")
			written[row.name] = true
			continue
		}
		if only == "" && !someFailed {
			continue // a full run measures every row again; a row it no longer has is gone
		}
		b.WriteString(row.line + "\n")
	}
	for _, r := range results {
		if !written[r.name] {
			b.WriteString(fresh[r.name] + "\n")
			written[r.name] = true
		}
	}
	if oldNotes != "" {
		b.WriteString("\n" + oldNotes)
	} else {
		b.WriteString(notes + buildsNotes + outboundNotes)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if !testing.Testing() {
		fmt.Print(b.String())
	}
	return nil
}

type reportRow struct{ name, line string }

// readReport reads the table rows (by benchmark name) and the text after
// the table of an earlier report; nothing when there is none.
func readReport(path string) ([]reportRow, string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, ""
	}
	var rows []reportRow
	lines := strings.Split(string(data), "\n")
	i := 0
	for i < len(lines) && !strings.HasPrefix(lines[i], "| benchmark |") {
		i++
	}
	if i == len(lines) {
		return nil, ""
	}
	for i += 2; i < len(lines) && strings.HasPrefix(lines[i], "| "); i++ {
		cells := strings.Split(lines[i], " | ")
		line := lines[i]
		if len(cells) == 6 {
			// A row from before rows carried their own date: its date, where it
			// has one, is in its result.
			line += " earlier run (see its result) |"
		}
		rows = append(rows, reportRow{name: strings.TrimPrefix(cells[0], "| "), line: line})
	}
	for i < len(lines) && !strings.HasPrefix(lines[i], "## ") {
		i++
	}
	return rows, strings.Join(lines[i:], "\n")
}

const notes = `
## What each row measures

- **single-event appends**: 8 goroutines, each appending one event per transaction to its own
  stream through the event store (the expected-version check and the insert in one round trip,
  its NOTIFY after the commit), against 8 goroutines doing raw single-row pgx INSERTs into a
  table of the same shape (same columns and indexes), the two alternated in slices.
- **100-event appends**: the same with 100 events per append, against raw 100-row INSERTs.
- **projection rebuild**: every projection (read models, release history, revisions, audit log
  with its hash chain) rebuilt from event 0 into fresh tables, from events of the product's
  real mix (configuration, releases, deployment lifecycle and revision events with their
  desired-state documents). The baseline is reading the same events without projecting.
- **agents**: simulated agents, one per cluster, as protocol clients over TLS in a child
  process, against one control plane (nebula serve, in the benchmark's process, on the same
  PostgreSQL), at each count of -agents (2,000 and 10,000 by default), each row naming its
  count. The benchmark raises its open-file limit to the hard limit (and logs it) and refuses
  to start below the agents' count plus 1,500. Memory is the control plane's heap and stacks
  after GC, before and after the agents connected, divided by their number, with the process's
  RSS growth beside it (one measure). The others are medians of -runs runs, with their spread.
  The burst: one variable set in each agent's environment (16 commands at a time), from the
  first command to the last agent holding its new revision (the commands' own issue time and
  when the last revision was recorded beside it). The latency: one change at a time to one
  environment, command accepted → its agent holds the revision, 200 changes a run (the bar
  holds for every run's p99). The reconnect storm: the control plane restarted on the same
  address, from the drop until every agent was welcomed again and holds its latest revision,
  with the p99 of a user's API reads meanwhile. The fan-out: a project of 500 environments,
  each on a cluster of its own with its agent; each run one command deletes another of its
  services (every environment recompiled, every document changed), from the command to the
  500th agent holding its new revision.
- **apply 200 services**: the agent's reconciler against the real API server of the tests
  (built by go tool task k8s): cold creates the namespace, 200 Secrets, Deployments and
  Services; warm applies the same document again, which reads and writes nothing but the
  applied revision.
- **mesh**: the peer lists of an organisation of 1,000 nodes, every cluster's compiled at once
  (what one change to the mesh recompiles), against encoding those lists as JSON; and, with a
  control plane and 10 clusters' agents as protocol clients over TLS (each with a node of its
  own first), the time from one agent sending a report with a new node to the last agent holding
  a mesh state with the node among its peers (the reactions' recompile, the revisions'
  notification, the delivery).
- **compile**: the pure compiler on an environment of 1,000 services (2 processes, 10
  variables with references and a secret, a domain each), with and without hashing.
- **deploy command latency**: one deploy command (load the project's stream, decide, append)
  in a project whose stream already holds 100,000 events of deploys and variable changes,
  against the same in a project with 100. Medians of 200 commands after a first one; deciding
  starts from the aggregate's snapshot (kept after 100 events, and as many bytes of events as
  the snapshot) and the project's state holds what the project is now, not every release it
  ever made.
- **database bytes per variable update**: a deployed service with 10, then (in a database of
  its own) 1,000 variables of about 100 bytes; after 50 updates of one variable, the growth of
  ` + "`pg_database_size`" + ` over 300 more, each a SetVariables of one value through the command
  handler, projected (read models, release history, revision compiled and projected, audit
  log). It counts events, snapshots, read models, indexes and dead rows, not WAL; reactions
  (the deployment streams) do not run. "events" is the bytes of the events' payloads alone.
  Each update records the variable, a release with that variable only and a revision with the
  service's entry (its new release) and the variable.
- **authenticated GET p99 with 24 parallel failing logins**: the API (in the benchmark's process,
  over loopback HTTP, the projections running) answers 1,000 GETs of an organisation's projects
  one after another, alone and then while 24 clients sign in with wrong passwords as fast as
  they are answered; p99 and p50 of the GETs, medians over the runs. Throttling per address is
  set out of reach so that every sign-in the hashing gate admits is really hashed (bcrypt cost
  12; the worst case, an attacker spread over many addresses): what is measured is the gate,
  half the processors for hashing and a queue of 16, the rest answered 429 at once. In the
  first row the clients wait out a 429's Retry-After (1 s) as the API asks; in the second they
  repeat at once.
- **console project page**: the web console (package console, served in the benchmark's
  process over loopback HTTP with the API it calls in process) renders the project page of a
  project of 1,000 services in one environment (the matrix shows 50 services a page: the
  project, its environments, one read of the API's project matrix for the page's cells, and
  the clusters for the new-environment form), 30 times after 3 warm-ups; the baseline reads the
  same data through the JSON API one request after another (4 requests). The first 50
  services are deployed (the deployments stay in progress: no agent runs); the others have no
  release.
- **console organisation overview**: the same console renders the organisation overview of
  that organisation (projects, clusters and their status, the deployments in progress through
  the API's one read of them, 50 here, and the last 10 audit log entries) 30 times after 3
  warm-ups, against the same 5 reads through the JSON API.
`
