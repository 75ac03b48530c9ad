package reactions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/agentbin"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

// The reactions of agent upgrades:
//   - a provably behind agent that connects is upgraded at once when the
//     instance's automatic upgrade is on (never a development build nor an
//     agent newer than the control plane; the domain refuses those);
//   - a requested upgrade is sent to the agent as an agent_upgrade, and a
//     durable timer fails it when the agent has not connected again with
//     the target version in time;
//   - a staged rollout upgrades its servers one at a time: the next when the
//     one before upgraded, halting at the first failure.

const timerUpgrade = "agent-upgrade"

// AgentUpgrade is what an agent is asked to install: the wiring sends it as
// the protocol's agent_upgrade frame (reactions never speak the protocol).
type AgentUpgrade struct {
	ID      string
	Version string
	SHA256  string
	Force   bool
}

// UpgradeReport is an agent's answer to an AgentUpgrade; Step names the
// step that failed.
type UpgradeReport struct {
	ID      string
	Version string
	OK      bool
	Step    string
	Error   string
}

// UpgradeSender sends an agent upgrade to a connected agent (the wiring
// adapts agentlink.Link.SendUpgrade: the agent link owns delivery to the
// agents); an error wrapping the configured Offline error means the agent
// is not connected to this replica.
type UpgradeSender interface {
	SendUpgrade(ctx context.Context, serverID string, u AgentUpgrade) error
}

// Upgrades configures the reactions of agent upgrades.
type Upgrades struct {
	// Sender reaches the agents; without one a requested upgrade fails at
	// once (nothing can deliver it).
	Sender UpgradeSender
	// Offline is the error (matched with errors.Is) by which the sender says
	// that the agent is not connected.
	Offline error
	// Binaries are the agent binaries the control plane serves.
	Binaries agentbin.Source
	// Version is the control plane's version: the target of every upgrade.
	Version string
	// Timeout is how long an upgraded agent has to connect again with the
	// target version (default domain.DefaultAgentUpgradeTimeout).
	Timeout time.Duration
	// Leases reads a server's liveness record (query.ServerLease): each
	// upgrade the reactions ask for carries it, and the domain refuses an
	// agent whose lease is not live (server_offline). Without it every
	// automatic or staged upgrade is refused as offline.
	Leases func(ctx context.Context, q eventstore.Querier, serverID string) (domain.Lease, error)
}

// lease reads a server's lease for an upgrade command (the zero lease, not
// live, without a reader).
func (r *Reactions) lease(ctx context.Context, q eventstore.Querier, serverID string) (domain.Lease, error) {
	if r.cfg.Upgrades.Leases == nil {
		return domain.Lease{}, nil
	}
	l, err := r.cfg.Upgrades.Leases(ctx, q, serverID)
	if err != nil {
		return domain.Lease{}, fmt.Errorf("reading the lease of server %s: %w", serverID, err)
	}
	return l, nil
}

// BinaryHashes maps each architecture src serves to the SHA-256 of its
// binary; architectures without one are left out.
func BinaryHashes(src agentbin.Source) map[string]string {
	out := map[string]string{}
	if src == nil {
		return out
	}
	for _, arch := range agentbin.Arches {
		if b, err := src.Binary(arch); err == nil {
			out[arch] = b.SHA256
		}
	}
	return out
}

func (r *Reactions) upgradeTimeout() time.Duration {
	if r.cfg.Upgrades.Timeout > 0 {
		return r.cfg.Upgrades.Timeout
	}
	return domain.DefaultAgentUpgradeTimeout
}

