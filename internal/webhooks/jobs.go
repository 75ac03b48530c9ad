package webhooks

import (
	"context"
	"errors"
	"time"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/jobs"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/webhooks/hookstore"
)

// Jobs are the webhooks' leader jobs: the cluster links (every 5 s, or
// every when it is above zero) and pruning deliveries after 30 days.
func (w *Webhooks) Jobs(every time.Duration) []jobs.Job {
	links, prune := 5*time.Second, time.Hour
	if every > 0 {
		links, prune = every, every
	}
	return []jobs.Job{
		{Name: "webhook-cluster-links", Interval: links, Run: func(ctx context.Context) error { return w.ObserveClusters(ctx) }},
		{Name: "prune-webhook-deliveries", Interval: prune, Run: func(ctx context.Context) error {
			_, err := hookstore.Prune(ctx, w.pool, w.cfg.Now().Add(-Keep))
			return err
		}},
	}
}

// ObserveClusters reads the agents' leases of every watched cluster at the
// injected clock and records each cluster that gained its first live agent
// or lost its last one (the domain decides: the same state again records
// nothing).
func (w *Webhooks) ObserveClusters(ctx context.Context) error {
	clusters, err := hookstore.WatchedClusters(ctx, w.pool)
	if err != nil {
		return err
	}
	now := w.cfg.Now()
	var errs []error
	for _, c := range clusters {
		st, err := query.StatusOfCluster(ctx, w.pool, c.ClusterID, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, err = w.cfg.Commands.ClusterLink(ctx, dispatch.Context{Actor: domain.System("cluster-links")},
			domain.ObserveClusterLink{ClusterID: c.ClusterID, OrgID: c.OrgID, LiveAgents: st.ConnectedAgents})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
