package projections

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// ReleaseConfig is the configuration a release froze, as the releases table
// keeps it; its variables are rows of release_variables (see ReleaseVariables).
type ReleaseConfig struct {
	Processes []domain.Process `json:"processes"`
}

// releaseVariablesTable keeps the variables of every release as versioned
// rows: a row is valid from release from_number until to_number (exclusive;
// NULL while the service's latest release has it). A release records what
// changed against the one before, so its rows are that change.
const releaseVariablesTable = "release_variables"

// history projects the release history: releases, deployments, the current
// release of each service in each environment, and change sets.
type history struct {
	releases, deployments, stages, current, pauses, changesets *table
	// variables keeps the variables of every release as versioned rows.
	variables *versioned
}

func newHistory() *history {
	return &history{
		releases: newInsertOnlyTable("releases", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "service_id uuid",
			"number integer", "image text", "config jsonb", "reason text", "created_at timestamptz", "created_by text"),
		deployments: newInsertOnlyTable("deployments", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "service_id uuid",
			"release_id uuid", "status text", "reason text", "requested_at timestamptz", "updated_at timestamptz", "requested_by text",
			"seq bigint", "rollback boolean", "revision integer", "ready integer", "desired integer", "detail text",
			"superseded_by uuid", "stalled_since timestamptz", "finished_at timestamptz"),
		stages: newInsertOnlyTable("deployment_stages", 2, "deployment_id uuid", "seq integer", "org_id uuid", "stage text",
			"ready integer", "desired integer", "detail text", "at timestamptz", "actor text"),
		current: newTable("current_releases", 2, "environment_id uuid", "service_id uuid", "org_id uuid", "release_id uuid", "deployment_id uuid"),
		pauses: newTable("deploy_pauses", 2, "environment_id uuid", "service_id uuid", "org_id uuid", "paused_at timestamptz", "paused_by text", "reason text",
			"waiting_image text", "waiting_build text"),
		changesets: newTable("changesets", 1, "id uuid", "org_id uuid", "project_id uuid", "environment_id uuid", "status text",
			"description text", "changes jsonb", "opened_by text", "opened_at timestamptz", "decided_by text", "decided_at timestamptz", "version integer"),
		variables: newVersioned(releaseVariablesTable, []string{"environment_id uuid", "service_id uuid"}, "name",
			[]string{"org_id uuid", "value text", "secret jsonb"}),
	}
}

func (h *history) Name() string { return "release-history" }

func (h *history) all() []*table {
	return []*table{h.releases, h.deployments, h.stages, h.current, h.pauses, h.changesets}
}

func (h *history) Tables() []string { return append(tableNames(h.all()), h.variables.name) }

func actorLabel(a domain.Actor) string { return string(a.Kind) + ":" + a.Name }

