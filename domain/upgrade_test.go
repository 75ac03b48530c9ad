package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

const (
	serverID = "00000000-0000-4000-8000-000000000050"
	upg1     = "00000000-0000-4000-8000-000000000051"
	upg2     = "00000000-0000-4000-8000-000000000052"
	roll1    = "00000000-0000-4000-8000-000000000053"
)

var bins = map[string]string{"amd64": "ab", "arm64": "cd"}

func yes() *bool { b := true; return &b }

// connected is a server link whose agent connected with version v.
func connected(t *testing.T, v string, upgradable *bool) *domain.ServerLink {
	t.Helper()
	s := domain.NewServerLink()
	decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: v, Arch: "amd64", Upgradable: upgradable})
	return s
}

// heartbeatAt is the lease of an agent whose last heartbeat came at at.
func heartbeatAt(at time.Time) domain.Lease { return domain.Lease{Held: true, RenewedAt: &at} }

// withLease gives an upgrade request that carries no lease the lease of an
// agent whose heartbeat came just now (at): the tests of the other refusals
// are about live agents; TestUpgradeNeedsALiveLease gives its own.
func withLease(c domain.ServerCommand, at time.Time) domain.ServerCommand {
	if r, ok := c.(domain.RequestUpgrade); ok && r.Lease == (domain.Lease{}) {
		r.Lease = heartbeatAt(at)
		return r
	}
	return c
}

func decideServer(t *testing.T, s *domain.ServerLink, at time.Time, c domain.ServerCommand) []domain.Event {
	t.Helper()
	c = withLease(c, at)
	m := domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: at}
	d, err := s.Decide(c, m)
	require.NoError(t, err, "%T", c)
	for _, e := range d.Events {
		s.Apply(e)
	}
	return d.Events
}

func refusal(t *testing.T, s *domain.ServerLink, at time.Time, c domain.ServerCommand) string {
	t.Helper()
	_, err := s.Decide(withLease(c, at), domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: at})
	require.Error(t, err)
	r, ok := domain.AsUpgradeRefusal(err)
	require.True(t, ok, "a refusal with a code: %v", err)
	return r.Code
}

func TestUpgradeRefusals(t *testing.T) {
	t.Parallel()
	req := domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins}
	off := connected(t, "1.4.0", yes())
	decideServer(t, off, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID})
	require.Equal(t, domain.CodeServerOffline, refusal(t, off, now, req))
	require.Equal(t, domain.CodeAgentCurrent, refusal(t, connected(t, "1.5.0", yes()), now, req))
	require.Equal(t, domain.CodeAgentNewer, refusal(t, connected(t, "1.6.0", yes()), now, req))
	require.Equal(t, domain.CodeAgentPredatesUpgrade, refusal(t, connected(t, "1.4.0", nil), now, req))
	no := false
	require.Equal(t, domain.CodeAgentCannotUpgrade, refusal(t, connected(t, "1.4.0", &no), now, req))
	noBinary := req
	noBinary.Binaries = map[string]string{"arm64": "cd"}
	require.Equal(t, domain.CodeNoAgentBinary, refusal(t, connected(t, "1.4.0", yes()), now, noBinary))
	busy := connected(t, "1.4.0", yes())
	decideServer(t, busy, now, req)
	again := req
	again.UpgradeID = upg2
	require.Equal(t, domain.CodeUpgradeInProgress, refusal(t, busy, now, again))
	require.Empty(t, decideServer(t, busy, now, req), "the same request again changes nothing")
}

func TestAutomaticUpgradeOnlyOfAProvablyBehindAgent(t *testing.T) {
	t.Parallel()
	auto := domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins, Auto: true}
	for _, v := range []string{"dev", "1.4.0-3-gabc1234"} {
		require.Equal(t, domain.CodeAgentCurrent, refusal(t, connected(t, v, yes()), now, auto), v)
	}
	require.Equal(t, domain.CodeAgentNewer, refusal(t, connected(t, "1.6.0", yes()), now, auto))
	ev := decideServer(t, connected(t, "1.4.0", yes()), now, auto)
	require.Len(t, ev, 1)
	require.Equal(t, "server.agent.upgrade.auto", domain.Audit(ev[0]).Action)
	// A person may upgrade a development build.
	ev = decideServer(t, connected(t, "dev", yes()), now, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins})
	require.Equal(t, "server.agent.upgrade", domain.Audit(ev[0]).Action)
}

