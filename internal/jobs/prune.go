package jobs

import (
	"context"

	"github.com/nebulactrl/nebulactrl/eventstore"
)

// PruneRuns deletes the record of job runs older than 7 days.
func PruneRuns(ctx context.Context, q eventstore.Querier) error {
	_, err := q.Exec(ctx, `DELETE FROM job_runs WHERE ran_at < now() - interval '7 days'`)
	return err
}
