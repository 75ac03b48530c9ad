package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Peer is an authenticated agent installation (a server).
type Peer struct {
	ServerID  string
	ClusterID string
	OrgID     string
	Name      string
	// Session tells one connection of the server from the next (set by
	// the hub): a disconnect recorded late, after the server connected
	// again, is not taken for the newer connection's end.
	Session string
}

// Head is the latest revision of an environment.
type Head struct {
	EnvironmentID string
	Revision      int
}

// ErrUnavailable is wrapped by an Authenticate error that says nothing about
// the credential (the database did not answer): the upgrade is answered 503,
// which the agent retries, and a check before a send postpones the send.
var ErrUnavailable = errors.New("credentials cannot be checked now")

// HubConfig connects the hub to the rest of the control plane.
type HubConfig struct {
	// Authenticate checks the agent's credential on the upgrade request (its
	// Authorization header). The hub calls it again, with a request that
	// keeps the method, path, remote address and that header, when the
	// hello arrives and
	// before every desired state it sends (those carry opened secrets): a
	// credential revoked meanwhile gets nothing more. An error that wraps
	// ErrUnavailable is not a refusal.
	Authenticate func(r *http.Request) (Peer, error)
	// Heads returns the latest revision of every environment of each cluster.
	Heads func(ctx context.Context, clusterIDs []string) (map[string][]Head, error)
	// Fetch returns one revision, secrets opened, ready to send.
	Fetch func(ctx context.Context, environmentID string, revision int) (DesiredState, error)
	// RevisionHash returns the document hash of one revision: to tell an
	// agent that records the same revision number with another document
	// (applied before this control plane was restored from a backup) from
	// one that is up to date. Nil: a revision number is taken to say it all.
	RevisionHash func(ctx context.Context, environmentID string, revision int) (string, error)
	// MeshHeads returns the latest mesh revision of each cluster (0: none),
	// and MeshFetch one revision: for agents whose hello says mesh. Nil: no
	// mesh states are sent.
	MeshHeads func(ctx context.Context, clusterIDs []string) (map[string]int, error)
	MeshFetch func(ctx context.Context, clusterID string, revision int) (MeshState, error)
	// OnMeshReport is told of what an agent reports of its nodes.
	OnMeshReport func(ctx context.Context, p Peer, r MeshReport)
	// Callbacks; each may be nil.
	OnHello     func(ctx context.Context, p Peer, h Hello)
	OnHeartbeat func(ctx context.Context, p Peer, h Heartbeat)
	OnAck       func(ctx context.Context, p Peer, a Ack)
	OnStatus    func(ctx context.Context, p Peer, s Status)
	OnLogs      func(ctx context.Context, p Peer, l Logs)
	OnStage     func(ctx context.Context, p Peer, s StageReport)
	// OnUpgradeResult is told of an agent's answer to an agent_upgrade.
	OnUpgradeResult func(ctx context.Context, p Peer, r AgentUpgradeResult)
	// OnBuildReport and OnBuildLogs are told of what the agent reports of
	// its builds.
	OnBuildReport func(ctx context.Context, p Peer, r BuildReport)
	OnBuildLogs   func(ctx context.Context, p Peer, l BuildLogs)
	OnDisconnect  func(ctx context.Context, p Peer, reason string)
	Logger        *slog.Logger
	// ReadTimeout closes a connection that sent nothing (not even a pong) for
	// this long (default 3 heartbeats).
	ReadTimeout time.Duration
	// PingEvery is how often the hub pings (default 20 s).
	PingEvery time.Duration
	// MaxHandshakes bounds the connections between their upgrade request
	// and their welcome (the credential's check, the hello, its recording:
	// each a few round trips to the database, a commit among them), default
	// 32 (8 admitted 10,000 agents' first connects at under 80 a second on
	// a loaded 2-core machine: their commits need company to be grouped).
	// One more waits up to AdmitWait (default 5 s, within the agent's 15 s
	// for the upgrade) for a place, then is answered 503 with a Retry-After
	// of BusyRetryAfter (default 2 s, whole seconds), which the agent
	// honours with jitter. When every agent comes back at once (the control
	// plane restarted), the connections waiting on the database are bounded
	// instead of every one of them queueing for the pool.
	MaxHandshakes  int
	AdmitWait      time.Duration
	BusyRetryAfter time.Duration
}

