package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
)

// Event is one server-sent event of a stream.
type Event struct {
	// ID is the event's id ("" when it has none); a stream resumes after
	// the last id seen.
	ID   string
	Name string
	Data []byte
}

// StreamOptions tune how a stream is followed.
type StreamOptions struct {
	// LastEventID resumes the stream after that event; "" starts it where
	// the API starts it.
	LastEventID string
	// IdleTimeout is how long the stream may stay silent (the API sends a
	// keep-alive every 15 s) before the connection counts as lost and is
	// made again; 45 s by default.
	IdleTimeout time.Duration
	// OnReconnect, if set, is told each time the connection was lost and
	// the stream resumes, with why.
	OnReconnect func(err error)
}

// DefaultIdleTimeout is StreamOptions.IdleTimeout's default.
const DefaultIdleTimeout = 45 * time.Second

// errStop ends a stream at the handler's request.
var errStop = errors.New("stop")

// Stream follows the server-sent event stream at path (an API path from
// path()), calling handle for each event in order. When the connection is
// lost, the API ends the stream, or it stays silent past the idle timeout,
// it connects again with Last-Event-ID set to the last id seen, so that no
// event is lost or repeated; it waits a little longer after each failure in
// a row (up to 5 s). It returns nil when handle says stop, handle's error,
// ctx's error, or the API's refusal (*Error) of a 4xx answer other than 408
// and 429.
func (c *Client) Stream(ctx context.Context, path string, q url.Values, opts StreamOptions, handle func(Event) (stop bool, err error)) error {
	return c.stream(ctx, path, q, opts, handle, nil)
}

// stream is Stream; complete, if set, says whether a stream the API ended
// is complete (not to be resumed).
func (c *Client) stream(ctx context.Context, path string, q url.Values, opts StreamOptions, handle func(Event) (stop bool, err error),
	complete func() bool) error {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	h := *c.http
	h.Timeout = 0 // the stream lasts; the idle timeout bounds silence instead
	last := opts.LastEventID
	pause := c.backoff
	if pause <= 0 {
		pause = 250 * time.Millisecond
	}
	for {
		progressed, err := c.streamOnce(ctx, &h, path, q, &last, opts.IdleTimeout, handle)
		switch {
		case errors.Is(err, errStop):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !isTransient(err):
			return err
		case err == nil && complete != nil && complete():
			return nil
		}
		if err == nil {
			err = errors.New("the control plane ended the stream")
		}
		if progressed {
			pause = c.backoff
			if pause <= 0 {
				pause = 250 * time.Millisecond
			}
		}
		if opts.OnReconnect != nil {
			opts.OnReconnect(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(pause*2, 5*time.Second)
	}
}

// transientError is a failure after which the stream is worth resuming.
type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

func isTransient(err error) bool {
	var t transientError
	return errors.As(err, &t)
}

// streamOnce makes one connection and reads it until it ends; progressed
// says whether any event came.
func (c *Client) streamOnce(ctx context.Context, h *http.Client, path string, q url.Values, last *string, idle time.Duration,
	handle func(Event) (bool, error)) (progressed bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The watchdog cancels the connection when nothing came for idle.
	silent := fmt.Errorf("no event or keep-alive came for %s", idle)
	watchdog := time.AfterFunc(idle, func() { cancel(silent) })
	defer watchdog.Stop()
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", api.StreamMediaType)
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set("Cache-Control", "no-cache")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := h.Do(req)
	if err != nil {
		if errors.Is(context.Cause(ctx), silent) {
			err = silent
		}
		return false, transientError{c.transportError(err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, c.maxBody))
		e := apiError(resp, raw)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
			return false, transientError{e}
		}
		return false, e
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, api.StreamMediaType) {
		return false, fmt.Errorf("the answer of GET %s is %q, not an event stream (is %s a NebulaCtrl control plane?)", path, ct, c.base)
	}
	rd := bufio.NewReaderSize(resp.Body, 64<<10)
	var (
		ev   Event
		data [][]byte
	)
	for {
		line, err := readLine(rd, c.maxBody)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return progressed, nil
			}
			if errors.Is(context.Cause(ctx), silent) {
				err = silent
			}
			return progressed, transientError{fmt.Errorf("the event stream from %s broke: %w", c.base, err)}
		}
		watchdog.Reset(idle)
		switch {
		case len(line) == 0:
			// An event ends at a blank line; one without data is nothing.
			if data != nil {
				ev.Data = bytes.Join(data, []byte("\n"))
				if ev.ID != "" {
					*last = ev.ID
				}
				progressed = true
				stop, err := handle(ev)
				if err != nil {
					return progressed, err
				}
				if stop {
					return progressed, errStop
				}
			}
			ev, data = Event{}, nil
		case line[0] == ':':
			// A comment: a keep-alive, or why the stream ends.
		default:
			field, value, _ := strings.Cut(string(line), ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.ID = value
			case "event":
				ev.Name = value
			case "data":
				data = append(data, []byte(value))
			}
		}
	}
}

