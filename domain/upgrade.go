package domain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Agent upgrades: the control plane asks a connected agent to replace its
// binary with the one of the control plane's version; the upgrade succeeds
// when the agent connects again with that version, and fails when the agent
// reports a failure, rolls the new binary back, or does not come back with
// the target version in time. The facts live on the server's own stream
// (server-<id>); a staged rollout over an organisation's servers lives on the
// organisation's stream.

// Upgrade states, as the server's last upgrade shows them.
const (
	UpgradeInProgress = "in_progress"
	UpgradeSucceeded  = "succeeded"
	UpgradeFailed     = "failed"
	UpgradeRolledBack = "rolled_back"
	UpgradeTimedOut   = "timed_out"
)

// DefaultAgentUpgradeTimeout is how long an upgraded agent has to connect
// again with the target version.
const DefaultAgentUpgradeTimeout = 10 * time.Minute

// RolledBackHold is how long a version an agent rolled back is not installed
// again without force.
const RolledBackHold = 24 * time.Hour

// Refusal codes of upgrade commands: the API answers with them.
const (
	CodeServerOffline        = "server_offline"
	CodeAgentCurrent         = "agent_current"
	CodeAgentNewer           = "agent_newer"
	CodeUpgradeInProgress    = "upgrade_in_progress"
	CodeNothingToUpgrade     = "nothing_to_upgrade"
	CodeAgentPredatesUpgrade = "agent_predates_upgrade"
	CodeAgentCannotUpgrade   = "agent_cannot_upgrade"
	CodeNoAgentBinary        = "no_agent_binary"
	CodeRolledBackRecently   = "rolled_back_recently"
)

// UpgradeRefusal is why an upgrade command was refused, with a stable code.
// It wraps ErrConflict (the server's state does not allow it now) or
// ErrInvalid (it can never work as asked).
type UpgradeRefusal struct {
	Code    string
	Message string
	kind    error
}

func (r *UpgradeRefusal) Error() string { return r.kind.Error() + ": " + r.Message }
func (r *UpgradeRefusal) Unwrap() error { return r.kind }

func refuseConflict(code, format string, args ...any) error {
	return &UpgradeRefusal{Code: code, Message: fmt.Sprintf(format, args...), kind: ErrConflict}
}

func refuseInvalid(code, format string, args ...any) error {
	return &UpgradeRefusal{Code: code, Message: fmt.Sprintf(format, args...), kind: ErrInvalid}
}

// AsUpgradeRefusal returns the refusal inside err, if any.
func AsUpgradeRefusal(err error) (*UpgradeRefusal, bool) {
	var r *UpgradeRefusal
	ok := errors.As(err, &r)
	return r, ok
}

// UpgradeFacts is the agent's own account of its last upgrade, which it
// sends in its host facts (facts.agentUpgrade) at every connect: the control
// plane learns of a rollback that happened while it was not connected.
type UpgradeFacts struct {
	From   string    `json:"from,omitempty"`
	To     string    `json:"to,omitempty"`
	State  string    `json:"state,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitempty"`
}

// PendingUpgrade is an upgrade that was asked for and has not ended.
type PendingUpgrade struct {
	UpgradeID string    `json:"upgradeId"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	RolloutID string    `json:"rolloutId,omitempty"`
	At        time.Time `json:"at"`
}

// Events of a server's stream.

// AgentUpgradeRequested records that an agent is to upgrade itself to the
// control plane's version: asked by a person, by a staged rollout, or
// automatically (Auto) when a provably behind agent connected.
type AgentUpgradeRequested struct {
	ClusterID string    `json:"clusterId"`
	ServerID  string    `json:"serverId"`
	UpgradeID string    `json:"upgradeId"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Arch      string    `json:"arch"`
	SHA256    string    `json:"sha256"`
	Force     bool      `json:"force,omitempty"`
	Auto      bool      `json:"auto,omitempty"`
	RolloutID string    `json:"rolloutId,omitempty"`
	At        time.Time `json:"at"`
}