// reactUpgrade handles the events of agent upgrades; handled is false for
// every other event.
func (r *Reactions) reactUpgrade(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.Event, c dispatch.Context) (ops []timerOp, handled bool, err error) {
	switch d := d.(type) {
	case domain.ServerConnected:
		return nil, true, r.autoUpgrade(ctx, tx, e, d, c)
	case domain.AgentUpgradeRequested:
		ops := []timerOp{{key: upgradeTimerKey(d.ServerID), kind: timerUpgrade, org: e.OrgID, due: d.At.Add(r.upgradeTimeout()),
			payload: timerPayload{ServerID: d.ServerID, UpgradeID: d.UpgradeID}}}
		return ops, true, r.sendUpgrade(ctx, tx, e, d, c)
	case domain.AgentUpgraded:
		ops := []timerOp{{key: upgradeTimerKey(d.ServerID)}}
		if d.RolloutID == "" {
			return ops, true, nil
		}
		return ops, true, r.advanceRollout(ctx, tx, c, e.OrgID, d.RolloutID, d.ServerID)
	case domain.AgentUpgradeFailed:
		var ops []timerOp
		if d.UpgradeID != "" {
			ops = []timerOp{{key: upgradeTimerKey(d.ServerID)}}
		}
		if d.RolloutID == "" {
			return ops, true, nil
		}
		_, err := r.cfg.Commands.Organisation(ctx, c, e.OrgID, domain.HaltRollout{RolloutID: d.RolloutID, ServerID: d.ServerID, Reason: d.Message()})
		return ops, true, ignoreDecided(err, r.cfg.Logger, "halting rollout "+d.RolloutID)
	case domain.AgentRolloutStarted:
		return nil, true, r.advanceRollout(ctx, tx, c, e.OrgID, d.RolloutID, "")
	}
	return nil, false, nil
}

func upgradeTimerKey(serverID string) string { return timerUpgrade + ":" + serverID }

// autoUpgrade upgrades a provably behind agent that connected, when the
// instance's automatic upgrade is on.
func (r *Reactions) autoUpgrade(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.ServerConnected, c dispatch.Context) error {
	target := r.cfg.Upgrades.Version
	if !version.Behind(d.Version, target) {
		return nil
	}
	on, err := r.cfg.Reads.AgentAutoUpgrade(ctx, tx)
	if err != nil {
		return fmt.Errorf("reading the automatic upgrade setting: %w", err)
	}
	if !on {
		return nil
	}
	lease, err := r.lease(ctx, tx, d.ServerID)
	if err != nil {
		return err
	}
	id := domain.DeriveID(strconv.FormatInt(e.Position, 10), "auto-upgrade", d.ServerID)
	_, err = r.cfg.Commands.Server(ctx, c, e.OrgID, d.ServerID, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: id, To: target,
		Binaries: BinaryHashes(r.cfg.Upgrades.Binaries), Auto: true, Lease: lease})
	return ignoreDecided(err, r.cfg.Logger, "upgrading the agent of server "+d.ServerID+" automatically")
}

// sendUpgrade sends a requested upgrade to its agent, unless it already
// ended (an event handled again, or read again after a restart).
func (r *Reactions) sendUpgrade(ctx context.Context, tx pgx.Tx, e eventstore.Event, d domain.AgentUpgradeRequested, c dispatch.Context) error {
	ended, err := eventstore.HasEventAfter(ctx, tx, e.StreamID, e.StreamVersion,
		domain.AgentUpgraded{}.EventType(), domain.AgentUpgradeFailed{}.EventType())
	if err != nil {
		return fmt.Errorf("reading whether upgrade %s ended: %w", d.UpgradeID, err)
	}
	if ended {
		return nil
	}
	if r.cfg.Upgrades.Sender == nil {
		_, err = r.cfg.Commands.Server(ctx, c, e.OrgID, d.ServerID, domain.ReportUpgradeResult{UpgradeID: d.UpgradeID, Step: "send",
			Error: "this control plane has no link to its agents"})
		return ignoreDecided(err, r.cfg.Logger, "failing upgrade "+d.UpgradeID)
	}
	err = r.send(ctx, d.ServerID, AgentUpgrade{ID: d.UpgradeID, Version: d.To, SHA256: d.SHA256, Force: d.Force})
	if r.cfg.Upgrades.Offline != nil && errors.Is(err, r.cfg.Upgrades.Offline) {
		// The agent is connected to another replica (or just lost its
		// connection): that replica's DeliverUpgrades sends it, or the
		// agent's when it connects again; the timeout ends it otherwise.
		r.cfg.Logger.Debug("reactions: an agent upgrade waits for its agent's replica", "server", d.ServerID, "upgrade", d.UpgradeID)
		return nil
	}
	if err == nil {
		return nil
	}
	r.cfg.Logger.Warn("reactions: an agent upgrade could not be sent", "server", d.ServerID, "upgrade", d.UpgradeID, "err", err)
	_, err = r.cfg.Commands.Server(ctx, c, e.OrgID, d.ServerID, domain.ReportUpgradeResult{UpgradeID: d.UpgradeID, Step: "send",
		Error: "the upgrade could not be sent: " + err.Error()})
	return ignoreDecided(err, r.cfg.Logger, "failing upgrade "+d.UpgradeID)
}

