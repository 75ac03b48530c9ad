package query

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// SecretSuffix marks a secret variable's name in Release.Variables.
const SecretSuffix = " (secret)"

// releaseConfig has the shape of projections.ReleaseConfig. It is local so
// that reads do not pull in the projectors (and the compiler behind them).
type releaseConfig struct {
	Processes []api.Process `json:"processes"`
}

// The current release is joined on its id as well, so only the one release
// current_releases points at is flagged. A release's variables are the rows
// of release_variables valid at its number (names only: values, and a
// secret's ciphertext, are never read here).
const releaseSelect = `SELECT r.id::text, r.environment_id::text, r.service_id::text, r.number, r.image, r.reason,
		r.config, r.created_at, r.created_by, cr.release_id IS NOT NULL,
		coalesce((SELECT array_agg(v.name || CASE WHEN v.secret IS NOT NULL AND jsonb_typeof(v.secret) <> 'null' THEN '` + SecretSuffix + `' ELSE '' END
			ORDER BY v.name) FROM release_variables v
			WHERE v.environment_id = r.environment_id AND v.service_id = r.service_id
			  AND coalesce(v.to_number, 2147483647) > r.number AND v.from_number <= r.number), '{}')
	FROM releases r LEFT JOIN current_releases cr
	  ON cr.environment_id = r.environment_id AND cr.service_id = r.service_id AND cr.release_id = r.id`

func scanRelease(row pgx.Row) (api.Release, error) {
	var (
		r   api.Release
		raw []byte
	)
	if err := row.Scan(&r.ID, &r.EnvironmentID, &r.ServiceID, &r.Number, &r.Image, &r.Reason,
		&raw, &r.CreatedAt, &r.CreatedBy, &r.Current, &r.Variables); err != nil {
		return api.Release{}, err
	}
	var cfg releaseConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return api.Release{}, fmt.Errorf("decoding the configuration of release %s: %w", r.ID, err)
	}
	r.Processes = cfg.Processes
	if r.Processes == nil {
		r.Processes = []api.Process{}
	}
	if r.Variables == nil {
		r.Variables = []string{}
	}
	return r, nil
}

// Releases lists the releases of a service in an environment, newest first;
// with serviceID "" those of every service in the environment.
func Releases(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]api.Release, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) {
		return []api.Release{}, nil
	}
	var w where
	w.add("r.environment_id = %s", envID)
	if serviceID != "" {
		w.add("r.service_id = %s", serviceID)
	}
	return list(ctx, q, "releases of environment "+envID, scanRelease,
		releaseSelect+` WHERE `+w.sql()+` ORDER BY r.created_at DESC, r.number DESC, r.id`, w.args...)
}

// ReleaseByID finds a release by id.
func ReleaseByID(ctx context.Context, q eventstore.Querier, id string) (api.Release, error) {
	if !validID(id) {
		return api.Release{}, notFound("release %q", id)
	}
	return one(ctx, q, "release "+id, scanRelease, releaseSelect+` WHERE r.id = $1`, id)
}

// The release is left-joined so a deployment whose release row is missing
// still lists (with number 0) rather than vanishing.
const deploymentSelect = `SELECT d.id::text, d.environment_id::text, d.service_id::text, d.release_id::text,
		coalesce(r.number, 0), coalesce(r.image, ''), d.status, d.reason, d.requested_at, d.updated_at, d.requested_by,
		d.rollback, d.revision, d.ready, d.desired, d.detail, d.stalled_since, coalesce(d.superseded_by::text, ''), d.finished_at
	FROM deployments d LEFT JOIN releases r ON r.id = d.release_id`

func scanDeployment(row pgx.Row) (api.Deployment, error) {
	var d api.Deployment
	err := row.Scan(&d.ID, &d.EnvironmentID, &d.ServiceID, &d.ReleaseID, &d.ReleaseNumber, &d.Image,
		&d.Status, &d.Reason, &d.RequestedAt, &d.UpdatedAt, &d.RequestedBy,
		&d.Rollback, &d.Revision, &d.Ready, &d.Desired, &d.Detail, &d.StalledSince, &d.SupersededBy, &d.FinishedAt)
	d.Stalled = d.StalledSince != nil
	return d, err
}

