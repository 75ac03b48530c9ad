package server

import (
	"bytes"
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/internal/testenv/pgtest"
)

// /metrics counts each subscription's parked events (0 too, so an alert can
// compare), and /readyz lists them.
func TestParkedEventsExported(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	c := parkedCollector{pool: pool}
	require.Equal(t, map[string]float64{"projections": 0, "reactions": 0, "webhooks": 0}, gatherParked(t, c))
	var b bytes.Buffer
	writeParked(ctx, pool, &b)
	require.Empty(t, b.String())

	_, err := pool.Exec(ctx, `INSERT INTO parked_events (subscription, position, transaction_id, stream_id, stream_version, event_type, reason, error, attempts, parked_at)
		VALUES ('projections', 7, '100', 'project-1', 3, 'environment.created', 'failed', 'the read model rejects it', 5, now()),
		       ('projections', 9, '101', 'project-1', 4, 'environment.created', 'behind', 'event 7 of stream project-1 is parked', 0, now())`)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"projections": 2, "reactions": 0, "webhooks": 0}, gatherParked(t, c))
	writeParked(ctx, pool, &b)
	require.Contains(t, b.String(), "PARKED 2 events")
	require.Contains(t, b.String(), "projections position 7 (environment.created on project-1, failed")
	require.Contains(t, b.String(), "the read model rejects it")
}

func gatherParked(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		require.Equal(t, "nebulactrl_subscription_parked_events", f.GetName())
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}
