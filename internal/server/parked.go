package server

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
)

// Parked events (see eventstore.ParkPolicy and docs/operations.md) do not
// make a replica unready: every replica would be unready alike, and the load
// balancer would take the whole control plane away from every organisation,
// which is what parking exists to avoid. They are loud instead: logged at
// ERROR when parked, exported by /metrics, listed by /readyz, and audit
// verify and audit replay fail while any is parked.

// maxReadyzParked bounds the parked events /readyz lists.
const maxReadyzParked = 20

// writeParked lists the parked events in the /readyz body.
func writeParked(ctx context.Context, pool *pgxpool.Pool, w io.Writer) {
	parked, err := eventstore.ListParked(ctx, pool, "")
	if err != nil {
		fmt.Fprintf(w, "cannot list the parked events: %v\n", err)
		return
	}
	if len(parked) == 0 {
		return
	}
	fmt.Fprintf(w, "PARKED %d events (not handled; nebula audit parked, nebula audit retry):\n", len(parked))
	for i, p := range parked {
		if i == maxReadyzParked {
			fmt.Fprintf(w, "  ... and %d more\n", len(parked)-i)
			break
		}
		fmt.Fprintf(w, "  %s position %d (%s on %s, %s at %s): %s\n", p.Subscription, p.Position, p.Type, p.StreamID, p.Reason,
			p.ParkedAt.UTC().Format("2006-01-02T15:04:05Z"), p.Error)
	}
}

// parkedCollector exports how many events each subscription has parked.
type parkedCollector struct{ pool *pgxpool.Pool }

var parkedDesc = prometheus.NewDesc("nebulactrl_subscription_parked_events",
	"Events a subscription set aside because it could not handle them, not retried yet (nebula audit parked).", []string{"subscription"}, nil)

func (parkedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- parkedDesc }

func (c parkedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	counts, err := eventstore.CountParked(ctx, c.pool)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(parkedDesc, err)
		return
	}
	for _, sub := range subscriptions {
		ch <- prometheus.MustNewConstMetric(parkedDesc, prometheus.GaugeValue, float64(counts[sub]), sub)
	}
}

// retryParked retries parked events with the subscriptions' own handlers.
func retryParked(store *eventstore.Store, subs ...eventstore.Subscription) httpapi.RetryParkedFunc {
	return func(ctx context.Context, name string, position int64) ([]eventstore.Retried, error) {
		return store.RetryParkedIn(ctx, subs, name, position)
	}
}