// Deployments lists at most limit deployments of a service in an
// environment (of every service when serviceID is ""), newest first. A limit
// of 0 or less means DefaultLimit; more than MaxLimit means MaxLimit.
func Deployments(ctx context.Context, q eventstore.Querier, envID, serviceID string, limit int) ([]api.Deployment, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) {
		return []api.Deployment{}, nil
	}
	var w where
	w.add("d.environment_id = %s", envID)
	if serviceID != "" {
		w.add("d.service_id = %s", serviceID)
	}
	lim := w.next(clampLimit(limit))
	return list(ctx, q, "deployments of environment "+envID, scanDeployment,
		deploymentSelect+` WHERE `+w.sql()+` ORDER BY d.requested_at DESC, d.seq DESC, d.id DESC LIMIT `+lim, w.args...)
}

// DeploymentByID finds a deployment by id.
func DeploymentByID(ctx context.Context, q eventstore.Querier, id string) (api.Deployment, error) {
	if !validID(id) {
		return api.Deployment{}, notFound("deployment %q", id)
	}
	return one(ctx, q, "deployment "+id, scanDeployment, deploymentSelect+` WHERE d.id = $1`, id)
}

const changeSetColumns = `id::text, environment_id::text, status, version, description, opened_by, decided_by, opened_at, decided_at, changes`

func scanChangeSet(row pgx.Row) (api.ChangeSet, error) {
	var (
		c   api.ChangeSet
		raw []byte
	)
	if err := row.Scan(&c.ID, &c.EnvironmentID, &c.Status, &c.Version, &c.Description, &c.OpenedBy, &c.DecidedBy,
		&c.OpenedAt, &c.DecidedAt, &raw); err != nil {
		return api.ChangeSet{}, err
	}
	changes, err := redactSecrets(raw)
	if err != nil {
		// Fail closed: returning the stored JSON unredacted is not an option.
		return api.ChangeSet{}, fmt.Errorf("redacting the changes of change set %s: %w", c.ID, err)
	}
	c.Changes = changes
	return c, nil
}

// ChangeSets lists the change sets of an environment, newest first; status
// ("open", "approved", "rejected", "expired") filters them unless it is "".
func ChangeSets(ctx context.Context, q eventstore.Querier, envID, status string) ([]api.ChangeSet, error) {
	if !validID(envID) {
		return []api.ChangeSet{}, nil
	}
	var w where
	w.add("environment_id = %s", envID)
	if status != "" {
		w.add("status = %s", status)
	}
	return list(ctx, q, "change sets of environment "+envID, scanChangeSet,
		`SELECT `+changeSetColumns+` FROM changesets WHERE `+w.sql()+` ORDER BY opened_at DESC, id`, w.args...)
}

// ChangeSetByID finds a change set by id.
func ChangeSetByID(ctx context.Context, q eventstore.Querier, id string) (api.ChangeSet, error) {
	if !validID(id) {
		return api.ChangeSet{}, notFound("change set %q", id)
	}
	return one(ctx, q, "change set "+id, scanChangeSet, `SELECT `+changeSetColumns+` FROM changesets WHERE id = $1`, id)
}

// redactSecrets replaces every JSON object that carries a non-null "secret"
// member (a domain.Variable holding a sealed value) with {"name": ...,
// "secret": true}, wherever it sits. The sealed value is only ciphertext,
// but it has no business in an API response. The walk is generic so that a
// new kind of change carrying variables is redacted without a change here.
func redactSecrets(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	// Numbers stay as written (replica counts, ports) instead of float64.
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	out, err := json.Marshal(redact(v))
	if err != nil {
		return nil, err
	}
	return out, nil
}

func redact(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if s, ok := x["secret"]; ok && s != nil {
			out := map[string]any{"secret": true}
			if name, ok := x["name"]; ok {
				out["name"] = name
			}
			return out
		}
		for k, e := range x {
			x[k] = redact(e)
		}
	case []any:
		for i, e := range x {
			x[i] = redact(e)
		}
	}
	return v
}
