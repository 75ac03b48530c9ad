package server

import (
	"context"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/projections"
)

// The control plane's own metrics, besides the API's (requests, streams,
// password hashes) and the Go runtime's: what an operator looks at to see
// inside. Their names follow the Prometheus conventions (checked with
// promlint in the tests).

// newCommandsCounter counts commands by type and outcome.
func newCommandsCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nebulactrl_commands_total",
		Help: "Commands decided on this replica, by command type and outcome (ok, invalid, not_found, conflict, forbidden, stale, error).",
	}, []string{"command", "outcome"})
}

// buildInfo is 1, labelled with the version and the Go version.
func buildInfo(version string) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nebulactrl_build_info", Help: "The control plane's version and the Go version that built it (always 1).",
	}, []string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return g
}

// agentsConnected is how many agents hold a connection to this replica.
func agentsConnected(count func() int) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "nebulactrl_agents_connected", Help: "Agents connected to this replica.",
	}, func() float64 { return float64(count()) })
}

// poolCollector exports the database pool's statistics at scrape time.
type poolCollector struct{ pool *pgxpool.Pool }

var (
	poolConnsDesc = prometheus.NewDesc("nebulactrl_db_pool_connections",
		"Database connections of this replica's pool by state (acquired: in use; idle; constructing).", []string{"state"}, nil)
	poolMaxDesc = prometheus.NewDesc("nebulactrl_db_pool_max_connections",
		"The most connections this replica's pool opens.", nil, nil)
	poolAcquiresDesc = prometheus.NewDesc("nebulactrl_db_pool_acquires_total",
		"Connections taken from the pool.", nil, nil)
	poolEmptyDesc = prometheus.NewDesc("nebulactrl_db_pool_empty_acquires_total",
		"Connections taken from the pool that had to wait because none was idle.", nil, nil)
	poolCanceledDesc = prometheus.NewDesc("nebulactrl_db_pool_canceled_acquires_total",
		"Waits for a connection that ended before one was free (the request was cancelled or timed out).", nil, nil)
	poolWaitDesc = prometheus.NewDesc("nebulactrl_db_pool_acquire_seconds_total",
		"Time spent taking connections from the pool, waiting included.", nil, nil)
)

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolConnsDesc, poolMaxDesc, poolAcquiresDesc, poolEmptyDesc, poolCanceledDesc, poolWaitDesc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(poolConnsDesc, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(poolMaxDesc, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolAcquiresDesc, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolEmptyDesc, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolCanceledDesc, prometheus.CounterValue, float64(s.CanceledAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaitDesc, prometheus.CounterValue, s.AcquireDuration().Seconds())
}

// deploymentsCollector exports how many deployments are in each status
// (the read model's, shared by every replica: the same numbers on each).
type deploymentsCollector struct{ pool *pgxpool.Pool }

var deploymentsDesc = prometheus.NewDesc("nebulactrl_deployments",
	"Deployments by status (pending, in progress, succeeded, failed, superseded, ...), over every organisation.", []string{"status"}, nil)

func (deploymentsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- deploymentsDesc }

func (c deploymentsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	counts, err := projections.DeploymentsByStatus(ctx, c.pool)
	if err != nil {
		return
	}
	for status, n := range counts {
		ch <- prometheus.MustNewConstMetric(deploymentsDesc, prometheus.GaugeValue, float64(n), status)
	}
}

// meshCollector exports the mesh's nodes by health at scrape time (the
// agents' reports, shared by every replica).
type meshCollector struct{ pool *pgxpool.Pool }

var meshNodesDesc = prometheus.NewDesc("nebulactrl_mesh_nodes",
	"WireGuard mesh nodes reported by their clusters' agents, over every organisation, by state: reachable (a handshake with a peer in the last 3 minutes) or unreachable.", []string{"state"}, nil)

func (meshCollector) Describe(ch chan<- *prometheus.Desc) { ch <- meshNodesDesc }

func (c meshCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	up, down, err := query.MeshHealth(ctx, c.pool, time.Now())
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(meshNodesDesc, prometheus.GaugeValue, float64(up), "reachable")
	ch <- prometheus.MustNewConstMetric(meshNodesDesc, prometheus.GaugeValue, float64(down), "unreachable")
}

// lagCollector exports each subscription's lag at scrape time.
type lagCollector struct{ pool *pgxpool.Pool }

var (
	lagEventsDesc = prometheus.NewDesc("nebulactrl_subscription_lag_events",
		"Events committed that a subscription (projections, reactions) has not handled yet.", []string{"subscription"}, nil)
	lagSecondsDesc = prometheus.NewDesc("nebulactrl_subscription_lag_seconds",
		"Age of the oldest event a subscription has not handled yet (0 when current).", []string{"subscription"}, nil)
)

func (lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagEventsDesc
	ch <- lagSecondsDesc
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, sub := range subscriptions {
		lag, err := projections.SubscriptionLag(ctx, c.pool, sub)
		if err != nil {
			continue
		}
		age := 0.0
		if lag.Behind() {
			age = time.Since(lag.FirstAt).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(lagEventsDesc, prometheus.GaugeValue, float64(lag.Events), sub)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, age, sub)
	}
}
