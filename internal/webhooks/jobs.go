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
// injected clock, in one statement, and records each cluster that gained
// its first live agent or lost its last one (the domain decides: the same
// state again records nothing). A command is sent only for a cluster whose
// state differs from what was last recorded of it: with 10,000 clusters a
// command each, every 5 seconds, was most of the database's work.
func (w *Webhooks) ObserveClusters(ctx context.Context) error {
	clusters, err := hookstore.WatchedClusters(ctx, w.pool)
	if err != nil || len(clusters) == 0 {
		return err
	}
	ids := make([]string, len(clusters))
	for i, c := range clusters {
		ids[i] = c.ClusterID
	}
	now := w.cfg.Now()
	status, err := query.StatusOfClusters(ctx, w.pool, ids, now)
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range clusters {
		live := status[c.ClusterID].ConnectedAgents
		if c.Observed != nil && *c.Observed == (live > 0) {
			continue
		}
		_, err = w.cfg.Commands.ClusterLink(ctx, dispatch.Context{Actor: domain.System("cluster-links")},
			domain.ObserveClusterLink{ClusterID: c.ClusterID, OrgID: c.OrgID, LiveAgents: live})
		if err == nil {
			// The stream now says what was observed (recorded, or so already).
			err = hookstore.SetObserved(ctx, w.pool, c.ClusterID, live > 0)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
