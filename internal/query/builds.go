package query

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

const buildSelect = `SELECT b.id::text, b.project_id::text, b.service_id::text, coalesce(s.name, ''), coalesce(p.name, ''), b.cluster_id::text, coalesce(c.name, ''),
	b.repository, b.branch, b.commit, b.dockerfile, b.context, b.environments, b.automatic, b.trigger, b.delivery_id, b.attempt,
	b.timeout_seconds, b.status, b.image, b.digest, b.exit_code, b.reason, b.log_tail, coalesce(b.cancelled_by::text, ''),
	b.queued_at, b.started_at, b.finished_at
	FROM builds b LEFT JOIN services s ON s.id = b.service_id LEFT JOIN clusters c ON c.id = b.cluster_id
	LEFT JOIN projects p ON p.id = b.project_id`

func scanBuild(row pgx.Row) (api.Build, error) {
	var b api.Build
	err := row.Scan(&b.ID, &b.ProjectID, &b.ServiceID, &b.Service, &b.Project, &b.ClusterID, &b.Cluster, &b.Repository, &b.Branch, &b.Commit,
		&b.Dockerfile, &b.Context, &b.Environments, &b.Automatic, &b.Trigger, &b.DeliveryID, &b.Attempt, &b.TimeoutSeconds, &b.Status,
		&b.Image, &b.Digest, &b.ExitCode, &b.Reason, &b.LogTail, &b.CancelledBy, &b.QueuedAt, &b.StartedAt, &b.FinishedAt)
	if b.Environments == nil {
		b.Environments = []string{}
	}
	if b.LogTail == nil {
		b.LogTail = []string{}
	}
	return b, err
}

// BuildByID reads a build of an organisation.
func BuildByID(ctx context.Context, q eventstore.Querier, orgID, id string) (api.Build, error) {
	if !validID(id) || !validID(orgID) {
		return api.Build{}, notFound("build %s", id)
	}
	return one(ctx, q, "build "+id, scanBuild, buildSelect+` WHERE b.id = $1 AND b.org_id = $2`, id, orgID)
}

// BuildsAfter lists a project's builds (of one service when serviceID is
// not ""), newest first, a page of limit after the build with id after.
func BuildsAfter(ctx context.Context, q eventstore.Querier, projectID, serviceID, after string, limit int) ([]api.Build, error) {
	if !validID(projectID) {
		return []api.Build{}, nil
	}
	where := ` WHERE b.project_id = $1 AND ($2 = '' OR b.service_id::text = $2)`
	if after != "" {
		where += ` AND (b.queued_at, b.id) < (SELECT queued_at, id FROM builds WHERE id = $3::uuid)`
	} else {
		where += ` AND $3 = ''`
	}
	return list(ctx, q, "builds of project "+projectID, scanBuild,
		buildSelect+where+` ORDER BY b.queued_at DESC, b.id DESC LIMIT $4`, projectID, serviceID, after, limit)
}

// RunningBuilds lists the builds running now on every cluster, oldest
// first (few: at most a handful per cluster).
func RunningBuilds(ctx context.Context, q eventstore.Querier) ([]api.Build, error) {
	return list(ctx, q, "running builds", scanBuild,
		buildSelect+` WHERE b.status = 'running' ORDER BY b.started_at, b.id`)
}

// ServiceSourceByID reads a service's source, with its sealed credential.
func ServiceSourceByID(ctx context.Context, q eventstore.Querier, serviceID string) (domain.Source, error) {
	var src domain.Source
	err := q.QueryRow(ctx, `SELECT source FROM services WHERE id = $1`, serviceID).Scan(&src)
	if err == pgx.ErrNoRows {
		return domain.Source{}, notFound("service %s", serviceID)
	}
	return src, err
}

// SucceededBuild finds the succeeded build of a service's commit on a cluster.
func SucceededBuild(ctx context.Context, q eventstore.Querier, serviceID, commit, clusterID string) (api.Build, error) {
	id := domain.BuildID(serviceID, commit, clusterID)
	return one(ctx, q, "build "+id, scanBuild, buildSelect+` WHERE b.id = $1 AND b.status = 'succeeded'`, id)
}

func scanDelivery(row pgx.Row) (api.Delivery, error) {
	var d api.Delivery
	err := row.Scan(&d.ID, &d.Provider, &d.ForgeID, &d.Event, &d.Repository, &d.Ref, &d.Branch, &d.Commit, &d.Outcome, &d.Reason, &d.Builds, &d.ReceivedAt)
	if d.Builds == nil {
		d.Builds = []api.DeliveryBuild{}
	}
	return d, err
}