// AgentUpgraded records that the agent connected again with the target
// version.
type AgentUpgraded struct {
	ClusterID string    `json:"clusterId"`
	ServerID  string    `json:"serverId"`
	UpgradeID string    `json:"upgradeId"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	RolloutID string    `json:"rolloutId,omitempty"`
	At        time.Time `json:"at"`
}

// AgentUpgradeFailed records an upgrade that did not happen: the agent
// reported a failure (State failed, at Step), rolled the new binary back
// (rolled_back, learned from its facts, possibly long after), or did not
// connect again with the target version in time (timed_out). UpgradeID is
// empty for a rollback the control plane learns of after the upgrade had
// already ended. ReportedAt (schema 2) is the time the agent's facts gave,
// as given (At is the control plane's, never later than the connect): the
// same report at a later connect is known by it. Nil in schema 1 events and
// in failures not learned from the facts.
type AgentUpgradeFailed struct {
	ClusterID  string     `json:"clusterId"`
	ServerID   string     `json:"serverId"`
	UpgradeID  string     `json:"upgradeId,omitempty"`
	To         string     `json:"to"`
	State      string     `json:"state"`
	Step       string     `json:"step,omitempty"`
	Reason     string     `json:"reason"`
	RolloutID  string     `json:"rolloutId,omitempty"`
	At         time.Time  `json:"at"`
	ReportedAt *time.Time `json:"reportedAt,omitempty"`
}

// Message is how the failure reads on the server's page.
func (e AgentUpgradeFailed) Message() string {
	switch e.State {
	case UpgradeRolledBack:
		return "The agent rolled the upgrade back: " + e.Reason
	case UpgradeTimedOut:
		return e.Reason
	}
	if e.Step != "" {
		return fmt.Sprintf("The upgrade to %s failed at %s: %s", e.To, e.Step, e.Reason)
	}
	return fmt.Sprintf("The upgrade to %s failed: %s", e.To, e.Reason)
}

// Events of an organisation's upgrade stream.

// RolloutServer is one server of a staged rollout.
type RolloutServer struct {
	ServerID  string `json:"serverId"`
	ClusterID string `json:"clusterId"`
	Name      string `json:"name"`
}

// AgentRolloutStarted records a staged rollout: the servers are upgraded one
// at a time in this order (by name), the next when the one before connected
// again with the new version.
type AgentRolloutStarted struct {
	OrgID     string          `json:"orgId"`
	RolloutID string          `json:"rolloutId"`
	Version   string          `json:"version"`
	Servers   []RolloutServer `json:"servers"`
	At        time.Time       `json:"at"`
}

// AgentRolloutHalted records that a step failed: the servers after it are
// left as they are.
type AgentRolloutHalted struct {
	OrgID     string    `json:"orgId"`
	RolloutID string    `json:"rolloutId"`
	ServerID  string    `json:"serverId"`
	Reason    string    `json:"reason"`
	Untouched int       `json:"untouched"`
	At        time.Time `json:"at"`
}

// AgentRolloutCompleted records that every server of a rollout upgraded.
type AgentRolloutCompleted struct {
	OrgID     string    `json:"orgId"`
	RolloutID string    `json:"rolloutId"`
	At        time.Time `json:"at"`
}

func (AgentUpgradeRequested) EventType() string { return "server.agent.upgrade.requested" }
func (AgentUpgraded) EventType() string         { return "server.agent.upgraded" }
func (AgentUpgradeFailed) EventType() string    { return "server.agent.upgrade.failed" }
func (AgentRolloutStarted) EventType() string   { return "agent.rollout.started" }
func (AgentRolloutHalted) EventType() string    { return "agent.rollout.halted" }
func (AgentRolloutCompleted) EventType() string { return "agent.rollout.completed" }

// auditUpgrade describes the upgrade events for the audit log.
func auditUpgrade(e Event) (AuditEntry, bool) {
	switch e := e.(type) {
	case AgentUpgradeRequested:
		action := "server.agent.upgrade"
		if e.Auto {
			action = "server.agent.upgrade.auto"
		}
		d := fmt.Sprintf("from %s to %s", or0(e.From, "unknown"), e.To)
		if e.Force {
			d += " (force)"
		}
		if e.RolloutID != "" {
			d += " (rollout " + e.RolloutID + ")"
		}
		return AuditEntry{action, "server", e.ServerID, d}, true
	case AgentUpgraded:
		return AuditEntry{"server.agent.upgraded", "server", e.ServerID, fmt.Sprintf("from %s to %s", or0(e.From, "unknown"), e.To)}, true
	case AgentUpgradeFailed:
		return AuditEntry{"server.agent.upgrade.failed", "server", e.ServerID, e.Message()}, true
	case AgentRolloutStarted:
		names := make([]string, len(e.Servers))
		for i, s := range e.Servers {
			names[i] = s.Name
		}
		return AuditEntry{"server.agent.upgrade.rollout", "organisation", e.OrgID,
			fmt.Sprintf("rollout %s to %s: %s", e.RolloutID, e.Version, strings.Join(names, ", "))}, true
	case AgentRolloutHalted:
		return AuditEntry{"server.agent.upgrade.halted", "server", e.ServerID,
			fmt.Sprintf("rollout %s halted, %d server(s) left untouched: %s", e.RolloutID, e.Untouched, e.Reason)}, true
	case AgentRolloutCompleted:
		return AuditEntry{"server.agent.upgrade.rollout.complete", "organisation", e.OrgID, "rollout " + e.RolloutID}, true
	}
	return AuditEntry{}, false
}

func or0(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// Commands of a server's stream.

// RequestUpgrade asks a connected agent to upgrade itself to To, the control
// plane's version. Binaries maps each architecture the control plane
// carries an agent binary for to its SHA-256 (hex).
type RequestUpgrade struct {
	// Versions orders release versions (the caller's semver library: the
	// domain imports nothing but the standard library); required.
	Versions  VersionOrder
	UpgradeID string
	To        string
	Binaries  map[string]string
	Force     bool
	Auto      bool
	RolloutID string
	// Lease is the agent's liveness record as the caller read it from the
	// telemetry: the upgrade is refused server_offline unless it is live at
	// the decision's time (Lease.Live). The zero lease is not live.
	Lease Lease
}

// VersionOrder compares two versions: cmp < 0 when a is older than b, and
// comparable false unless both are release versions (1.5.0; not dev or
// 1.4.0-3-gabc1234).
type VersionOrder func(a, b string) (cmp int, comparable bool)

// ReportUpgradeResult is the agent's report of an upgrade it was asked for.
type ReportUpgradeResult struct {
	UpgradeID string
	Version   string
	OK        bool
	Step      string
	Error     string
}

// ExpireUpgrade fails an upgrade whose agent did not connect again with the
// target version within Timeout of the request.
type ExpireUpgrade struct {
	UpgradeID string
	Timeout   time.Duration
}

func (RequestUpgrade) serverCommand()      {}
func (ReportUpgradeResult) serverCommand() {}
func (ExpireUpgrade) serverCommand()       {}

// Eligible says whether an upgrade of this agent to version to could be
// asked for now, and why not (a refusal with its code). binaries maps
// architecture to the SHA-256 of the binary the control plane serves; lease
// is the agent's liveness record: an agent is offline when its lease is not
// live at now (no heartbeat for LivenessWindow, or disconnected), and also
// when this stream recorded its disconnect. Automatic and staged upgrades
// only take agents that are provably behind (behind true).
func (s *ServerLink) Eligible(order VersionOrder, to string, binaries map[string]string, force bool, lease Lease, now time.Time) (behind bool, err error) {
	switch {
	case !s.Connected:
		return false, refuseConflict(CodeServerOffline, "the server's agent is not connected")
	case !lease.Live(now):
		if lease.RenewedAt == nil || !lease.Held {
			return false, refuseConflict(CodeServerOffline, "the server's agent is not connected")
		}
		return false, refuseConflict(CodeServerOffline, "the server's agent is not connected: no heartbeat since %s (%s)",
			lease.RenewedAt.UTC().Format(time.RFC3339), LivenessWindow)
	case s.Upgrade != nil:
		return false, refuseConflict(CodeUpgradeInProgress, "an upgrade of this agent to %s is in progress since %s", s.Upgrade.To, s.Upgrade.At.UTC().Format(time.RFC3339))
	case s.Version == to:
		return false, refuseConflict(CodeAgentCurrent, "the agent already runs %s, the control plane's version", to)
	}
	c, comparable := order(s.Version, to)
	if comparable && c > 0 {
		return false, refuseConflict(CodeAgentNewer, "the agent (%s) is newer than the control plane (%s)", s.Version, to)
	}
	switch {
	case s.Upgradable == nil:
		return false, refuseInvalid(CodeAgentPredatesUpgrade, "the agent (%s) predates self-upgrades: install the new version by hand once", or0(s.Version, "unknown version"))
	case !*s.Upgradable:
		return false, refuseInvalid(CodeAgentCannotUpgrade, "the agent cannot upgrade itself: %s", or0(s.CannotUpgrade, "no reason given"))
	case binaries[s.Arch] == "":
		return false, refuseInvalid(CodeNoAgentBinary, "the control plane carries no agent binary for %s (a build without embedded agents)", or0(s.Arch, "an unknown architecture"))
	}
	if !force && s.RolledBack != nil && s.RolledBack.Version == to && now.Before(s.RolledBack.At.Add(RolledBackHold)) {
		return false, refuseConflict(CodeRolledBackRecently, "the agent rolled %s back at %s (%s); it is not installed again before %s without force",
			to, s.RolledBack.At.UTC().Format(time.RFC3339), s.RolledBack.Reason, s.RolledBack.At.Add(RolledBackHold).UTC().Format(time.RFC3339))
	}
	return comparable && c < 0, nil
}

func (s *ServerLink) decideUpgrade(c RequestUpgrade, m Meta) (Decision, error) {
	if err := ValidateID("upgrade", c.UpgradeID); err != nil {
		return Decision{}, err
	}
	if c.RolloutID != "" {
		if err := ValidateID("rollout", c.RolloutID); err != nil {
			return Decision{}, err
		}
	}
	if err := ValidateText("version", c.To, 64); err != nil {
		return Decision{}, err
	}
	if c.To == "" {
		return Decision{}, invalidf("the target version is empty")
	}
	if s.Upgrade != nil && s.Upgrade.UpgradeID == c.UpgradeID {
		return Decision{}, nil // the same request again
	}
	if c.Versions == nil {
		return Decision{}, invalidf("an upgrade needs the order of versions")
	}
	behind, err := s.Eligible(c.Versions, c.To, c.Binaries, c.Force, c.Lease, m.Now)
	if err != nil {
		return Decision{}, err
	}
	if c.Auto && !behind {
		// Never a development build nor an agent newer than the control plane.
		return Decision{}, refuseConflict(CodeAgentCurrent, "the agent (%s) is not provably behind %s", s.Version, c.To)
	}
	return decided(AgentUpgradeRequested{ClusterID: s.ClusterID, ServerID: s.ServerID, UpgradeID: c.UpgradeID, From: s.Version, To: c.To,
		Arch: s.Arch, SHA256: c.Binaries[s.Arch], Force: c.Force, Auto: c.Auto, RolloutID: c.RolloutID, At: m.Now}), nil
}

func (s *ServerLink) decideResult(c ReportUpgradeResult, m Meta) (Decision, error) {
	for _, f := range []struct{ name, value string }{{"version", c.Version}, {"step", c.Step}, {"error", c.Error}} {
		if err := ValidateText(f.name, f.value, 1000); err != nil {
			return Decision{}, err
		}
	}
	p := s.Upgrade
	if c.OK || p == nil || p.UpgradeID != c.UpgradeID {
		// Success is the agent connecting again with the new version; a
		// report of an upgrade that already ended changes nothing.
		return Decision{}, nil
	}
	return decided(AgentUpgradeFailed{ClusterID: s.ClusterID, ServerID: s.ServerID, UpgradeID: p.UpgradeID, To: p.To, State: UpgradeFailed,
		Step: c.Step, Reason: or0(c.Error, "the agent reported a failure"), RolloutID: p.RolloutID, At: m.Now}), nil
}

func (s *ServerLink) decideExpiry(c ExpireUpgrade, m Meta) (Decision, error) {
	p := s.Upgrade
	if p == nil || p.UpgradeID != c.UpgradeID {
		return Decision{}, nil
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultAgentUpgradeTimeout
	}
	if m.Now.Before(p.At.Add(timeout)) {
		return Decision{}, nil
	}
	return decided(AgentUpgradeFailed{ClusterID: s.ClusterID, ServerID: s.ServerID, UpgradeID: p.UpgradeID, To: p.To, State: UpgradeTimedOut,
		Reason: fmt.Sprintf("The agent did not connect again with %s within %s", p.To, timeout), RolloutID: p.RolloutID, At: m.Now}), nil
}

// upgradeOnConnect is what a connect says about an upgrade: the target
// version reached, or a rollback or failure the agent's facts report.
func (s *ServerLink) upgradeOnConnect(c RecordConnection, m Meta) []Event {
	p := s.Upgrade
	if p != nil && c.Version == p.To {
		return []Event{AgentUpgraded{ClusterID: c.ClusterID, ServerID: c.ServerID, UpgradeID: p.UpgradeID, From: p.From, To: p.To, RolloutID: p.RolloutID, At: m.Now}}
	}
	f := c.AgentUpgrade
	if f == nil || f.To == "" || (f.State != UpgradeRolledBack && f.State != UpgradeFailed) {
		return nil
	}
	if s.LastReport != nil && s.LastReport.To == f.To && s.LastReport.State == f.State && s.LastReport.At.Equal(f.At) {
		return nil // already learned
	}
	reported := f.At
	at := f.At
	if at.IsZero() || at.After(m.Now) {
		at = m.Now
	}
	reason := or0(f.Reason, "no reason given")
	if p != nil && p.To == f.To && !at.Before(p.At) {
		return []Event{AgentUpgradeFailed{ClusterID: c.ClusterID, ServerID: c.ServerID, UpgradeID: p.UpgradeID, To: f.To, State: f.State,
			Reason: reason, RolloutID: p.RolloutID, At: at, ReportedAt: &reported}}
	}
	if f.State != UpgradeRolledBack {
		return nil
	}
	// A rollback the control plane was not connected for (or whose upgrade
	// had already timed out): it is learned all the same.
	return []Event{AgentUpgradeFailed{ClusterID: c.ClusterID, ServerID: c.ServerID, To: f.To, State: f.State, Reason: reason, At: at, ReportedAt: &reported}}
}

// RolledBack is a version an agent rolled back, and when.
type RolledBack struct {
	Version string    `json:"version"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

func (s *ServerLink) applyUpgrade(e Event) {
	switch e := e.(type) {
	case AgentUpgradeRequested:
		s.Upgrade = &PendingUpgrade{UpgradeID: e.UpgradeID, From: e.From, To: e.To, RolloutID: e.RolloutID, At: e.At}
	case AgentUpgraded:
		s.Upgrade = nil
	case AgentUpgradeFailed:
		if s.Upgrade != nil && (e.UpgradeID == s.Upgrade.UpgradeID || e.UpgradeID == "") && (e.UpgradeID != "" || e.To == s.Upgrade.To) {
			s.Upgrade = nil
		}
		if e.State == UpgradeRolledBack || e.State == UpgradeFailed {
			at := e.At
			if e.ReportedAt != nil {
				at = *e.ReportedAt
			}
			s.LastReport = &UpgradeFacts{To: e.To, State: e.State, At: at}
		}
		if e.State == UpgradeRolledBack {
			s.RolledBack = &RolledBack{Version: e.To, Reason: e.Reason, At: e.At}
		}
	}
}

// AgentRollouts is an organisation's staged agent rollouts: at most one
// runs at a time.
type AgentRollouts struct {
	Active *ActiveRollout `json:"active,omitempty"`
}

// ActiveRollout is the rollout that runs.
type ActiveRollout struct {
	RolloutID string          `json:"rolloutId"`
	Version   string          `json:"version"`
	Servers   []RolloutServer `json:"servers"`
}

// Apply folds an event into the state.
func (r *AgentRollouts) Apply(e Event) {
	switch e := e.(type) {
	case AgentRolloutStarted:
		r.Active = &ActiveRollout{RolloutID: e.RolloutID, Version: e.Version, Servers: e.Servers}
	case AgentRolloutHalted:
		if r.Active != nil && r.Active.RolloutID == e.RolloutID {
			r.Active = nil
		}
	case AgentRolloutCompleted:
		if r.Active != nil && r.Active.RolloutID == e.RolloutID {
			r.Active = nil
		}
	}
}

// RolloutCommand is a command of an organisation's rollouts (issued
// through the organisation's stream).
type RolloutCommand interface {
	OrganisationCommand
	rolloutCommand()
}

// StartRollout starts a staged rollout over servers (the caller picked those
// that can be upgraded now).
type StartRollout struct {
	OrgID     string
	RolloutID string
	Version   string
	Servers   []RolloutServer
}

// HaltRollout stops a rollout at a failed step.
type HaltRollout struct {
	RolloutID string
	ServerID  string
	Reason    string
}

// CompleteRollout ends a rollout whose last server upgraded.
type CompleteRollout struct{ RolloutID string }

func (StartRollout) rolloutCommand()    {}
func (HaltRollout) rolloutCommand()     {}
func (CompleteRollout) rolloutCommand() {}

func (StartRollout) organisationCommand()    {}
func (HaltRollout) organisationCommand()     {}
func (CompleteRollout) organisationCommand() {}

// Decide decides a rollout command.
func (r *AgentRollouts) Decide(orgID string, cmd RolloutCommand, m Meta) (Decision, error) {
	switch c := cmd.(type) {
	case StartRollout:
		if err := ValidateID("rollout", c.RolloutID); err != nil {
			return Decision{}, err
		}
		if r.Active != nil {
			if r.Active.RolloutID == c.RolloutID {
				return Decision{}, nil
			}
			return Decision{}, refuseConflict(CodeUpgradeInProgress, "rollout %s to %s is in progress", r.Active.RolloutID, r.Active.Version)
		}
		if len(c.Servers) == 0 {
			return Decision{}, refuseConflict(CodeNothingToUpgrade, "no server of the organisation can be upgraded to %s now: none is connected, behind the control plane, able to upgrade itself and not upgrading already", c.Version)
		}
		seen := map[string]bool{}
		for _, s := range c.Servers {
			if err := ValidateID("server", s.ServerID); err != nil {
				return Decision{}, err
			}
			if seen[s.ServerID] {
				return Decision{}, invalidf("server %s is in the rollout twice", s.ServerID)
			}
			seen[s.ServerID] = true
		}
		return decided(AgentRolloutStarted{OrgID: orgID, RolloutID: c.RolloutID, Version: c.Version, Servers: c.Servers, At: m.Now}), nil
	case HaltRollout:
		if r.Active == nil || r.Active.RolloutID != c.RolloutID {
			return Decision{}, nil
		}
		untouched := 0
		for i, s := range r.Active.Servers {
			if s.ServerID == c.ServerID {
				untouched = len(r.Active.Servers) - i - 1
			}
		}
		return decided(AgentRolloutHalted{OrgID: orgID, RolloutID: c.RolloutID, ServerID: c.ServerID, Reason: c.Reason, Untouched: untouched, At: m.Now}), nil
	case CompleteRollout:
		if r.Active == nil || r.Active.RolloutID != c.RolloutID {
			return Decision{}, nil
		}
		return decided(AgentRolloutCompleted{OrgID: orgID, RolloutID: c.RolloutID, At: m.Now}), nil
	}
	return Decision{}, invalidf("command %T is not a rollout command", cmd)
}
