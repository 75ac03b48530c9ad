package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// Server-sent event streams (text/event-stream). A stream handler reads the
// read models, writes what is new, and waits for the projections' commit
// notification (or the poll interval) before it reads again; it holds no
// database connection while it waits. Each event that can be resumed from
// carries an id, and a client that reconnects with Last-Event-ID gets what
// came after it, nothing twice.

// Timings of the streams.
var (
	// streamPoll is how often a stream reads again without a notification
	// (a cluster's connection state, which decides a blocker, changes with
	// heartbeats, which notify nothing).
	streamPoll = time.Second
	// streamKeepAlive is how often a quiet stream sends a comment, so that
	// proxies keep it open and the client sees it is alive.
	streamKeepAlive = 15 * time.Second
	// streamRecheck is how often a quiet stream checks that its token is
	// still valid and still has the scope, so that a revoked token's stream
	// ends even when it has nothing to send. A stream with something to send
	// checks first, every time (sse.guard): access ends at once.
	streamRecheck = 30 * time.Second
)

// streamEvent documents an event of a stream: its name, what its id is, and
// the type of its data.
type streamEvent struct {
	name, doc string
	payload   any
}

// sse writes one stream.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf bytes.Buffer
	// guard checks that the stream's principal may still read it; it runs
	// before the first event after each wake, so that nothing is delivered
	// once access is gone (revoked, removed, signed out, role lowered), on
	// whichever replica the stream is: what was read after the change was
	// committed is read after the change, and the check sees it too.
	guard   func() error
	guarded bool
}

// recheck makes the next event check access first (a stream that reads
// again within one step calls it before sending what it read).
func (s *sse) recheck() {
	if s.guard != nil {
		s.guarded = false
	}
}

// errAccessEnded ends a stream whose principal lost access.
var errAccessEnded = errors.New("access ended")

// startStream answers 200 with the stream's headers and flushes them, so
// the client knows the stream is open before the first event.
func startStream(w http.ResponseWriter) (*sse, error) {
	s := &sse{w: w, rc: http.NewResponseController(w)}
	// No write deadline: the stream lasts as long as the client wants it.
	if err := s.rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return nil, err
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	// nginx and its kin buffer responses unless told not to.
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.buf.WriteString("retry: 2000\n\n")
	return s, s.flush()
}

func (s *sse) flush() error {
	if _, err := s.w.Write(s.buf.Bytes()); err != nil {
		s.buf.Reset()
		return err
	}
	s.buf.Reset()
	return s.rc.Flush()
}

// event sends one event; id "" sends none (the client's last event id stays).
// It fails, and the stream ends, when the guard finds access gone.
func (s *sse) event(name, id string, data any) error {
	if s.guard != nil && !s.guarded {
		if err := s.guard(); err != nil {
			_ = s.comment("the stream ends: " + toAPIError(err).message)
			return errAccessEnded
		}
		s.guarded = true
	}
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		s.buf.WriteString("id: " + id + "\n")
	}
	s.buf.WriteString("event: " + name + "\n")
	// JSON from encoding/json has no line breaks, so one data line is enough.
	s.buf.WriteString("data: ")
	s.buf.Write(b)
	s.buf.WriteString("\n\n")
	return s.flush()
}

func (s *sse) comment(text string) error {
	s.buf.WriteString(": " + strings.ReplaceAll(text, "\n", " ") + "\n\n")
	return s.flush()
}

// lastEventID reads where a client resumes: the Last-Event-ID header, or
// the lastEventId query parameter; ok is false when neither is given.
func lastEventID(r *http.Request) (int64, bool, error) {
	v := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if v == "" {
		v = r.URL.Query().Get("lastEventId")
	}
	if v == "" {
		return 0, false, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, badRequest("Last-Event-ID must be the id of an event of this stream (a whole number), not %q", v)
	}
	return n, true, nil
}

// follow runs a stream: step sends what is new (it returns done when the
// stream is complete) and is called again when the projections commit, when
// the poll interval passes, and after a keep-alive. It ends when the client
// goes, the API closes its streams, or the caller's token no longer allows
// the route.
func (a *API) follow(ctx context.Context, r *http.Request, rt *route, s *sse, step func(ctx context.Context) (done bool, err error)) {
	a.metrics.streams.Inc()
	defer a.metrics.streams.Dec()
	keepAlive := time.NewTicker(streamKeepAlive)
	defer keepAlive.Stop()
	recheck := time.NewTicker(streamRecheck)
	defer recheck.Stop()
	// The request was authenticated just now: the first step sends without
	// checking again; every later one checks before it sends.
	s.guard = func() error { return a.stillAllowed(r, rt) }
	s.guarded = true
	defer func() { s.guard = nil }()
	for {
		// Take the notification channel before reading, so that a commit
		// between the read and the wait is not missed.
		changed := a.cfg.Changed()
		done, err := step(ctx)
		if err != nil {
			if ctx.Err() == nil {
				a.logger.Warn("event stream ended", "path", r.URL.Path, "request_id", requestID(ctx), "err", err)
				_ = s.comment("the stream ends: " + toAPIError(err).message + "; reconnect with Last-Event-ID")
			}
			return
		}
		if done {
			return
		}
		poll := time.NewTimer(streamPoll)
		select {
		case <-ctx.Done():
			poll.Stop()
			return
		case <-a.closing:
			poll.Stop()
			_ = s.comment("the server is shutting down; reconnect with Last-Event-ID")
			return
		case <-changed:
		case <-poll.C:
		case <-keepAlive.C:
			if err := s.comment("keep-alive"); err != nil {
				poll.Stop()
				return
			}
		case <-recheck.C:
			if err := a.stillAllowed(r, rt); err != nil {
				poll.Stop()
				_ = s.comment("the stream ends: " + toAPIError(err).message)
				return
			}
		}
		poll.Stop()
		s.recheck()
	}
}