func (h *history) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		at := e.OccurredAt
		_, streamID := domain.StreamID(e.StreamID)
		org := nullable(e.OrgID)
		stage := func(deploymentID string, s domain.DeploymentStatus, ready, desired int, detail string) {
			h.stages.upsert(deploymentID, e.StreamVersion, org, string(s), ready, desired, detail, at, actorLabel(e.Actor))
		}
		switch d := e.Data.(type) {
		case domain.ReleaseCreated:
			cfg := mustJSON(ReleaseConfig{Processes: d.Processes})
			h.releases.upsert(d.ReleaseID, org, streamID, d.EnvironmentID, d.ServiceID, d.Number, d.Image, cfg, d.Reason, at, actorLabel(e.Actor))
			h.releaseVariables(org, d)
		case domain.DeploymentRequested:
			h.deployments.upsert(d.DeploymentID, org, streamID, d.EnvironmentID, d.ServiceID, d.ReleaseID, string(domain.StatusRequested), "",
				at, at, actorLabel(e.Actor), e.Position, d.Rollback, 0, 0, 0, "", nil, nil, nil)
			h.current.upsert(d.EnvironmentID, d.ServiceID, org, d.ReleaseID, d.DeploymentID)
			// A deployment replaces the automatic deploy that waited.
			h.pauses.update([]any{d.EnvironmentID, d.ServiceID}, map[string]any{"waiting_image": "", "waiting_build": ""})
		case domain.DeployWaiting:
			h.pauses.update([]any{d.EnvironmentID, d.ServiceID}, map[string]any{"waiting_image": d.Image, "waiting_build": d.BuildID})
		case domain.DeploymentDelivering:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusDelivering), "revision": d.Revision, "updated_at": at})
			stage(d.DeploymentID, domain.StatusDelivering, 0, 0, "")
		case domain.DeploymentStageReached:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(d.Stage), "ready": d.Ready, "desired": d.Desired,
				"detail": d.Detail, "updated_at": at})
			stage(d.DeploymentID, d.Stage, d.Ready, d.Desired, d.Detail)
		case domain.DeploymentSucceeded:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusSucceeded), "detail": "",
				"stalled_since": nil, "updated_at": at, "finished_at": at})
			stage(d.DeploymentID, domain.StatusSucceeded, 0, 0, "")
		case domain.DeploymentFailed:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusFailed), "reason": d.Reason,
				"stalled_since": nil, "updated_at": at, "finished_at": at})
			stage(d.DeploymentID, domain.StatusFailed, 0, 0, d.Reason)
			// The release that ran before the failed one runs again: the
			// compiler reads current_releases, so it must say so now.
			if err := flush(ctx, tx, h.all()...); err != nil {
				return err
			}
			if err := revertCurrent(ctx, tx, d.DeploymentID); err != nil {
				return err
			}
		case domain.DeploymentSuperseded:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"status": string(domain.StatusSuperseded), "superseded_by": d.By,
				"stalled_since": nil, "updated_at": at, "finished_at": at})
			stage(d.DeploymentID, domain.StatusSuperseded, 0, 0, "")
		case domain.DeploymentStalled:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"stalled_since": d.Since})
		case domain.DeploymentStallCleared:
			h.deployments.update([]any{d.DeploymentID}, map[string]any{"stalled_since": nil})
		case domain.DeploymentsPaused:
			h.pauses.upsert(d.EnvironmentID, d.ServiceID, org, at, actorLabel(e.Actor), d.Reason, "", "")
		case domain.DeploymentsResumed:
			h.pauses.delete(d.EnvironmentID, d.ServiceID)
		case domain.ChangeSetOpened:
			// The row keeps the view of the changes (a []domain.Change, as
			// the API serves it), whatever schema the event carries them in.
			h.changesets.upsert(d.ChangeSetID, org, streamID, d.EnvironmentID, "open", d.Description, mustJSON(d.Changes.View()), d.OpenedBy, at, "", nil, 1)
		case domain.ChangeSetChanged:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"changes": mustJSON(d.Changes.View()), "description": d.Description, "version": d.Version})
		case domain.ChangeSetApproved:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"status": "approved", "decided_by": d.ApprovedBy, "decided_at": at})
		case domain.ChangeSetRejected:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"status": "rejected", "decided_by": d.RejectedBy, "decided_at": at})
		case domain.ChangeSetExpired:
			h.changesets.update([]any{d.ChangeSetID}, map[string]any{"status": "expired", "decided_by": "", "decided_at": at})
		}
	}
	if err := h.variables.flush(ctx, tx); err != nil {
		return err
	}
	return flush(ctx, tx, h.all()...)
}

// releaseVariables records a release's variables: the rows of the names it
// sets or removes (all, for a whole set) are closed at its number, and its
// new or changed variables get rows from its number on.
func (h *history) releaseVariables(org any, d domain.ReleaseCreated) {
	scope := []any{d.EnvironmentID, d.ServiceID}
	if d.Base == 0 {
		h.variables.closeScope(scope, d.Number)
	} else {
		names := make([]string, 0, len(d.Variables)+len(d.Removed))
		for _, v := range d.Variables {
			names = append(names, v.Name)
		}
		h.variables.closeKeys(scope, append(names, d.Removed...), d.Number)
	}
	for _, v := range d.Variables {
		var secret any
		if v.Secret != nil {
			secret = mustJSON(v.Secret)
		}
		h.variables.add(scope, v.Name, d.Number, org, v.Value, secret)
	}
}