func TestUpgradeSucceedsWhenTheAgentReturnsWithTheTargetVersion(t *testing.T) {
	t.Parallel()
	s := connected(t, "1.4.0", yes())
	decideServer(t, s, now, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins, RolloutID: roll1})
	decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Reason: "restarting"})
	// The old version connecting again is not success.
	ev := decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.4.0", Upgradable: yes()})
	require.Len(t, ev, 1)
	ev = decideServer(t, s, now.Add(time.Minute), domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.5.0", Upgradable: yes()})
	require.Len(t, ev, 2)
	up, ok := ev[1].(domain.AgentUpgraded)
	require.True(t, ok)
	require.Equal(t, domain.AgentUpgraded{ClusterID: clusterID, ServerID: serverID, UpgradeID: upg1, From: "1.4.0", To: "1.5.0", RolloutID: roll1, At: now.Add(time.Minute)}, up)
	require.Nil(t, s.Upgrade)
}

func TestUpgradeFailsOnAReportOrATimeout(t *testing.T) {
	t.Parallel()
	s := connected(t, "1.4.0", yes())
	decideServer(t, s, now, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins})
	require.Empty(t, decideServer(t, s, now, domain.ReportUpgradeResult{UpgradeID: upg1, OK: true}))
	require.Empty(t, decideServer(t, s, now, domain.ReportUpgradeResult{UpgradeID: upg2, Step: "download", Error: "x"}), "another upgrade's report")
	ev := decideServer(t, s, now, domain.ReportUpgradeResult{UpgradeID: upg1, Step: "verify", Error: "hash mismatch"})
	require.Len(t, ev, 1)
	f := ev[0].(domain.AgentUpgradeFailed)
	require.Equal(t, domain.UpgradeFailed, f.State)
	require.Equal(t, "server.agent.upgrade.failed", domain.Audit(f).Action)
	require.Contains(t, f.Message(), "hash mismatch")

	decideServer(t, s, now, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg2, To: "1.5.0", Binaries: bins})
	require.Empty(t, decideServer(t, s, now.Add(9*time.Minute), domain.ExpireUpgrade{UpgradeID: upg2, Timeout: 10 * time.Minute}), "not due yet")
	ev = decideServer(t, s, now.Add(10*time.Minute), domain.ExpireUpgrade{UpgradeID: upg2, Timeout: 10 * time.Minute})
	require.Equal(t, domain.UpgradeTimedOut, ev[0].(domain.AgentUpgradeFailed).State)
	require.Nil(t, s.Upgrade)
}

func TestARollbackIsLearnedFromTheFactsAndHeldFor24Hours(t *testing.T) {
	t.Parallel()
	s := connected(t, "1.4.0", yes())
	decideServer(t, s, now, domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins})
	// The upgrade times out first: the control plane was not told.
	decideServer(t, s, now.Add(11*time.Minute), domain.ExpireUpgrade{UpgradeID: upg1, Timeout: 10 * time.Minute})
	facts := &domain.UpgradeFacts{From: "1.4.0", To: "1.5.0", State: domain.UpgradeRolledBack, Reason: "crash loop: 3 starts without staying connected", At: now.Add(8 * time.Minute)}
	connect := domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.4.0", Arch: "amd64", Upgradable: yes(), AgentUpgrade: facts}
	ev := decideServer(t, s, now.Add(12*time.Minute), connect)
	require.Len(t, ev, 2)
	f := ev[1].(domain.AgentUpgradeFailed)
	require.Equal(t, "The agent rolled the upgrade back: crash loop: 3 starts without staying connected", f.Message())
	require.Len(t, decideServer(t, s, now.Add(13*time.Minute), connect), 1, "learned once")

	req := domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg2, To: "1.5.0", Binaries: bins}
	require.Equal(t, domain.CodeRolledBackRecently, refusal(t, s, now.Add(23*time.Hour), req))
	auto := req
	auto.Auto = true
	require.Equal(t, domain.CodeRolledBackRecently, refusal(t, s, now.Add(23*time.Hour), auto))
	forced := req
	forced.Force = true
	_, err := s.Decide(withLease(forced, now.Add(time.Hour)), domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: now.Add(time.Hour)})
	require.NoError(t, err, "force installs it anyway")
	_, err = s.Decide(withLease(auto, now.Add(8*time.Minute+24*time.Hour)), domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: now.Add(8*time.Minute + 24*time.Hour)})
	require.NoError(t, err, "after 24 h it is installed again")
}