// stillAllowed authenticates the request's token again and checks the
// route's scope in its organisation.
func (a *API) stillAllowed(r *http.Request, rt *route) error {
	c := &call{}
	p, _, _, err := a.authenticate(r)
	if err != nil {
		return err
	}
	c.principal = p
	return a.resolve(r, *rt, c)
}

// CloseStreams ends every event stream, so that a server shutting down
// does not wait for them; their clients reconnect (to another replica) with
// Last-Event-ID. Register it with http.Server.RegisterOnShutdown.
func (a *API) CloseStreams() {
	a.closeOnce.Do(func() { close(a.closing) })
}

// deploymentEvents streams one deployment: a "deployment" snapshot first,
// then one "stage" event per stage of its rollout (id: the stage's seq), a
// "deployment" event whenever it stalls, moves again or its blockers change,
// and the stream closes after the stage that ends it.
func (a *API) deploymentEvents(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	{
		ctx := r.Context()
		after, _, err := lastEventID(r)
		if err != nil {
			return 0, nil, err
		}
		v, err := a.deploymentView(ctx, a.pool, c, r.PathValue("deployment"))
		if err != nil {
			return 0, nil, err
		}
		id := v.ID
		s, err := startStream(w)
		if err != nil {
			return http.StatusOK, nil, nil
		}
		if err := s.event("deployment", "", v); err != nil {
			return http.StatusOK, nil, nil
		}
		sent := watchKey(v)
		cursor := int(min(after, 1<<30))
		a.follow(ctx, r, c.route, s, func(ctx context.Context) (bool, error) {
			// Both as of one moment (and no connection held while the
			// events are written): a deployment read as over comes with
			// the stage that ended it, and a stage with the reason.
			v, stages, err := a.deploymentAndStages(ctx, c, id, cursor)
			if err != nil {
				return false, err
			}
			for _, st := range stages {
				ev := api.DeploymentStageEvent{DeploymentID: id, DeploymentStage: st, Status: v.Status, Stalled: v.Stalled,
					StalledSince: v.StalledSince, Reason: v.Reason, SupersededBy: v.SupersededBy, Blockers: v.Blockers, Terminal: st.Terminal()}
				if err := s.event("stage", strconv.Itoa(st.Seq), ev); err != nil {
					return true, nil
				}
				cursor = st.Seq
				if ev.Terminal {
					return true, nil
				}
			}
			if k := watchKey(v); k != sent {
				sent = k
				if err := s.event("deployment", "", v); err != nil {
					return true, nil
				}
			}
			// A deployment read as over whose stages are all sent has
			// nothing more to come (one recorded before there were stages
			// has no terminal stage).
			return v.Terminal(), nil
		})
		return http.StatusOK, nil, nil
	}
}

// watchKey is what a "deployment" update is sent for: the stall flag and
// the blockers (stages, and the status with them, come as stage events).
func watchKey(v api.DeploymentView) string {
	since := ""
	if v.StalledSince != nil {
		since = v.StalledSince.UTC().Format(time.RFC3339Nano)
	}
	return strconv.FormatBool(v.Stalled) + "|" + since + "|" + strings.Join(v.Blockers, ",")
}

// environmentEvents streams the audit log entries about an environment as
// "audit" events whose id is the entry's seq. Without Last-Event-ID it
// starts with what happens next.
func (a *API) environmentEvents(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.auditStream(w, r, c, query.AuditFilter{OrgID: c.org.ID, EnvironmentID: c.env.ID})
}

// auditEvents streams an organisation's audit log as "audit" events whose
// id is the entry's seq, filtered like the list by action, actor, target
// and since (until makes no sense for what comes next). Without
// Last-Event-ID it starts with what happens next; with it, every entry
// after that seq (an audit entry's seq, or a list's next, resumes too).
func (a *API) auditEvents(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	q := r.URL.Query()
	f := query.AuditFilter{OrgID: c.org.ID, Action: q.Get("action"), ActorID: q.Get("actor"), Target: q.Get("target")}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return 0, nil, badRequest("query parameter since must be an RFC 3339 time")
		}
		f.Since = &t
	}
	return a.auditStream(w, r, c, f)
}

// auditStream streams the audit entries that f lets through as "audit"
// events whose id is the entry's seq, page by page as they come: after
// Last-Event-ID when given, else from what happens next.
func (a *API) auditStream(w http.ResponseWriter, r *http.Request, c *call, f query.AuditFilter) (int, any, error) {
	ctx := r.Context()
	after, given, err := lastEventID(r)
	if err != nil {
		return 0, nil, err
	}
	if !given {
		if after, err = query.AuditHead(ctx, a.pool); err != nil {
			return 0, nil, err
		}
	}
	s, err := startStream(w)
	if err != nil {
		return http.StatusOK, nil, nil
	}
	const page = 500
	a.follow(ctx, r, c.route, s, func(ctx context.Context) (bool, error) {
		for {
			f.After, f.Limit = after, page
			rows, _, err := query.Audit(ctx, a.pool, f)
			if err != nil {
				return false, err
			}
			for _, e := range rows {
				if err := s.event("audit", strconv.FormatInt(e.Seq, 10), e); err != nil {
					return true, nil
				}
				after = e.Seq
			}
			if len(rows) < page {
				return false, nil
			}
			// The next page is read later: access is checked again
			// before it is sent.
			s.recheck()
		}
	})
	return http.StatusOK, nil, nil
}
