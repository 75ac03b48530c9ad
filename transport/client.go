package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// ClientConfig configures the agent's side of the link.
type ClientConfig struct {
	// URL is the control plane's public URL (https://...).
	URL        string
	Credential string
	// TLS is the client TLS configuration: the system roots plus an optional
	// CA bundle given at install.
	TLS *tls.Config
	// AllowPlain permits http:// (ws://) URLs to a loopback host
	// (development): the credential and the opened secrets of every desired
	// state would otherwise cross the network in clear.
	AllowPlain bool
	// AllowPlainRemote permits http:// to any host: only on an operator's
	// explicit request (--insecure-plain-http-remote), for a network they
	// trust as they would TLS.
	AllowPlainRemote bool
	// Hello returns the agent's hello: asked again at every connect, so the
	// applied revisions are current.
	Hello func(ctx context.Context) Hello
	// Apply handles a desired state and returns its acknowledgement. It runs
	// on its own goroutine, one revision at a time, in arrival order.
	Apply func(ctx context.Context, ds DesiredState) Ack
	// Leader reports whether this agent reconciles (for heartbeats).
	Leader    func() bool
	Logger    *slog.Logger
	Heartbeat time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay (1 s .. 60 s).
	MinBackoff, MaxBackoff time.Duration
	// OnConnected is told of each welcome (tests, status).
	OnConnected func(Welcome)
	// OnDisconnected is told when a connection that was welcomed ends (the
	// health file says whether the agent is connected).
	OnDisconnected func(error)
	// Outbox carries reports (status, logs) to send while connected; frames
	// queued while disconnected wait, up to its capacity.
	Outbox <-chan Report
	// Upgrade is told of an agent_upgrade; it must return at once (the
	// upgrade runs on its own) and answers with Client.Send of an
	// AgentUpgradeResult. Nil: the agent cannot upgrade itself, and
	// answers so.
	Upgrade func(u AgentUpgrade)
	// Builds is told of each set of builds the control plane wants running
	// (the whole set, each time); it must return at once. Nil: the agent
	// does not run builds (its hello must say so).
	Builds func(b Builds)
	// MeshState is handed each mesh state the control plane sends (valid:
	// an invalid one closes the connection); nil for an agent that does not
	// relay them (its hello must not say mesh).
	MeshState func(s MeshState)
}

// Report is a frame the agent sends on its own: a status or a log batch.
type Report struct {
	Type    string
	Payload any
}

// Client keeps the agent connected.
type Client struct {
	cfg ClientConfig
	// cur is the connection that has been welcomed, nil between them.
	mu  sync.Mutex
	cur *conn
	// sleep waits between attempts (false: ctx ended) and randN draws the
	// jitter in [0, n): a clock and a source the tests replace.
	sleep func(ctx context.Context, d time.Duration) bool
	randN func(n int64) int64
}

// ErrOffline means the agent is not connected to the control plane now.
var ErrOffline = errors.New("not connected to the control plane")

// Send queues a frame on the current connection (ErrOffline when there is
// none). Frames queued when the agent stops are written before the
// connection closes.
func (c *Client) Send(typ string, payload any) error {
	frame, err := Encode(typ, "", payload)
	if err != nil {
		return err
	}
	c.mu.Lock()
	cn := c.cur
	c.mu.Unlock()
	if cn == nil {
		return ErrOffline
	}
	return cn.send(frame)
}

// ErrRefused means the control plane refused the credential: retrying with it
// cannot help until an operator acts.
var ErrRefused = errors.New("the control plane refused this agent's credential")

// CheckURL says whether an agent may reach the control plane at raw: https://
// always; http:// to a loopback host (localhost, 127.0.0.0/8, ::1) only with
// allowPlain, and to any other host only with allowPlainRemote. Over plain
// HTTP the join token, the credential and the desired state's opened secrets
// can be read by anyone on the way.
func CheckURL(raw string, allowPlain, allowPlainRemote bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("transport: control plane URL %q is not a URL", raw)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
	default:
		return fmt.Errorf("transport: control plane URL %q must be https://", raw)
	}
	switch {
	case allowPlainRemote:
		return nil
	case !IsLoopback(u.Hostname()):
		return fmt.Errorf("transport: %s is plain HTTP to a host that is not loopback: the join token, the credential and the secrets of every desired state would cross the network in clear; use https:// (or, on a network you trust as you would TLS, start the agent with --insecure-plain-http-remote)", raw)
	case !allowPlain:
		return fmt.Errorf("transport: %s is plain HTTP; agents use TLS (start the agent with --insecure-plain-http only for loopback development)", raw)
	}
	return nil
}

