package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/version"
)

// The one rule of liveness at its boundary: a heartbeat 59 s ago keeps a
// server live, one 60 s or 61 s ago does not; a released lease (a clean
// disconnect) and a server that never connected are not live whatever the
// time.
func TestLivenessAtTheBoundary(t *testing.T) {
	t.Parallel()
	beat := now
	lease := heartbeatAt(beat)
	require.Equal(t, 60*time.Second, domain.LivenessWindow, "the spec's 60 s")
	require.True(t, lease.Live(beat), "at the heartbeat")
	require.True(t, lease.Live(beat.Add(59*time.Second)), "59 s after")
	require.False(t, lease.Live(beat.Add(60*time.Second)), "60 s after: no heartbeat for 60 s")
	require.False(t, lease.Live(beat.Add(61*time.Second)), "61 s after")
	require.True(t, lease.Live(beat.Add(-5*time.Second)), "a heartbeat stamped by a clock a little ahead")
	require.False(t, domain.Lease{Held: false, RenewedAt: &beat}.Live(beat), "released by a clean disconnect")
	require.False(t, domain.Lease{Held: true}.Live(beat), "never renewed")
	require.False(t, domain.Lease{}.Live(beat), "the zero lease")

	old := beat.Add(-61 * time.Second)
	leases := []domain.Lease{lease, heartbeatAt(old), {RenewedAt: &beat}}
	require.Equal(t, 1, domain.LiveCount(leases, beat.Add(59*time.Second)))
	require.Equal(t, 0, domain.LiveCount(leases, beat.Add(61*time.Second)))
}

// An upgrade of an agent whose stream says connected (its control-plane
// replica died without recording a disconnect) is refused server_offline
// once its lease expired, and decides nothing; 59 s after its heartbeat it
// is accepted.
func TestUpgradeNeedsALiveLease(t *testing.T) {
	t.Parallel()
	s := connected(t, "1.4.0", yes())
	require.True(t, s.Connected, "no disconnect was recorded")
	beat := now
	req := domain.RequestUpgrade{Versions: version.Compare, UpgradeID: upg1, To: "1.5.0", Binaries: bins, Lease: heartbeatAt(beat)}
	m := func(at time.Time) domain.Meta {
		return domain.Meta{Actor: domain.System("test"), CommandID: "c", Now: at}
	}

	for _, c := range []struct {
		name  string
		lease domain.Lease
		at    time.Time
	}{
		{"61 s without a heartbeat", heartbeatAt(beat), beat.Add(61 * time.Second)},
		{"60 s without a heartbeat", heartbeatAt(beat), beat.Add(60 * time.Second)},
		{"released", domain.Lease{RenewedAt: &beat}, beat},
		{"no lease given", domain.Lease{}, beat},
	} {
		r := req
		r.Lease = c.lease
		d, err := s.Decide(r, m(c.at))
		require.Error(t, err, c.name)
		ref, ok := domain.AsUpgradeRefusal(err)
		require.True(t, ok, c.name)
		require.Equal(t, domain.CodeServerOffline, ref.Code, c.name)
		require.ErrorIs(t, err, domain.ErrConflict, c.name)
		require.Empty(t, d.Events, c.name)
	}
	_, err := s.Decide(req, m(beat.Add(61*time.Second)))
	ref, _ := domain.AsUpgradeRefusal(err)
	require.Contains(t, ref.Message, "no heartbeat since "+beat.Format(time.RFC3339))

	d, err := s.Decide(req, m(beat.Add(59*time.Second)))
	require.NoError(t, err)
	require.Len(t, d.Events, 1)
	require.IsType(t, domain.AgentUpgradeRequested{}, d.Events[0])
}
