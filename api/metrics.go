package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	streams  prometheus.Gauge
	// hashes counts passwords hashed; hashQueue is the sign-ins hashing or
	// waiting to (bounded: see login.go).
	hashes    prometheus.Counter
	hashQueue prometheus.Gauge
	registry  *prometheus.Registry
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nebulactrl_http_requests_total", Help: "API requests by route and status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nebulactrl_http_request_duration_seconds", Help: "API request latency by route.", Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nebulactrl_http_event_streams", Help: "Server-sent event streams open.",
		}),
		hashes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nebulactrl_password_hashes_total", Help: "Passwords hashed (sign-ins, new users).",
		}),
		hashQueue: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nebulactrl_password_hash_queue", Help: "Passwords being hashed or waiting for their turn.",
		}),
		registry: reg,
	}
	reg.MustRegister(m.requests, m.duration, m.streams, m.hashes, m.hashQueue)
	return m
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
}

// MetricsHandler serves the Prometheus metrics of the API's registry.
func (a *API) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{})
}