// IsLoopback reports whether host (a URL's host name, without port) names
// this machine: "localhost" or a loopback IP address. Other names are not
// resolved: what they resolve to can change.
func IsLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// NewClient validates the configuration.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := CheckURL(cfg.URL, cfg.AllowPlain, cfg.AllowPlainRemote); err != nil {
		return nil, err
	}
	if cfg.Credential == "" || cfg.Hello == nil || cfg.Apply == nil {
		return nil, errors.New("transport: the client needs a credential, Hello and Apply")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = HeartbeatInterval
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = time.Second
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = 60 * time.Second
	}
	if cfg.Leader == nil {
		cfg.Leader = func() bool { return true }
	}
	return &Client{cfg: cfg, sleep: sleepCtx, randN: rand.Int64N}, nil
}

// ErrBusy is wrapped by a connect the control plane answered 503 with a
// Retry-After: it is admitting as many agents as it takes at once (after a
// restart, every agent comes back together). The agent waits what it was
// told, spread over as long again, before it tries again.
var ErrBusy = errors.New("the control plane is admitting other agents")

type busyError struct{ after time.Duration }

func (e *busyError) Error() string { return fmt.Sprintf("%v: retry in %s", ErrBusy, e.after) }
func (e *busyError) Unwrap() error { return ErrBusy }