// Hub keeps the agents' connections and pushes them desired state.
type Hub struct {
	cfg      HubConfig
	upgrader websocket.Upgrader

	mu    sync.Mutex
	conns map[string]*agentConn // by server id, after the hello
	// byCluster holds the same connections by cluster id: a delivery of
	// one cluster's revision finds its agents without looking at every
	// connection (with 10,000 connected, that look under the hub's lock was
	// a quarter of the control plane's CPU while single changes went out).
	byCluster map[string]map[*agentConn]struct{}
	// pending are the connections that have not said hello yet: revoking
	// their server closes them too.
	pending map[*agentConn]struct{}
	wg      sync.WaitGroup
	ctx     context.Context
	// admit holds a place for each connection between its upgrade request
	// and its welcome (or its end).
	admit chan struct{}
}

type agentConn struct {
	peer *Peer
	c    *conn
	// auth is what the credential's checks need of the upgrade request (its
	// method, path, remote address and Authorization header, with the hub's
	// context), to check it again before anything secret is sent: kept for
	// as long as the connection, so not the whole request.
	auth *http.Request
	// delivering makes one delivery to the connection at a time: a rewind
	// and a newer revision go out in the order they were decided.
	delivering sync.Mutex
	// sent is what the agent has, or has been sent: environment -> revision.
	mu   sync.Mutex
	sent map[string]int
	// recorded is what the agent's namespaces record as applied (its
	// hello), for each environment until the first delivery decides whether
	// the agent is ahead of this control plane and must be rewound; nil
	// when the hello recorded nothing.
	recorded map[string]AppliedRevision
	// builds says the agent runs builds (its hello); buildsSent is the
	// last set of builds sent, so that the same set is not sent again.
	builds     bool
	buildsSent string
	// mesh says the agent relays mesh states; meshSent is the revision it
	// has, or has been sent.
	mesh     bool
	meshSent int
}

// NewHub returns a hub; it serves until ctx ends.
func NewHub(ctx context.Context, cfg HubConfig) (*Hub, error) {
	if cfg.Authenticate == nil || cfg.Heads == nil || cfg.Fetch == nil {
		return nil, errors.New("transport: the hub needs Authenticate, Heads and Fetch")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 3 * HeartbeatInterval
	}
	if cfg.PingEvery == 0 {
		cfg.PingEvery = 20 * time.Second
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = 32
	}
	if cfg.AdmitWait <= 0 {
		cfg.AdmitWait = 5 * time.Second
	}
	if cfg.BusyRetryAfter < time.Second {
		cfg.BusyRetryAfter = 2 * time.Second
	}
	h := &Hub{cfg: cfg, conns: map[string]*agentConn{}, byCluster: map[string]map[*agentConn]struct{}{}, pending: map[*agentConn]struct{}{}, ctx: ctx, admit: make(chan struct{}, cfg.MaxHandshakes)}
	// The read buffer is held for as long as the connection lasts: small
	// (an agent's frames are heartbeats and acknowledgements; a larger one
	// is read through it in pieces). The write buffer is taken from a pool
	// shared by every connection only while a frame is written.
	h.upgrader = websocket.Upgrader{ReadBufferSize: 512, WriteBufferSize: 4096, WriteBufferPool: &sync.Pool{}}
	go func() {
		<-ctx.Done()
		h.mu.Lock()
		for _, ac := range h.conns {
			ac.c.close(websocket.CloseGoingAway, "control plane shutting down")
		}
		for ac := range h.pending {
			ac.c.close(websocket.CloseGoingAway, "control plane shutting down")
		}
		h.mu.Unlock()
	}()
	return h, nil
}

