package httpapi

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nebulactrl/nebulactrl/domain"
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

// MetricsHandler serves the Prometheus metrics of the API's registry on the
// public listener: to a bearer token with the instance:admin scope only (the
// metrics name routes, clusters' agents and the database's load, which is no
// business of anyone else). Prometheus sends one with its scrape config's
// authorization.credentials_file.
func (a *API) MetricsHandler() http.Handler {
	open := a.OpenMetricsHandler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _, _, err := a.authenticate(r)
		if err == nil {
			NotePrincipal(r.Context(), p.UserID)
			err = p.Allow("", domain.ScopeInstanceAdmin)
			if err != nil {
				err = errorf(http.StatusForbidden, "forbidden", "%s", "the metrics are for instance administrators: "+strings.TrimPrefix(err.Error(), "forbidden: "))
			}
		}
		if err != nil {
			w.Header().Set("Cache-Control", "no-store")
			a.writeError(w, r, err)
			return
		}
		open.ServeHTTP(w, r)
	})
}

// OpenMetricsHandler serves the metrics without authentication, for a
// listener of their own (NEBULACTRL_METRICS_LISTEN) on a private address.
func (a *API) OpenMetricsHandler() http.Handler {
	return promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{})
}

// accessInfo is what the layers under AccessLog learn about a request: the
// route pattern it matched and who made it.
type accessInfo struct {
	mu        sync.Mutex
	route     string
	principal string
}

type accessKey struct{}

// NoteRoute records the route pattern a request matched, for its access-log
// line (the pattern, never the path with its names or the query string).
func NoteRoute(ctx context.Context, pattern string) {
	if info, ok := ctx.Value(accessKey{}).(*accessInfo); ok {
		info.mu.Lock()
		info.route = pattern
		info.mu.Unlock()
	}
}

// NotePrincipal records who made a request (a user or server id), for its
// access-log line.
func NotePrincipal(ctx context.Context, id string) {
	if info, ok := ctx.Value(accessKey{}).(*accessInfo); ok {
		info.mu.Lock()
		info.principal = id
		info.mu.Unlock()
	}
}

// saneRequestID returns the caller's X-Request-Id when it is printable ASCII
// of at most 64 characters, a new id otherwise.
func saneRequestID(id string) string {
	if len(id) == 0 || len(id) > 64 || strings.ContainsFunc(id, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return "req_" + hex.EncodeToString(b)
	}
	return id
}

// AccessLog wraps the whole HTTP server: every request gets an id (the
// caller's X-Request-Id when sane, a new one otherwise; echoed in the
// response and written to the audit log) and, when it ends, one log line
// "request" with the method, the route pattern, the status, the duration,
// the request id, the principal and the client address. It never logs a
// header, a body, a path's names or a query string: tokens, passwords and
// secrets travel there.
func AccessLog(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := saneRequestID(r.Header.Get("X-Request-Id"))
		w.Header().Set("X-Request-Id", id)
		info := &accessInfo{}
		r = r.WithContext(context.WithValue(context.WithValue(r.Context(), requestIDKey, id), accessKey{}, info))
		rec := &accessRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		info.mu.Lock()
		route, principal := info.route, info.principal
		info.mu.Unlock()
		if route == "" {
			// The server's own routes (/healthz, /agent/v1, ...): the
			// pattern its mux matched; "" for no route.
			route = r.Pattern
		}
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelWarn
		}
		log.LogAttrs(r.Context(), level, "request",
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("request_id", id),
			slog.String("principal", principal),
			slog.String("remote", remoteHost(r.RemoteAddr)),
		)
	})
}

func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// accessRecorder notes the status; it passes flushes and hijacks (the
// agents' websocket) through.
type accessRecorder struct {
	http.ResponseWriter
	status int
}

func (s *accessRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *accessRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *accessRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *accessRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the connection cannot be taken over")
	}
	c, rw, err := h.Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return c, rw, err
}

// Unwrap lets http.ResponseController reach the connection.
func (s *accessRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
