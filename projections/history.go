package projections

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
)

// ReleaseConfig is the configuration a release froze, as the releases table keeps it.
type ReleaseConfig struct {
	Processes []domain.Process  `json:"processes"`
	Variables []domain.Variable `json:"variables"`
}

// history projects the release history: releases, deployments, the current
// release of each service in each environment, and change sets.
type history struct {
	releases, deployments, current, changesets *table
}

func newHistory() *history {
	return &history{
		releases: newInsertOnlyTable("releases", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "service_id uuid",
			"number integer", "image text", "config jsonb", "reason text", "created_at timestamptz", "created_by text"),
		deployments: newInsertOnlyTable("deployments", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "service_id uuid",
			"release_id uuid", "status text", "reason text", "requested_at timestamptz", "updated_at timestamptz", "requested_by text"),
		current: newTable("current_releases", 2, "environment_id uuid", "service_id uuid", "org_id uuid", "release_id uuid", "deployment_id uuid"),
		changesets: newTable("changesets", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "status text",
			"description text", "changes jsonb", "opened_by text", "opened_at timestamptz", "decided_by text", "decided_at timestamptz"),
	}
}

func (h *history) Name() string { return "release-history" }

func (h *history) all() []*table { return []*table{h.releases, h.deployments, h.current, h.changesets} }

func (h *history) Tables() []string {
	var names []string
	for _, t := range h.all() {
		names = append(names, t.name)
	}
	return names
}

func actorLabel(a domain.Actor) string { return string(a.Kind) + ":" + a.Name }

func (h *history) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		at := e.OccurredAt
		_, projectID := domain.StreamID(e.StreamID)
		org := nullable(e.OrgID)
		switch d := e.Data.(type) {
		case domain.ReleaseCreated:
			cfg := mustJSON(ReleaseConfig{Processes: d.Processes, Variables: d.Variables})
			h.releases.upsert(d.ReleaseID, org, projectID, d.EnvironmentID, d.ServiceID, d.Number, d.Image, cfg, d.Reason, at, actorLabel(e.Actor))
		case domain.DeploymentRequested:
			h.deployments.upsert(d.DeploymentID, org, projectID, d.EnvironmentID, d.ServiceID, d.ReleaseID, string(domain.StatusRequested), "", at, at, actorLabel(e.Actor))
			h.current.upsert(d.EnvironmentID, d.ServiceID, org, d.ReleaseID, d.DeploymentID)
		case domain.DeploymentDelivering:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusDelivering), "updated_at": at})
		case domain.DeploymentSucceeded:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusSucceeded), "updated_at": at})
		case domain.DeploymentFailed:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusFailed), "reason": d.Reason, "updated_at": at})
		case domain.ChangeSetOpened:
			h.changesets.upsert(d.ChangeSetID, org, projectID, d.EnvironmentID, "open", d.Description, mustJSON(d.Changes), d.OpenedBy, at, "", nil)
		case domain.ChangeSetApproved:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"status": "approved", "decided_by": d.ApprovedBy, "decided_at": at})
		case domain.ChangeSetRejected:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"status": "rejected", "decided_by": d.RejectedBy, "decided_at": at})
		}
	}
	return flush(ctx, tx, h.all()...)
}

// revisions projects revision.compiled events into the revisions table.
type revisions struct{ t *table }

func newRevisions() *revisions {
	return &revisions{t: newInsertOnlyTable("revisions", 2, "environment_id uuid", "number integer", "org_id uuid", "hash text", "document json", "compiled_at timestamptz")}
}

func (r *revisions) Name() string     { return "revisions" }
func (r *revisions) Tables() []string { return []string{r.t.name} }

func (r *revisions) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		if d, ok := e.Data.(domain.RevisionCompiled); ok {
			r.t.upsert(d.EnvironmentID, d.Number, nullable(e.OrgID), d.Hash, string(d.Document), e.OccurredAt)
		}
	}
	return flush(ctx, tx, r.t)
}