// upgradeSends are the agent upgrades this replica sent, so that each goes
// out once from it.
type upgradeSends struct {
	mu   sync.Mutex
	sent map[string]bool
}

// send sends an agent_upgrade once per upgrade from this replica: it is
// marked sent before it goes out, so that the reaction and DeliverUpgrades
// never both send it, and unmarked when it could not be sent.
func (r *Reactions) send(ctx context.Context, serverID string, u AgentUpgrade) error {
	r.sends.mu.Lock()
	if r.sends.sent == nil || len(r.sends.sent) > 10_000 {
		r.sends.sent = map[string]bool{}
	}
	if r.sends.sent[u.ID] {
		r.sends.mu.Unlock()
		return nil
	}
	r.sends.sent[u.ID] = true
	r.sends.mu.Unlock()
	err := r.cfg.Upgrades.Sender.SendUpgrade(ctx, serverID, u)
	if err != nil {
		r.sends.mu.Lock()
		delete(r.sends.sent, u.ID)
		r.sends.mu.Unlock()
	}
	return err
}

// DeliverUpgrades sends the upgrades in progress of the agents connected to
// this replica that it has not sent yet: the reaction to a request runs on
// whichever replica handles the batch, and the agent may be connected to
// another, or connect again after a lost connection. It runs until ctx
// ends, looking whenever wake fires (at most every deliverEvery: wakes come
// with every change, and a burst of changes must not become a burst of
// reads) and every few seconds.
func (r *Reactions) DeliverUpgrades(ctx context.Context, connected func() []string, wake <-chan struct{}) error {
	eventstore.Throttle(ctx, wake, deliverEvery, 2*time.Second, func(ctx context.Context) {
		if r.cfg.Upgrades.Sender == nil {
			return
		}
		ids := connected()
		if len(ids) == 0 {
			return
		}
		if err := r.deliverPending(ctx, ids); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("reactions: delivering pending agent upgrades", "err", err)
		}
	})
	return nil
}

// deliverEvery is how often, at most, a wake makes DeliverUpgrades look.
const deliverEvery = 500 * time.Millisecond

func (r *Reactions) deliverPending(ctx context.Context, serverIDs []string) error {
	// The upgrades in progress are few and the connected servers many (a
	// replica may hold thousands): read the few, keep those connected here.
	here := make(map[string]bool, len(serverIDs))
	for _, id := range serverIDs {
		here[id] = true
	}
	upgrading, err := r.cfg.Reads.UpgradingServers(ctx, r.pool)
	if err != nil {
		return fmt.Errorf("reading the pending upgrades: %w", err)
	}
	streams := make([]string, 0, len(upgrading))
	for _, id := range upgrading {
		if here[id] {
			streams = append(streams, domain.ServerStream(id))
		}
	}
	requested, err := eventstore.LatestOfType(ctx, r.pool, streams, domain.AgentUpgradeRequested{}.EventType())
	if err != nil {
		return fmt.Errorf("reading the pending upgrades: %w", err)
	}
	type pending struct {
		server string
		req    domain.AgentUpgradeRequested
	}
	var todo []pending
	for _, id := range upgrading {
		e, ok := requested[domain.ServerStream(id)]
		if !ok || !here[id] {
			continue
		}
		p := pending{server: id}
		if err := json.Unmarshal(e.Payload, &p.req); err != nil {
			continue
		}
		todo = append(todo, p)
	}
	for _, p := range todo {
		d := p.req
		err := r.send(ctx, p.server, AgentUpgrade{ID: d.UpgradeID, Version: d.To, SHA256: d.SHA256, Force: d.Force})
		if err != nil && !(r.cfg.Upgrades.Offline != nil && errors.Is(err, r.cfg.Upgrades.Offline)) {
			r.cfg.Logger.Warn("reactions: sending a pending agent upgrade", "server", p.server, "upgrade", d.UpgradeID, "err", err)
		}
	}
	return nil
}

