package query

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// The project matrix (environments × services) and an organisation's
// deployments in progress, each read in one query instead of one read per
// cell (what the console's project and overview pages show).

// MatrixCell is a service in an environment as the project matrix shows
// it: its current release, its latest deployment, whether the environment's
// latest desired-state revision holds it (and why), and whether its
// automatic deploys are paused.
type MatrixCell struct {
	EnvironmentID    string
	ServiceID        string
	CurrentRelease   *api.ReleaseRef
	LatestDeployment *api.Deployment
	Held             bool
	HeldReason       string
	DeploysPaused    *api.DeployPause
}

// ServicesAfter pages the live services of a project by name (as Services
// orders them), starting after the service with id after ("" for the
// first page; a deleted service's name still places the page).
func ServicesAfter(ctx context.Context, q eventstore.Querier, projectID, after string, limit int) ([]api.Service, error) {
	if !validID(projectID) || after != "" && !validID(after) {
		return []api.Service{}, nil
	}
	var w where
	w.add("project_id = %s AND deleted_at IS NULL", projectID)
	if after != "" {
		w.add(`name > (SELECT a.name FROM services a WHERE a.id = %s AND a.project_id = services.project_id)`, after)
	}
	lim := w.next(pageLimit(limit))
	return list(ctx, q, "services of project "+projectID, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE `+w.sql()+` ORDER BY name LIMIT `+lim, w.args...)
}

// matrixSelect reads every (environment, service) pair of the arrays $1
// and $2 in one statement: the current release (current_releases' primary
// key), the latest deployment (deployments_service, newest first, one row),
// the pause (deploy_pauses' primary key) and the service's object in the
// latest revision (the open row of revision_objects, by its primary key)
// from which only held and heldReason are taken.
const matrixSelect = `SELECT e.id::text, s.id::text,
		r.id IS NOT NULL, coalesce(r.id::text, ''), coalesce(r.number, 0), coalesce(r.image, ''),
		ld.id IS NOT NULL, coalesce(ld.id::text, ''), coalesce(ld.release_id::text, ''), coalesce(ld.number, 0), coalesce(ld.image, ''),
		coalesce(ld.status, ''), coalesce(ld.reason, ''), coalesce(ld.requested_at, 'epoch'), coalesce(ld.updated_at, 'epoch'),
		coalesce(ld.requested_by, ''), coalesce(ld.rollback, false), coalesce(ld.revision, 0), coalesce(ld.ready, 0),
		coalesce(ld.desired, 0), coalesce(ld.detail, ''), ld.stalled_since, coalesce(ld.superseded_by::text, ''), ld.finished_at,
		p.environment_id IS NOT NULL, coalesce(p.reason, ''), coalesce(p.paused_by, ''), coalesce(p.paused_at, 'epoch'),
		coalesce((o.value->>'held')::boolean, false), coalesce(o.value->>'heldReason', '')
	FROM unnest($1::uuid[]) WITH ORDINALITY AS e(id, ei)
	CROSS JOIN unnest($2::uuid[]) WITH ORDINALITY AS s(id, si)
	LEFT JOIN current_releases cr ON cr.environment_id = e.id AND cr.service_id = s.id
	LEFT JOIN releases r ON r.id = cr.release_id
	LEFT JOIN LATERAL (
		SELECT d.id, d.release_id, dr.number, dr.image, d.status, d.reason, d.requested_at, d.updated_at, d.requested_by,
			d.rollback, d.revision, d.ready, d.desired, d.detail, d.stalled_since, d.superseded_by, d.finished_at
		FROM deployments d LEFT JOIN releases dr ON dr.id = d.release_id
		WHERE d.environment_id = e.id AND d.service_id = s.id
		ORDER BY d.requested_at DESC, d.seq DESC, d.id DESC LIMIT 1) ld ON TRUE
	LEFT JOIN deploy_pauses p ON p.environment_id = e.id AND p.service_id = s.id
	LEFT JOIN revision_objects o ON o.environment_id = e.id AND o.key = 'service/' || s.id::text AND o.to_number IS NULL
	ORDER BY s.si, e.ei`

// MatrixCells reads the cells of the given environments and services, in
// one query: service by service in the order given, each with its
// environments in the order given.
func MatrixCells(ctx context.Context, q eventstore.Querier, envIDs, serviceIDs []string) ([]MatrixCell, error) {
	for _, id := range append(append([]string(nil), envIDs...), serviceIDs...) {
		if !validID(id) {
			return []MatrixCell{}, nil
		}
	}
	if len(envIDs) == 0 || len(serviceIDs) == 0 {
		return []MatrixCell{}, nil
	}
	return list(ctx, q, "project matrix", scanMatrixCell, matrixSelect, envIDs, serviceIDs)
}

func scanMatrixCell(row pgx.Row) (MatrixCell, error) {
	var (
		c                    MatrixCell
		hasRel, hasDep, hasP bool
		rel                  api.ReleaseRef
		d                    api.Deployment
		p                    api.DeployPause
	)
	err := row.Scan(&c.EnvironmentID, &c.ServiceID,
		&hasRel, &rel.ID, &rel.Number, &rel.Image,
		&hasDep, &d.ID, &d.ReleaseID, &d.ReleaseNumber, &d.Image,
		&d.Status, &d.Reason, &d.RequestedAt, &d.UpdatedAt,
		&d.RequestedBy, &d.Rollback, &d.Revision, &d.Ready,
		&d.Desired, &d.Detail, &d.StalledSince, &d.SupersededBy, &d.FinishedAt,
		&hasP, &p.Reason, &p.PausedBy, &p.PausedAt,
		&c.Held, &c.HeldReason)
	if err != nil {
		return c, err
	}
	if hasRel {
		c.CurrentRelease = &rel
	}
	if hasDep {
		d.EnvironmentID, d.ServiceID = c.EnvironmentID, c.ServiceID
		d.Stalled = d.StalledSince != nil
		c.LatestDeployment = &d
	}
	if hasP {
		c.DeploysPaused = &p
	}
	return c, nil
}

// DeploymentInProgress is a deployment that is not over yet, with the
// names of its project, environment and service, and the cluster the
// environment runs on.
type DeploymentInProgress struct {
	api.Deployment
	Project     string `json:"project"`
	Environment string `json:"environment"`
	Service     string `json:"service"`
	ClusterID   string `json:"clusterId"`
}

// DeploymentsInProgress pages the deployments of an organisation that are
// not over (no finished_at: the partial index deployments_open), newest
// first, of live projects, environments and services; after is the id of
// the deployment the page starts after ("" for the first page).
func DeploymentsInProgress(ctx context.Context, q eventstore.Querier, orgID, after string, limit int) ([]DeploymentInProgress, error) {
	if !validID(orgID) || after != "" && !validID(after) {
		return []DeploymentInProgress{}, nil
	}
	var w where
	w.add("d.org_id = %s AND d.finished_at IS NULL", orgID)
	if after != "" {
		w.add(`(d.requested_at, d.seq, d.id) < (SELECT a.requested_at, a.seq, a.id FROM deployments a
			WHERE a.id = %s AND a.org_id = d.org_id)`, after)
	}
	lim := w.next(pageLimit(limit))
	return list(ctx, q, "deployments in progress of organisation "+orgID, scanDeploymentInProgress,
		`SELECT d.id::text, d.environment_id::text, d.service_id::text, d.release_id::text,
			coalesce(r.number, 0), coalesce(r.image, ''), d.status, d.reason, d.requested_at, d.updated_at, d.requested_by,
			d.rollback, d.revision, d.ready, d.desired, d.detail, d.stalled_since, coalesce(d.superseded_by::text, ''), d.finished_at,
			p.name, e.name, s.name, e.cluster_id::text
		FROM deployments d LEFT JOIN releases r ON r.id = d.release_id
		JOIN environments e ON e.id = d.environment_id AND e.deleted_at IS NULL
		JOIN projects p ON p.id = e.project_id AND p.deleted_at IS NULL
		JOIN services s ON s.id = d.service_id AND s.deleted_at IS NULL
		WHERE `+w.sql()+` ORDER BY d.requested_at DESC, d.seq DESC, d.id DESC LIMIT `+lim, w.args...)
}

func scanDeploymentInProgress(row pgx.Row) (DeploymentInProgress, error) {
	var x DeploymentInProgress
	d := &x.Deployment
	err := row.Scan(&d.ID, &d.EnvironmentID, &d.ServiceID, &d.ReleaseID, &d.ReleaseNumber, &d.Image,
		&d.Status, &d.Reason, &d.RequestedAt, &d.UpdatedAt, &d.RequestedBy,
		&d.Rollback, &d.Revision, &d.Ready, &d.Desired, &d.Detail, &d.StalledSince, &d.SupersededBy, &d.FinishedAt,
		&x.Project, &x.Environment, &x.Service, &x.ClusterID)
	d.Stalled = d.StalledSince != nil
	return x, err
}