// DeliveriesAfter lists a project's deliveries, newest first.
func DeliveriesAfter(ctx context.Context, q eventstore.Querier, projectID, after string, limit int) ([]api.Delivery, error) {
	where := ` WHERE project_id = $1`
	if after != "" {
		where += ` AND (received_at, id) < (SELECT received_at, id FROM webhook_deliveries WHERE id = $2::uuid)`
	} else {
		where += ` AND $2 = ''`
	}
	return list(ctx, q, "deliveries of project "+projectID, scanDelivery,
		`SELECT id::text, provider, forge_id, event, repository, ref, branch, commit, outcome, reason, builds, received_at
		FROM webhook_deliveries`+where+` ORDER BY received_at DESC, id DESC LIMIT $3`, projectID, after, limit)
}

// LastPushedCommit is the head of a branch as the project's last push of
// it said ("" when no push of it was received).
func LastPushedCommit(ctx context.Context, q eventstore.Querier, projectID, branch string) (string, error) {
	var c string
	err := q.QueryRow(ctx, `SELECT commit FROM webhook_deliveries WHERE project_id = $1 AND branch = $2 AND event = 'push' AND commit <> ''
		AND commit !~ '^0+$' ORDER BY received_at DESC, id DESC LIMIT 1`, projectID, branch).Scan(&c)
	if err == pgx.ErrNoRows {
		return "", nil
	}
	return c, err
}

// Webhook is a project's push webhook: its secrets, sealed.
type Webhook struct {
	ProjectID     string
	OrgID         string
	Secret        domain.SealedValue
	Previous      *domain.SealedValue
	PreviousUntil *time.Time
	RotatedAt     time.Time
}

// ProjectWebhook reads a live project's webhook; ErrNotFound when the
// project has no secret yet (or does not exist).
func ProjectWebhook(ctx context.Context, q eventstore.Querier, projectID string) (Webhook, error) {
	if !validID(projectID) {
		return Webhook{}, notFound("webhook of project %s", projectID)
	}
	return one(ctx, q, "webhook of project "+projectID, func(row pgx.Row) (Webhook, error) {
		var w Webhook
		var secret, prev []byte
		if err := row.Scan(&w.ProjectID, &w.OrgID, &secret, &prev, &w.PreviousUntil, &w.RotatedAt); err != nil {
			return w, err
		}
		if err := json.Unmarshal(secret, &w.Secret); err != nil {
			return w, err
		}
		if prev != nil {
			w.Previous = &domain.SealedValue{}
			if err := json.Unmarshal(prev, w.Previous); err != nil {
				return w, err
			}
		}
		return w, nil
	}, `SELECT w.project_id::text, w.org_id::text, w.secret, w.previous, w.previous_until, w.rotated_at FROM project_webhooks w
		JOIN projects p ON p.id = w.project_id WHERE w.project_id = $1 AND p.deleted_at IS NULL`, projectID)
}

// ProjectTracking lists the tracked branches set in a project.
func ProjectTracking(ctx context.Context, q eventstore.Querier, projectID string) ([]api.Tracking, error) {
	return list(ctx, q, "tracked branches of project "+projectID, func(row pgx.Row) (api.Tracking, error) {
		var t api.Tracking
		return t, row.Scan(&t.EnvironmentID, &t.ServiceID, &t.Branch, &t.Untracked)
	}, `SELECT environment_id::text, service_id::text, branch, untracked FROM service_tracking WHERE project_id = $1`, projectID)
}

// TrackedBranch is the branch a service follows in an environment ("" for
// none), given the service's default branch.
func TrackedBranch(ts []api.Tracking, envID string, s api.Service) string {
	if s.Source.GitURL == "" {
		return ""
	}
	for _, t := range ts {
		if t.EnvironmentID == envID && t.ServiceID == s.ID {
			if t.Untracked {
				return ""
			}
			return t.Branch
		}
	}
	return s.Source.GitBranch
}

// ProjectOfWebhook finds the live project a webhook URL names, with its
// organisation.
func ProjectOfWebhook(ctx context.Context, q eventstore.Querier, projectID string) (api.Project, error) {
	if !validID(projectID) {
		return api.Project{}, notFound("project %s", projectID)
	}
	return one(ctx, q, "project "+projectID, scanProject, `SELECT `+projectColumns+` FROM projects WHERE id = $1 AND deleted_at IS NULL`, projectID)
}