// ReleaseVariables returns the whole variable set of release number of a
// service in an environment, from the rows valid at that number.
func ReleaseVariables(ctx context.Context, q eventstore.Querier, envID, serviceID string, number int) ([]domain.Variable, error) {
	rows, err := q.Query(ctx, `SELECT name, value, secret FROM release_variables
		WHERE environment_id = $1 AND service_id = $2 AND coalesce(to_number, 2147483647) > $3 AND from_number <= $3
		ORDER BY name`, envID, serviceID, number)
	if err != nil {
		return nil, fmt.Errorf("reading the variables of release %d: %w", number, err)
	}
	defer rows.Close()
	var out []domain.Variable
	for rows.Next() {
		var v domain.Variable
		var secret []byte
		if err := rows.Scan(&v.Name, &v.Value, &secret); err != nil {
			return nil, err
		}
		if secret != nil {
			v.Secret = &domain.SealedValue{}
			if err := json.Unmarshal(secret, v.Secret); err != nil {
				return nil, fmt.Errorf("variable %s of release %d: %w", v.Name, number, err)
			}
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// revertCurrent makes the latest succeeded deployment of the failed
// deployment's service and environment current again, or none when nothing
// ever succeeded there (the agent then removes the failed release).
func revertCurrent(ctx context.Context, tx pgx.Tx, failed string) error {
	_, err := tx.Exec(ctx, `WITH f AS (SELECT environment_id, service_id FROM current_releases WHERE deployment_id = $1),
		p AS (SELECT d.id, d.release_id FROM deployments d JOIN f USING (environment_id, service_id)
			WHERE d.status = 'succeeded' ORDER BY d.seq DESC, d.id LIMIT 1),
		u AS (UPDATE current_releases c SET release_id = p.release_id, deployment_id = p.id FROM p WHERE c.deployment_id = $1 RETURNING 1)
		DELETE FROM current_releases WHERE deployment_id = $1 AND NOT EXISTS (SELECT 1 FROM u)`, failed)
	if err != nil {
		return fmt.Errorf("reverting to the release before deployment %s: %w", failed, err)
	}
	return nil
}

// revisions projects revision.compiled events: the revisions table (number,
// hash, when) and the objects of each revision's document as versioned rows
// (revision_objects, valid from revision from_number until to_number,
// exclusive), so a revision adds rows for what changed only and any revision
// can be rebuilt (DocumentAt).
type revisions struct {
	t       *table
	objects *versioned
}

func newRevisions() *revisions {
	return &revisions{
		t:       newInsertOnlyTable("revisions", 2, "environment_id uuid", "number integer", "org_id uuid", "hash text", "compiled_at timestamptz"),
		objects: newVersioned("revision_objects", []string{"environment_id uuid"}, "key", []string{"org_id uuid", "value jsonb"}),
	}
}

func (r *revisions) Name() string     { return "revisions" }
func (r *revisions) Tables() []string { return []string{r.t.name, r.objects.name} }

func (r *revisions) Project(ctx context.Context, tx pgx.Tx, batch []Decoded) error {
	for _, e := range batch {
		if d, ok := e.Data.(domain.RevisionCompiled); ok {
			r.t.upsert(d.EnvironmentID, d.Number, nullable(e.OrgID), d.Hash, e.OccurredAt)
			if err := r.revisionObjects(nullable(e.OrgID), d); err != nil {
				return err
			}
		}
	}
	if err := r.objects.flush(ctx, tx); err != nil {
		return err
	}
	return flush(ctx, tx, r.t)
}

// revisionObjects closes the rows of the objects a revision changes or
// removes (every row, for a whole document or Base 0) and adds rows for the
// objects it sets.
func (r *revisions) revisionObjects(org any, d domain.RevisionCompiled) error {
	scope := []any{d.EnvironmentID}
	set := d.Set
	if d.Whole() {
		objs, err := splitStored(d.Document)
		if err != nil {
			return fmt.Errorf("revision %d of %s: %w", d.Number, d.EnvironmentID, err)
		}
		set = make([]domain.RevisionObject, 0, len(objs))
		for _, k := range sortedKeys(objs) {
			set = append(set, domain.RevisionObject{Key: k, Value: objs[k]})
		}
	}
	if d.Whole() || d.Base == 0 {
		r.objects.closeScope(scope, d.Number)
	} else {
		keys := make([]string, 0, len(set)+len(d.Removed))
		for _, o := range set {
			keys = append(keys, o.Key)
		}
		r.objects.closeKeys(scope, append(keys, d.Removed...), d.Number)
	}
	for _, o := range set {
		r.objects.add(scope, o.Key, d.Number, org, string(o.Value))
	}
	return nil
}