// advanceRollout asks for the upgrade of the rollout's next server after
// the one given ("" for the first). A server that already runs the target
// version is passed over; one that cannot be upgraded now halts the rollout;
// after the last one the rollout is complete.
func (r *Reactions) advanceRollout(ctx context.Context, tx pgx.Tx, c dispatch.Context, orgID, rolloutID, after string) error {
	starts, err := eventstore.EventsOfType(ctx, tx, domain.OrgStream(orgID), domain.AgentRolloutStarted{}.EventType())
	if err != nil {
		return fmt.Errorf("reading rollout %s: %w", rolloutID, err)
	}
	var payload []byte
	for _, e := range starts {
		var id struct {
			RolloutID string `json:"rolloutId"`
		}
		if json.Unmarshal(e.Payload, &id) == nil && id.RolloutID == rolloutID {
			payload = e.Payload
			break
		}
	}
	if payload == nil {
		r.cfg.Logger.Error("reactions: a rollout without its start", "rollout", rolloutID)
		return nil
	}
	var started domain.AgentRolloutStarted
	if err := json.Unmarshal(payload, &started); err != nil {
		r.cfg.Logger.Error("reactions: an unreadable rollout", "rollout", rolloutID, "err", err)
		return nil
	}
	next := 0
	if after != "" {
		next = len(started.Servers)
		for i, s := range started.Servers {
			if s.ServerID == after {
				next = i + 1
			}
		}
	}
	hashes := BinaryHashes(r.cfg.Upgrades.Binaries)
	for _, s := range started.Servers[min(next, len(started.Servers)):] {
		lease, err := r.lease(ctx, tx, s.ServerID)
		if err != nil {
			return err
		}
		_, err = r.cfg.Commands.Server(ctx, c, orgID, s.ServerID, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: domain.DeriveID(rolloutID, s.ServerID),
			To: r.cfg.Upgrades.Version, Binaries: hashes, RolloutID: rolloutID, Lease: lease})
		if err == nil {
			return nil
		}
		if ref, ok := domain.AsUpgradeRefusal(err); ok && ref.Code == domain.CodeAgentCurrent {
			continue
		}
		if err := ignoreDecided(err, r.cfg.Logger, "upgrading server "+s.ServerID+" in rollout "+rolloutID); err != nil {
			return err
		}
		reason := err.Error()
		if ref, ok := domain.AsUpgradeRefusal(err); ok {
			reason = ref.Message
		}
		_, err = r.cfg.Commands.Organisation(ctx, c, orgID, domain.HaltRollout{RolloutID: rolloutID, ServerID: s.ServerID,
			Reason: fmt.Sprintf("%s cannot be upgraded: %s", s.Name, reason)})
		return ignoreDecided(err, r.cfg.Logger, "halting rollout "+rolloutID)
	}
	_, err = r.cfg.Commands.Organisation(ctx, c, orgID, domain.CompleteRollout{RolloutID: rolloutID})
	return ignoreDecided(err, r.cfg.Logger, "completing rollout "+rolloutID)
}

// fireUpgrade fails an upgrade whose agent did not come back in time.
func (r *Reactions) fireUpgrade(ctx context.Context, c dispatch.Context, org string, p timerPayload) error {
	_, err := r.cfg.Commands.Server(ctx, c, org, p.ServerID, domain.ExpireUpgrade{UpgradeID: p.UpgradeID, Timeout: r.upgradeTimeout()})
	return err
}
