package transport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gorilla/websocket"
)

// ErrNotConnected means the server has no connection to this replica that
// has said hello.
var ErrNotConnected = errors.New("the server is not connected to this control plane replica")

// SendUpgrade sends an agent_upgrade to a connected server. The frame holds
// no secret; the credential is checked again all the same, so a revoked
// server is told nothing more.
func (h *Hub) SendUpgrade(ctx context.Context, serverID string, u AgentUpgrade) error {
	h.mu.Lock()
	ac := h.conns[serverID]
	h.mu.Unlock()
	if ac == nil {
		return ErrNotConnected
	}
	if err := h.recheck(ctx, ac); err != nil {
		if errors.Is(err, ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	frame, err := Encode(TypeAgentUpgrade, u.ID, u)
	if err != nil {
		return err
	}
	if err := ac.c.send(frame); err != nil {
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	return nil
}

// SendBuilds sends a connected server the builds its cluster should run,
// unless this very set was the last one sent on this connection (key says
// what the set is: the caller's digest of it). The set carries opened
// credentials: the server's credential is checked again first. A server
// whose agent does not run builds is sent nothing (ErrNoBuilds).
func (h *Hub) SendBuilds(ctx context.Context, serverID, key string, b Builds) error {
	h.mu.Lock()
	ac := h.conns[serverID]
	h.mu.Unlock()
	if ac == nil {
		return ErrNotConnected
	}
	ac.mu.Lock()
	can, same := ac.builds, ac.buildsSent == key
	ac.mu.Unlock()
	if !can {
		return ErrNoBuilds
	}
	if same {
		return nil
	}
	if err := h.recheck(ctx, ac); err != nil {
		if errors.Is(err, ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	frame, err := Encode(TypeBuilds, "", b)
	if err != nil {
		return err
	}
	if err := ac.c.send(frame); err != nil {
		return fmt.Errorf("%w: %v", ErrNotConnected, err)
	}
	ac.mu.Lock()
	ac.buildsSent = key
	ac.mu.Unlock()
	return nil
}

// unsentBuilds is the key of a connection that was sent no set yet; no
// set's key equals it.
const unsentBuilds = "\x00unsent"

// ErrNoBuilds means the server's agent predates builds.
var ErrNoBuilds = errors.New("the server's agent does not run builds")

// errRevoked is a credential that no longer authenticates.
var errRevoked = errors.New("the credential is no longer valid")

// recheck authenticates the connection's credential again. When it is no
// longer valid, the connection is told why and closed, and the error says
// so; an error wrapping ErrUnavailable leaves the connection open (nothing
// is known), and the caller sends nothing secret for now.
func (h *Hub) recheck(ctx context.Context, ac *agentConn) error {
	select {
	case <-ac.c.closed():
		return fmt.Errorf("%w: %s", errRevoked, ac.c.reason)
	default:
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p, err := h.cfg.Authenticate(ac.auth.WithContext(cctx))
	if errors.Is(err, ErrUnavailable) || err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err == nil && p.ServerID != ac.peer.ServerID {
		err = errors.New("the credential names another server")
	}
	if err != nil {
		h.revoke(ac, err.Error())
		return fmt.Errorf("%w: %v", errRevoked, err)
	}
	return nil
}

// revoke tells the connection its credential is revoked and closes it.
func (h *Hub) revoke(ac *agentConn, reason string) {
	msg, _ := Encode(TypeError, "", ErrorMessage{Code: "credential_revoked", Message: reason})
	_ = ac.c.send(msg)
	ac.c.close(websocket.ClosePolicyViolation, reason)
}

// BuildsToSend lists the connected servers (said hello) whose agent runs
// builds and was last sent another set of builds than key says their
// cluster's is now: those a delivery of builds must reach. One pass over
// the connections under the hub's lock, without copying every peer: the
// delivery runs at every change, and with thousands of agents connected a
// look at each of them, each time, was most of a reconnect storm's CPU.
func (h *Hub) BuildsToSend(key func(clusterID string) string) []Peer {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Peer
	for _, ac := range h.conns {
		ac.mu.Lock()
		can, sent := ac.builds, ac.buildsSent
		ac.mu.Unlock()
		if can && sent != key(ac.peer.ClusterID) {
			out = append(out, *ac.peer)
		}
	}
	return out
}

// Count is how many servers have said hello on this replica.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}
