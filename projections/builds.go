package projections

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
)

// builds projects the read models of builds from Git: each build and where
// it is, the webhook deliveries of each project with their outcome, the
// branch each Git service tracks per environment, and each project's webhook
// secrets (sealed).
type builds struct {
	builds, deliveries, tracking, webhooks *table
}

func newBuilds() *builds {
	return &builds{
		builds: newTable("builds", 1, "id uuid", "org_id uuid", "project_id uuid", "service_id uuid", "cluster_id uuid", "repository text",
			"branch text", "commit text", "dockerfile text", "context text", "environments jsonb", "automatic boolean", "trigger text",
			"delivery_id text", "attempt integer", "timeout_seconds integer", "status text", "image text", "digest text", "exit_code integer",
			"reason text", "log_tail jsonb", "cancelled_by uuid", "queued_at timestamptz", "started_at timestamptz", "finished_at timestamptz"),
		deliveries: newTable("webhook_deliveries", 1, "id uuid", "org_id uuid", "project_id uuid", "provider text", "forge_id text", "event text",
			"repository text", "ref text", "branch text", "commit text", "outcome text", "reason text", "builds jsonb", "received_at timestamptz"),
		tracking: newTable("service_tracking", 2, "environment_id uuid", "service_id uuid", "org_id uuid", "project_id uuid", "branch text", "untracked boolean"),
		webhooks: newTable("project_webhooks", 1, "project_id uuid", "org_id uuid", "secret jsonb", "previous jsonb", "previous_until timestamptz", "rotated_at timestamptz"),
	}
}

func (b *builds) Name() string { return "builds" }

func (b *builds) all() []*table { return []*table{b.builds, b.deliveries, b.tracking, b.webhooks} }

func (b *builds) Tables() []string { return tableNames(b.all()) }

func (b *builds) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		b.apply(e)
	}
	return flush(ctx, tx, b.all()...)
}

func (b *builds) apply(e Decoded) {
	at := e.OccurredAt
	_, streamID := domain.StreamID(e.StreamID)
	org := nullable(e.OrgID)
	switch d := e.Data.(type) {
	case domain.BuildQueuedEvent:
		b.builds.upsert(d.BuildID, org, d.ProjectID, d.ServiceID, d.ClusterID, d.Repository, d.Branch, d.Commit, d.Dockerfile, d.Context,
			mustJSON(d.Environments), d.Automatic, d.Trigger, d.DeliveryID, d.Attempt, d.TimeoutSeconds, string(domain.BuildQueued),
			"", "", 0, "", "[]", nil, at, nil, nil)
	case domain.BuildTargetsAdded:
		b.builds.update([]any{d.BuildID}, map[string]any{"environments": mustJSON(d.Environments), "automatic": d.Automatic})
	case domain.BuildStarted:
		b.builds.update([]any{d.BuildID}, map[string]any{"status": string(domain.BuildRunning), "started_at": d.At})
	case domain.BuildCommitResolved:
		b.builds.update([]any{d.BuildID}, map[string]any{"commit": d.Commit})
	case domain.BuildSucceededEvent:
		set := map[string]any{"status": string(domain.BuildSucceeded), "image": d.Image, "digest": d.Digest, "finished_at": at}
		if d.Commit != "" {
			set["commit"] = d.Commit
		}
		b.builds.update([]any{d.BuildID}, set)
	case domain.BuildFailedEvent:
		tail := d.LogTail
		if tail == nil {
			tail = []string{}
		}
		b.builds.update([]any{d.BuildID}, map[string]any{"status": string(domain.BuildFailed), "exit_code": d.ExitCode, "reason": d.Reason,
			"log_tail": mustJSON(tail), "finished_at": at})
	case domain.BuildCancelledEvent:
		b.builds.update([]any{d.BuildID}, map[string]any{"status": string(domain.BuildCancelled), "reason": d.Reason,
			"cancelled_by": nullable(d.By), "finished_at": at})
	case domain.BuildTimedOutEvent:
		b.builds.update([]any{d.BuildID}, map[string]any{"status": string(domain.BuildTimedOut),
			"reason": "the build did not finish within its timeout", "finished_at": at})
	case domain.WebhookDeliveryRecorded:
		b.deliveries.upsert(d.DeliveryID, org, d.ProjectID, d.Provider, d.ForgeID, d.Event, d.Repository, d.Ref, d.Branch, d.Commit,
			d.Outcome, d.Reason, mustJSON(d.Builds), at)
	case domain.BranchTracked:
		b.tracking.upsert(d.EnvironmentID, d.ServiceID, org, streamID, d.Branch, d.None)
	case domain.WebhookSecretRotated:
		var prev any
		if d.Previous != nil {
			prev = mustJSON(d.Previous)
		}
		b.webhooks.upsert(d.ProjectID, org, mustJSON(d.Secret), prev, timePtr(d.PreviousUntil), at)
	}
}