// retryAfter reads a Retry-After header in seconds (0 when absent or not a
// number of seconds; an HTTP date is not used by the control plane).
func retryAfter(h string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// nextWait is how long to wait before the next attempt: backoff with
// jitter, half of it to one and a half times it, so that thousands of
// agents that lost the control plane at once do not come back in lockstep;
// a busy control plane's Retry-After (capped at the longest backoff) spread over as long
// again, when it is longer.
func nextWait(backoff, most time.Duration, err error, randN func(int64) int64) time.Duration {
	wait := time.Duration(randN(int64(backoff))) + backoff/2
	var busy *busyError
	if errors.As(err, &busy) {
		after := min(busy.after, most)
		wait = max(wait, after+time.Duration(randN(int64(after))))
	}
	return wait
}

func (c *Client) wsURL() string {
	u, _ := url.Parse(c.cfg.URL)
	if u.Scheme == "https" {
		u.Scheme = "wss"
	} else {
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + ConnectPath
	return u.String()
}

// Run keeps the connection until ctx ends, reconnecting with exponential
// backoff and jitter. It returns ErrRefused when the credential is refused.
func (c *Client) Run(ctx context.Context) error {
	backoff := c.cfg.MinBackoff
	for ctx.Err() == nil {
		connected, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrRefused) {
			return err
		}
		if connected {
			backoff = c.cfg.MinBackoff
		}
		wait := nextWait(backoff, c.cfg.MaxBackoff, err, c.randN)
		c.cfg.Logger.Warn("control plane link down, retrying", "err", err, "retry_in", wait.Round(time.Millisecond))
		if !c.sleep(ctx, wait) {
			return nil
		}
		// A busy control plane said when to come back: that is no failure
		// to back off from further (after a restart every agent would end up
		// waiting its longest backoff, long after the control plane could
		// take it).
		if !errors.Is(err, ErrBusy) {
			backoff = min(backoff*2, c.cfg.MaxBackoff)
		}
	}
	return nil
}

// session dials, says hello and serves one connection; it reports whether
// the handshake completed.
func (c *Client) session(ctx context.Context) (_ bool, err error) {
	d := websocket.Dialer{TLSClientConfig: c.cfg.TLS, HandshakeTimeout: 15 * time.Second, Proxy: http.ProxyFromEnvironment}
	h := http.Header{"Authorization": {"Bearer " + c.cfg.Credential}}
	ws, resp, err := d.DialContext(ctx, c.wsURL(), h)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return false, fmt.Errorf("%w: %s", ErrRefused, strings.TrimSpace(string(body)))
		}
		if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			if d := retryAfter(resp.Header.Get("Retry-After")); d > 0 {
				return false, fmt.Errorf("dialing %s: %w", c.wsURL(), &busyError{after: d})
			}
		}
		return false, fmt.Errorf("dialing %s: %w", c.wsURL(), err)
	}
	cn := newConn(ws, 3*c.cfg.Heartbeat, c.cfg.Heartbeat)
	defer func() {
		// What was queued (an upgrade's result before the agent exits)
		// is written before the session ends.
		select {
		case <-cn.finished:
		case <-time.After(2 * time.Second):
		}
	}()
	defer cn.close(websocket.CloseNormalClosure, "agent stopping")
	hello, _ := Encode(TypeHello, "", c.cfg.Hello(ctx))
	if err := cn.send(hello); err != nil {
		return false, err
	}
	frame, err := cn.read()
	if err != nil {
		return false, fmt.Errorf("waiting for the welcome: %w", err)
	}
	env, err := Decode(frame)
	if err != nil {
		return false, err
	}
	if env.Type == TypeError {
		var em ErrorMessage
		_ = DecodePayload(env, &em)
		if em.Code == "credential_revoked" {
			return false, fmt.Errorf("%w: %s", ErrRefused, em.Message)
		}
		return false, fmt.Errorf("control plane: %s", em.Message)
	}
	var welcome Welcome
	if env.Type != TypeWelcome || DecodePayload(env, &welcome) != nil {
		return false, fmt.Errorf("%w: expected a welcome, got %q", ErrMalformed, env.Type)
	}
	c.mu.Lock()
	c.cur = cn
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.cur == cn {
			c.cur = nil
		}
		c.mu.Unlock()
	}()
	if c.cfg.OnConnected != nil {
		c.cfg.OnConnected(welcome)
	}
	if c.cfg.OnDisconnected != nil {
		defer func() { c.cfg.OnDisconnected(err) }()
	}
	c.cfg.Logger.Info("connected to the control plane", "server_id", welcome.ServerID)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The reader below blocks in a read; ending the context must end it.
	go func() {
		select {
		case <-sctx.Done():
			cn.close(websocket.CloseGoingAway, "agent stopping")
		case <-cn.closed():
		}
	}()
	work := make(chan DesiredState, 16)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); c.reports(sctx, cn) }()
	go func() { defer wg.Done(); c.heartbeats(sctx, cn) }()
	go func() { defer wg.Done(); c.applier(sctx, cn, work) }()
	defer wg.Wait()
	defer cancel()
	for {
		frame, err := cn.read()
		if err != nil {
			select {
			case <-cn.closed():
				return true, errors.New(cn.reason)
			default:
			}
			return true, fmt.Errorf("connection lost: %w", err)
		}
		env, err := Decode(frame)
		if err != nil {
			cn.close(websocket.ClosePolicyViolation, err.Error())
			return true, err
		}
		switch env.Type {
		case TypeDesiredState:
			var ds DesiredState
			if err := DecodePayload(env, &ds); err != nil {
				cn.close(websocket.ClosePolicyViolation, err.Error())
				return true, err
			}
			select {
			case work <- ds:
			case <-sctx.Done():
				return true, sctx.Err()
			}
		case TypeAgentUpgrade:
			var u AgentUpgrade
			if err := DecodePayload(env, &u); err != nil {
				cn.close(websocket.ClosePolicyViolation, err.Error())
				return true, err
			}
			if c.cfg.Upgrade == nil {
				r, _ := Encode(TypeAgentUpgradeResult, "", AgentUpgradeResult{ID: u.ID, Version: u.Version, Error: "this agent cannot upgrade itself"})
				_ = cn.send(r)
				continue
			}
			c.cfg.Upgrade(u)
		case TypeBuilds:
			var b Builds
			if err := DecodePayload(env, &b); err != nil {
				cn.close(websocket.ClosePolicyViolation, err.Error())
				return true, err
			}
			if c.cfg.Builds != nil {
				c.cfg.Builds(b)
			}
		case TypeMeshState:
			var ms MeshState
			if err := DecodeValid(env, &ms); err != nil {
				cn.close(websocket.ClosePolicyViolation, err.Error())
				return true, err
			}
			if c.cfg.MeshState != nil {
				c.cfg.MeshState(ms)
			}
		case TypeError:
			var em ErrorMessage
			_ = DecodePayload(env, &em)
			if em.Code == "credential_revoked" {
				return true, fmt.Errorf("%w: %s", ErrRefused, em.Message)
			}
			return true, fmt.Errorf("control plane: %s", em.Message)
		default:
			cn.close(websocket.ClosePolicyViolation, "unknown frame type")
			return true, fmt.Errorf("%w: unknown frame type %q", ErrMalformed, truncate(env.Type, 40))
		}
	}
}