// readLine reads one line without its line break (LF, CRLF or CR before
// LF), refusing lines longer than max.
func readLine(rd *bufio.Reader, max int64) ([]byte, error) {
	var line []byte
	for {
		chunk, err := rd.ReadSlice('\n')
		line = append(line, chunk...)
		if int64(len(line)) > max {
			return nil, fmt.Errorf("an event stream line is longer than %d bytes", max)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				// A last line without a break is not a complete line.
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

// DeploymentEvent is an event of a deployment's stream: exactly one of
// Deployment (the deployment as it stands: first, and when its stall flag,
// blockers or status change) and Stage (a stage of its rollout) is set.
type DeploymentEvent struct {
	ID         string
	Deployment *api.DeploymentView
	Stage      *api.DeploymentStageEvent
}

// WatchDeployment follows a deployment (LatestDeployment: the newest when
// the watch starts), calling handle for each event, until the stage that
// ends it (succeeded, failed or superseded) has been handled (or, for a
// deployment over before the watch, the API ended the stream), handle says
// stop or fails, or ctx ends. Lost connections are made again and the
// stream resumes where it was (see Stream).
func (c *Client) WatchDeployment(ctx context.Context, org, project, env, service, id string, opts StreamOptions,
	handle func(DeploymentEvent) (stop bool, err error)) error {
	base := levelPath(org, project, env, service)
	if id == LatestDeployment {
		// Resume the deployment found, not a newer one.
		d, err := c.Deployment(ctx, org, project, env, service, id)
		if err != nil {
			return err
		}
		id = d.ID
	}
	// A deployment that is over when the stream starts (or resumes) has its
	// stages sent, and the stream ends: nothing more is to come, even
	// without a stage that ends it (one recorded before there were stages).
	over := false
	return c.stream(ctx, base+path("/deployments/%s/events", id), nil, opts, func(e Event) (bool, error) {
		var de DeploymentEvent
		de.ID = e.ID
		switch e.Name {
		case "deployment":
			de.Deployment = &api.DeploymentView{}
			if err := json.Unmarshal(e.Data, de.Deployment); err != nil {
				return false, fmt.Errorf("reading a deployment event: %w", err)
			}
			over = de.Deployment.Terminal()
		case "stage":
			de.Stage = &api.DeploymentStageEvent{}
			if err := json.Unmarshal(e.Data, de.Stage); err != nil {
				return false, fmt.Errorf("reading a stage event: %w", err)
			}
		default:
			return false, nil // an event of a later version
		}
		stop, err := handle(de)
		if de.Stage != nil && de.Stage.Terminal {
			stop = true
		}
		return stop, err
	}, func() bool { return over })
}

// WatchEnvironment follows an environment's activity: the audit log
// entries about it, its services there, its deployments and change sets, in
// order, from what happens next (or after opts.LastEventID, an entry's seq).
func (c *Client) WatchEnvironment(ctx context.Context, org, project, env string, opts StreamOptions,
	handle func(api.AuditEntry) (stop bool, err error)) error {
	return c.Stream(ctx, envPath(org, project, env)+"/events", nil, opts, func(e Event) (bool, error) {
		if e.Name != "audit" {
			return false, nil
		}
		var a api.AuditEntry
		if err := json.Unmarshal(e.Data, &a); err != nil {
			return false, fmt.Errorf("reading an audit event: %w", err)
		}
		return handle(a)
	})
}

// WatchAudit follows an organisation's audit log (q.Org; the instance-wide
// log has no stream): each new entry that matches q's Action, Actor,
// Target and Since, in seq order, from what happens next (or after
// opts.LastEventID: an entry's seq, or a page's Next). Cursor, Until and
// Limit do not apply.
func (c *Client) WatchAudit(ctx context.Context, q AuditQuery, opts StreamOptions,
	handle func(api.AuditEntry) (stop bool, err error)) error {
	if q.Org == "" {
		return errors.New("client: WatchAudit needs an organisation (the instance-wide audit log has no stream)")
	}
	v := url.Values{}
	for k, s := range map[string]string{"action": q.Action, "actor": q.Actor, "target": q.Target} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339))
	}
	return c.Stream(ctx, path("/api/v1/orgs/%s/audit/events", q.Org), v, opts, func(e Event) (bool, error) {
		if e.Name != "audit" {
			return false, nil
		}
		var a api.AuditEntry
		if err := json.Unmarshal(e.Data, &a); err != nil {
			return false, fmt.Errorf("reading an audit event: %w", err)
		}
		return handle(a)
	})
}