func TestRolloutOnTheOrganisationStream(t *testing.T) {
	t.Parallel()
	o := domain.NewOrganisation()
	m := meta(alice, "c")
	d, err := o.Decide(domain.CreateOrganisation{OrgID: orgID, Name: "acme", Owner: alice}, m)
	require.NoError(t, err)
	for _, e := range d.Events {
		o.Apply(e)
	}
	_, err = o.Decide(domain.StartRollout{RolloutID: roll1, Version: "1.5.0"}, m)
	r, ok := domain.AsUpgradeRefusal(err)
	require.True(t, ok)
	require.Equal(t, domain.CodeNothingToUpgrade, r.Code)
	servers := []domain.RolloutServer{{ServerID: serverID, ClusterID: clusterID, Name: "a"}, {ServerID: upg1, ClusterID: clusterID, Name: "b"}, {ServerID: upg2, ClusterID: clusterID, Name: "c"}}
	d, err = o.Decide(domain.StartRollout{RolloutID: roll1, Version: "1.5.0", Servers: servers}, m)
	require.NoError(t, err)
	require.Equal(t, "server.agent.upgrade.rollout", domain.Audit(d.Events[0]).Action)
	o.Apply(d.Events[0])
	_, err = o.Decide(domain.StartRollout{RolloutID: upg1, Version: "1.5.0", Servers: servers}, m)
	r, _ = domain.AsUpgradeRefusal(err)
	require.Equal(t, domain.CodeUpgradeInProgress, r.Code)
	d, err = o.Decide(domain.HaltRollout{RolloutID: roll1, ServerID: upg1, Reason: "hash mismatch"}, m)
	require.NoError(t, err)
	h := d.Events[0].(domain.AgentRolloutHalted)
	require.Equal(t, 1, h.Untouched)
	require.Equal(t, "server.agent.upgrade.halted", domain.Audit(h).Action)
	o.Apply(h)
	require.Nil(t, o.Rollouts.Active)
	d, err = o.Decide(domain.HaltRollout{RolloutID: roll1, ServerID: upg1}, m)
	require.NoError(t, err)
	require.Empty(t, d.Events, "a halted rollout halts once")
}

// A disconnect recorded after the server connected again (an agent that
// restarted) is not the newer connection's end.
func TestALateDisconnectOfAnEarlierConnectionChangesNothing(t *testing.T) {
	t.Parallel()
	s := domain.NewServerLink()
	decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.4.0", Session: "one"})
	decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.5.0", Session: "two"})
	require.Empty(t, decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Session: "one"}))
	require.True(t, s.Connected)
	require.Len(t, decideServer(t, s, now, domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Session: "two"}), 1)
	require.False(t, s.Connected)
}

// An agent whose clock runs ahead of the control plane's (or that sends no
// time) reports the same rollback at every connect: it is learned once, not
// audited again and its 24 h hold not moved at each reconnect.
func TestARollbackFromAnAgentWithAnotherClockIsLearnedOnce(t *testing.T) {
	t.Parallel()
	for name, at := range map[string]time.Time{"ahead": now.Add(time.Hour), "no time": {}} {
		s := connected(t, "1.4.0", yes())
		facts := &domain.UpgradeFacts{From: "1.4.0", To: "1.5.0", State: domain.UpgradeRolledBack, Reason: "crash loop", At: at}
		connect := domain.RecordConnection{ClusterID: clusterID, ServerID: serverID, Connected: true, Version: "1.4.0", Arch: "amd64", Upgradable: yes(), AgentUpgrade: facts}
		ev := decideServer(t, s, now.Add(time.Minute), connect)
		require.Len(t, ev, 2, name)
		f := ev[1].(domain.AgentUpgradeFailed)
		require.Equal(t, now.Add(time.Minute), f.At, "%s: a time ahead of the control plane's is not recorded", name)
		require.Len(t, decideServer(t, s, now.Add(2*time.Minute), connect), 1, "%s: learned once", name)
		require.Equal(t, now.Add(time.Minute), s.RolledBack.At, "%s: the hold is not moved", name)
	}
}