// reports forwards the agent's reports while the connection lasts.
func (c *Client) reports(ctx context.Context, cn *conn) {
	if c.cfg.Outbox == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-cn.closed():
			return
		case r := <-c.cfg.Outbox:
			frame, err := Encode(r.Type, "", r.Payload)
			if err != nil {
				continue
			}
			if cn.send(frame) != nil {
				return
			}
		}
	}
}

func (c *Client) heartbeats(ctx context.Context, cn *conn) {
	t := time.NewTicker(c.cfg.Heartbeat)
	defer t.Stop()
	for {
		hb, _ := Encode(TypeHeartbeat, "", Heartbeat{Time: time.Now().UTC(), Leader: c.cfg.Leader()})
		if cn.send(hb) != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-cn.closed():
			return
		case <-t.C:
		}
	}
}

func (c *Client) applier(ctx context.Context, cn *conn, work <-chan DesiredState) {
	for {
		select {
		case <-ctx.Done():
			return
		case ds := <-work:
			ack := c.cfg.Apply(ctx, ds)
			frame, err := Encode(TypeAck, "", ack)
			if err == nil && cn.send(frame) != nil {
				return
			}
		}
	}
}

// Register exchanges a join token for this server's own credential. The
// token goes over https://, or plain http:// to a loopback host (see
// CheckURL); never to where a redirect points.
func Register(ctx context.Context, baseURL string, tlsConfig *tls.Config, req RegisterRequest) (RegisterResponse, error) {
	return register(ctx, baseURL, tlsConfig, req, false)
}

// RegisterPlainRemote is Register that also sends the join token over plain
// http:// to a host that is not loopback: only on the operator's explicit
// request (--insecure-plain-http-remote).
func RegisterPlainRemote(ctx context.Context, baseURL string, tlsConfig *tls.Config, req RegisterRequest) (RegisterResponse, error) {
	return register(ctx, baseURL, tlsConfig, req, true)
}

func register(ctx context.Context, baseURL string, tlsConfig *tls.Config, req RegisterRequest, plainRemote bool) (RegisterResponse, error) {
	if err := CheckURL(baseURL, true, plainRemote); err != nil {
		return RegisterResponse{}, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return RegisterResponse{}, err
	}
	u := strings.TrimRight(baseURL, "/") + RegisterPath
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return RegisterResponse{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(r *http.Request, _ []*http.Request) error {
			return fmt.Errorf("the control plane redirects to %s: give that URL", r.URL.Redacted())
		}}
	// The client is made for this one request: its connection is not kept
	// idle afterwards (a process that registers many times would keep one
	// TLS connection, here and at the control plane, for each).
	defer client.CloseIdleConnections()
	resp, err := client.Do(hreq)
	if err != nil {
		return RegisterResponse{}, fmt.Errorf("registering with %s: %w", baseURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		var e struct {
			Error struct{ Code, Message string }
		}
		if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
			return RegisterResponse{}, fmt.Errorf("registering: %s", e.Error.Message)
		}
		return RegisterResponse{}, fmt.Errorf("registering: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var out RegisterResponse
	if err := json.Unmarshal(b, &out); err != nil {
		return RegisterResponse{}, fmt.Errorf("registering: %w", err)
	}
	return out, nil
}