// ServeHTTP authenticates and upgrades an agent's connection.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.admitted(r.Context()) {
		w.Header().Set("Retry-After", strconv.Itoa(int(h.cfg.BusyRetryAfter/time.Second)))
		http.Error(w, "the control plane is admitting other agents; retry later", http.StatusServiceUnavailable)
		return
	}
	admitted := false
	defer func() {
		if !admitted {
			<-h.admit
		}
	}()
	peer, err := h.cfg.Authenticate(r)
	if errors.Is(err, ErrUnavailable) {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		// Refused before the upgrade, with a plain answer the agent can log.
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	auth := (&http.Request{Method: r.Method, URL: &url.URL{Path: r.URL.Path}, Proto: r.Proto, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor,
		Header: http.Header{"Authorization": r.Header.Values("Authorization")}, Body: http.NoBody, Host: r.Host, RemoteAddr: r.RemoteAddr}).WithContext(h.ctx)
	ws, err := h.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := newConn(ws, h.cfg.ReadTimeout, h.cfg.PingEvery)
	peer.Session = newSession()
	ac := &agentConn{peer: &peer, c: c, auth: auth, sent: map[string]int{}}
	h.mu.Lock()
	h.pending[ac] = struct{}{}
	h.mu.Unlock()
	admitted = true
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.serve(ac)
	}()
}

// admitted takes a place among the connections between upgrade and welcome,
// waiting up to AdmitWait for one; false when none came free.
func (h *Hub) admitted(ctx context.Context) bool {
	select {
	case h.admit <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.cfg.AdmitWait)
	defer t.Stop()
	select {
	case h.admit <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (h *Hub) serve(ac *agentConn) {
	ctx := h.ctx
	reason := h.handshake(ctx, ac)
	<-h.admit
	h.mu.Lock()
	delete(h.pending, ac)
	h.mu.Unlock()
	if reason != "" {
		ac.c.close(websocket.ClosePolicyViolation, reason)
		h.reportDisconnect(ctx, ac, reason)
		return
	}
	h.mu.Lock()
	select {
	case <-ac.c.closed():
		// Revoked between the hello's check and now.
		h.mu.Unlock()
		h.reportDisconnect(ctx, ac, ac.c.reason)
		return
	default:
	}
	if old := h.conns[ac.peer.ServerID]; old != nil {
		// The same server connected again: the newer connection wins.
		old.c.close(websocket.CloseNormalClosure, "replaced by a newer connection of the same server")
	}
	// The welcome is queued and the connection listed under the hub's
	// lock: an agent that has its welcome is found by what is sent to it
	// next (an upgrade sent as soon as it says it is connected), and
	// nothing sent to it goes out before the welcome.
	welcome, _ := Encode(TypeWelcome, "", Welcome{Protocol: ProtocolVersion, ServerID: ac.peer.ServerID, HeartbeatSeconds: int(HeartbeatInterval / time.Second)})
	if err := ac.c.send(welcome); err != nil {
		h.mu.Unlock()
		h.reportDisconnect(ctx, ac, "closed during the handshake")
		return
	}
	h.listLocked(ac)
	h.mu.Unlock()
	go h.deliverConnected(ctx, ac)
	reason = h.readLoop(ctx, ac)
	ac.c.close(websocket.ClosePolicyViolation, reason)
	h.mu.Lock()
	current := h.conns[ac.peer.ServerID] == ac
	if current {
		h.unlistLocked(ac)
	}
	h.mu.Unlock()
	// A connection replaced by a newer one of the same server (an agent
	// that restarted, after an upgrade say) is not a disconnect: reporting
	// it after the newer one's hello would record the server offline.
	if current {
		h.reportDisconnect(ctx, ac, reason)
	}
}

// listLocked lists ac as its server's connection (in place of an earlier
// one), by server and by cluster; h.mu is held.
func (h *Hub) listLocked(ac *agentConn) {
	if old := h.conns[ac.peer.ServerID]; old != nil {
		h.unlistLocked(old)
	}
	h.conns[ac.peer.ServerID] = ac
	set := h.byCluster[ac.peer.ClusterID]
	if set == nil {
		set = map[*agentConn]struct{}{}
		h.byCluster[ac.peer.ClusterID] = set
	}
	set[ac] = struct{}{}
}

// unlistLocked removes ac from both lists; h.mu is held.
func (h *Hub) unlistLocked(ac *agentConn) {
	if h.conns[ac.peer.ServerID] == ac {
		delete(h.conns, ac.peer.ServerID)
	}
	if set := h.byCluster[ac.peer.ClusterID]; set != nil {
		delete(set, ac)
		if len(set) == 0 {
			delete(h.byCluster, ac.peer.ClusterID)
		}
	}
}

// newSession returns a random id for one connection.
func newSession() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *Hub) reportDisconnect(ctx context.Context, ac *agentConn, reason string) {
	if h.cfg.OnDisconnect != nil {
		h.cfg.OnDisconnect(context.WithoutCancel(ctx), *ac.peer, reason)
	}
}

// handshake reads and checks the hello (serve answers it with a welcome);
// it returns a reason to close, or "".
func (h *Hub) handshake(ctx context.Context, ac *agentConn) string {
	// The hello must come within ReadTimeout of the upgrade, whatever else
	// the peer answers: its pongs move the read deadline on, and a peer that
	// only answered pings would hold its admission place for ever.
	helloBy := time.AfterFunc(h.cfg.ReadTimeout, func() { ac.c.close(websocket.ClosePolicyViolation, "no hello in time") })
	frame, err := ac.c.read()
	helloBy.Stop()
	if err != nil {
		return "no hello"
	}
	env, err := Decode(frame)
	if err != nil || env.Type != TypeHello {
		return "the first frame must be a hello"
	}
	var hello Hello
	if err := DecodeValid(env, &hello); err != nil {
		return refuse(ac.c, err)
	}
	if hello.Protocol != ProtocolVersion {
		msg, _ := Encode(TypeError, "", ErrorMessage{Code: "protocol_unsupported", Message: fmt.Sprintf("this control plane speaks protocol %d", ProtocolVersion)})
		_ = ac.c.send(msg)
		return fmt.Sprintf("protocol %d is not supported", hello.Protocol)
	}
	// The credential was good at the upgrade; it must still be now, before
	// the agent counts as connected and is sent anything.
	giveUp := time.Now().Add(h.cfg.ReadTimeout)
	for {
		err := h.recheck(ctx, ac)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) {
			return err.Error()
		}
		if time.Now().After(giveUp) {
			// Not a refusal: the agent comes back later.
			return "the credential cannot be checked now"
		}
		if !sleepCtx(ctx, time.Second) {
			return "control plane shutting down"
		}
		select {
		case <-ac.c.closed():
			return ac.c.reason
		default:
		}
	}
	ac.mu.Lock()
	ac.builds = hello.Builds
	ac.mesh, ac.meshSent = hello.Mesh, hello.MeshApplied
	// The first set goes out even when it is empty: the agent may run
	// Jobs of builds that ended while it was away, which it stops then.
	ac.buildsSent = unsentBuilds
	for env, rev := range hello.Applied {
		if rev > 0 {
			ac.sent[env] = rev
		}
	}
	for env, r := range hello.Recorded {
		if r.Revision > 0 {
			if ac.recorded == nil {
				ac.recorded = map[string]AppliedRevision{}
			}
			ac.recorded[env] = r
		}
	}
	ac.mu.Unlock()
	if h.cfg.OnHello != nil {
		h.cfg.OnHello(ctx, *ac.peer, hello)
	}
	return ""
}

// readLoop handles the agent's frames until the connection ends; it returns
// why it ended.
func (h *Hub) readLoop(ctx context.Context, ac *agentConn) string {
	for {
		frame, err := ac.c.read()
		if err != nil {
			select {
			case <-ac.c.closed():
				return ac.c.reason
			default:
			}
			if errors.Is(err, ErrMalformed) {
				return "binary frames are not part of the protocol"
			}
			if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway) {
				return "agent closed the connection"
			}
			return "connection lost: " + err.Error()
		}
		env, err := Decode(frame)
		if err != nil {
			return err.Error()
		}
		switch env.Type {
		case TypeHeartbeat:
			var hb Heartbeat
			if err := DecodeValid(env, &hb); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnHeartbeat != nil {
				h.cfg.OnHeartbeat(ctx, *ac.peer, hb)
			}
		case TypeAck:
			var a Ack
			if err := DecodeValid(env, &a); err != nil {
				return refuse(ac.c, err)
			}
			ac.mu.Lock()
			if a.Revision > ac.sent[a.EnvironmentID] {
				ac.sent[a.EnvironmentID] = a.Revision
			}
			ac.mu.Unlock()
			if h.cfg.OnAck != nil {
				h.cfg.OnAck(ctx, *ac.peer, a)
			}
		case TypeMeshReport:
			var mr MeshReport
			if err := DecodeValid(env, &mr); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnMeshReport != nil {
				h.cfg.OnMeshReport(ctx, *ac.peer, mr)
			}
		case TypeStatus:
			var st Status
			if err := DecodeValid(env, &st); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnStatus != nil {
				h.cfg.OnStatus(ctx, *ac.peer, st)
			}
		case TypeLogs:
			var l Logs
			if err := DecodeValid(env, &l); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnLogs != nil {
				h.cfg.OnLogs(ctx, *ac.peer, l)
			}
		case TypeStage:
			var st StageReport
			if err := DecodeValid(env, &st); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnStage != nil {
				h.cfg.OnStage(ctx, *ac.peer, st)
			}
		case TypeBuildReport:
			var br BuildReport
			if err := DecodeValid(env, &br); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnBuildReport != nil {
				h.cfg.OnBuildReport(ctx, *ac.peer, br)
			}
		case TypeBuildLogs:
			var bl BuildLogs
			if err := DecodeValid(env, &bl); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnBuildLogs != nil {
				h.cfg.OnBuildLogs(ctx, *ac.peer, bl)
			}
		case TypeAgentUpgradeResult:
			var r AgentUpgradeResult
			if err := DecodeValid(env, &r); err != nil {
				return refuse(ac.c, err)
			}
			if h.cfg.OnUpgradeResult != nil {
				h.cfg.OnUpgradeResult(ctx, *ac.peer, r)
			}
		default:
			return fmt.Sprintf("unknown frame type %q", truncate(env.Type, 40))
		}
	}
}

// Disconnect closes every connection of a server at once (its credential
// was revoked), whether it has said hello or not.
func (h *Hub) Disconnect(serverID, reason string) bool {
	h.mu.Lock()
	var acs []*agentConn
	if ac := h.conns[serverID]; ac != nil {
		acs = append(acs, ac)
	}
	for ac := range h.pending {
		if ac.peer.ServerID == serverID {
			acs = append(acs, ac)
		}
	}
	h.mu.Unlock()
	for _, ac := range acs {
		h.revoke(ac, reason)
	}
	return len(acs) > 0
}

// Connected lists the servers connected to this replica, once each: those
// that said hello and those whose hello is still awaited (a revocation must
// find those too).
func (h *Hub) Connected() []Peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := make(map[string]bool, len(h.conns)+len(h.pending))
	out := make([]Peer, 0, len(h.conns)+len(h.pending))
	for _, ac := range h.conns {
		seen[ac.peer.ServerID] = true
		out = append(out, *ac.peer)
	}
	for ac := range h.pending {
		if !seen[ac.peer.ServerID] {
			seen[ac.peer.ServerID] = true
			out = append(out, *ac.peer)
		}
	}
	return out
}

// ConnectedIn is Connected for the servers of the given clusters only,
// found by cluster.
func (h *Hub) ConnectedIn(clusters map[string]bool) []Peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []Peer
	for cluster := range clusters {
		for ac := range h.byCluster[cluster] {
			seen[ac.peer.ServerID] = true
			out = append(out, *ac.peer)
		}
	}
	for ac := range h.pending {
		if clusters[ac.peer.ClusterID] && !seen[ac.peer.ServerID] {
			seen[ac.peer.ServerID] = true
			out = append(out, *ac.peer)
		}
	}
	return out
}

// Wait waits for every connection's goroutines to end (after ctx ended).
func (h *Hub) Wait() { h.wg.Wait() }
