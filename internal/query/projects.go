package query

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

func sourceOf(d domain.Source) api.ServiceSource {
	s := api.ServiceSource{Image: d.Image, GitURL: d.GitURL, GitBranch: d.GitBranch, Dockerfile: d.Dockerfile, Context: d.Context}
	if d.Credential != nil {
		s.Credential = &api.CredentialInfo{Kind: d.Credential.Kind, Username: d.Credential.Username, KnownHosts: d.Credential.KnownHosts}
	}
	return s
}

const projectColumns = `id::text, org_id::text, name, created_at`

func scanProject(row pgx.Row) (api.Project, error) {
	var p api.Project
	err := row.Scan(&p.ID, &p.OrgID, &p.Name, &p.CreatedAt)
	return p, err
}

// Projects lists the live projects of an organisation by name.
func Projects(ctx context.Context, q eventstore.Querier, orgID string) ([]api.Project, error) {
	if !validID(orgID) {
		return []api.Project{}, nil
	}
	return list(ctx, q, "projects of organisation "+orgID, scanProject,
		`SELECT `+projectColumns+` FROM projects WHERE org_id = $1 AND deleted_at IS NULL ORDER BY name`, orgID)
}

// ProjectByName finds a live project of an organisation by name.
func ProjectByName(ctx context.Context, q eventstore.Querier, orgID, name string) (api.Project, error) {
	what := fmt.Sprintf("project %q", name)
	if !validID(orgID) {
		return api.Project{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanProject,
		`SELECT `+projectColumns+` FROM projects WHERE org_id = $1 AND name = $2 AND deleted_at IS NULL`, orgID, name)
}

// The cluster is joined without regard to its deleted_at: an environment
// still names the cluster it was on after that cluster is deleted.
const environmentSelect = `SELECT e.id::text, e.project_id::text, e.name, e.cluster_id::text, coalesce(c.name, ''), e.protected, e.created_at
	FROM environments e LEFT JOIN clusters c ON c.id = e.cluster_id`

func scanEnvironment(row pgx.Row) (api.Environment, error) {
	var e api.Environment
	err := row.Scan(&e.ID, &e.ProjectID, &e.Name, &e.ClusterID, &e.ClusterName, &e.Protected, &e.CreatedAt)
	return e, err
}

// Environments lists the live environments of a project by name.
func Environments(ctx context.Context, q eventstore.Querier, projectID string) ([]api.Environment, error) {
	if !validID(projectID) {
		return []api.Environment{}, nil
	}
	return list(ctx, q, "environments of project "+projectID, scanEnvironment,
		environmentSelect+` WHERE e.project_id = $1 AND e.deleted_at IS NULL ORDER BY e.name`, projectID)
}

// EnvironmentByName finds a live environment of a project by name.
func EnvironmentByName(ctx context.Context, q eventstore.Querier, projectID, name string) (api.Environment, error) {
	what := fmt.Sprintf("environment %q", name)
	if !validID(projectID) {
		return api.Environment{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanEnvironment,
		environmentSelect+` WHERE e.project_id = $1 AND e.name = $2 AND e.deleted_at IS NULL`, projectID, name)
}

// EnvironmentsOnCluster lists the live environments that run on a cluster,
// by id: what stands in the way of deleting the cluster.
func EnvironmentsOnCluster(ctx context.Context, q eventstore.Querier, clusterID string) ([]api.Environment, error) {
	if !validID(clusterID) {
		return []api.Environment{}, nil
	}
	return list(ctx, q, "environments on cluster "+clusterID, scanEnvironment,
		environmentSelect+` WHERE e.cluster_id = $1 AND e.deleted_at IS NULL ORDER BY e.id`, clusterID)
}

const serviceColumns = `id::text, project_id::text, name, source, processes, progress_deadline_seconds, created_at, updated_at`

func scanService(row pgx.Row) (api.Service, error) {
	var s api.Service
	var src domain.Source
	err := row.Scan(&s.ID, &s.ProjectID, &s.Name, &src, &s.Processes, &s.ProgressDeadlineSeconds, &s.CreatedAt, &s.UpdatedAt)
	s.Source = sourceOf(src)
	if s.Processes == nil {
		s.Processes = []api.Process{}
	}
	return s, err
}

// Services lists the live services of a project by name.
func Services(ctx context.Context, q eventstore.Querier, projectID string) ([]api.Service, error) {
	if !validID(projectID) {
		return []api.Service{}, nil
	}
	return list(ctx, q, "services of project "+projectID, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE project_id = $1 AND deleted_at IS NULL ORDER BY name`, projectID)
}

// ServiceByName finds a live service of a project by name.
func ServiceByName(ctx context.Context, q eventstore.Querier, projectID, name string) (api.Service, error) {
	what := fmt.Sprintf("service %q", name)
	if !validID(projectID) {
		return api.Service{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE project_id = $1 AND name = $2 AND deleted_at IS NULL`, projectID, name)
}

// variableColumns never selects the secret column, and blanks the value of
// a secret as well (it is empty by the domain's rules, but a secret's value
// must not reach a response even if a row broke them).
const variableColumns = `name, CASE WHEN secret IS NULL THEN value ELSE '' END, secret IS NOT NULL,
	CASE WHEN service_id = '' THEN 'environment' ELSE 'service' END, updated_at`

func scanVariable(row pgx.Row) (api.Variable, error) {
	var v api.Variable
	err := row.Scan(&v.Name, &v.Value, &v.Secret, &v.Scope, &v.UpdatedAt)
	return v, err
}

// Variables lists the variables set on one level, by name: the
// environment-wide ones when serviceID is "", else the ones set on that
// service in the environment (without the environment-wide ones).
func Variables(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]api.Variable, error) {
	if !validID(envID) {
		return []api.Variable{}, nil
	}
	return list(ctx, q, "variables of environment "+envID, scanVariable,
		`SELECT `+variableColumns+` FROM variables WHERE environment_id = $1 AND service_id = $2 ORDER BY name`, envID, serviceID)
}

// EffectiveVariables lists, by name, the variables a service sees in an
// environment: the environment-wide ones overridden by the service's own.
// Scope tells which level each comes from. With serviceID "" it is the
// environment-wide ones.
func EffectiveVariables(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]api.Variable, error) {
	if !validID(envID) {
		return []api.Variable{}, nil
	}
	// DISTINCT ON keeps the first row of each name; '' sorts before any
	// service id, so descending order puts the service's own row first.
	return list(ctx, q, "effective variables of environment "+envID, scanVariable,
		`SELECT DISTINCT ON (name) `+variableColumns+` FROM variables
		  WHERE environment_id = $1 AND service_id IN ('', $2)
		  ORDER BY name, service_id DESC`, envID, serviceID)
}

// Domains lists, by host, the domains of an environment, or of one service
// in it when serviceID is not "".
func Domains(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]api.Domain, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) {
		return []api.Domain{}, nil
	}
	var w where
	w.add("d.environment_id = %s", envID)
	if serviceID != "" {
		w.add("d.service_id = %s", serviceID)
	}
	// The service is joined without regard to deleted_at: the name is what
	// the domain was routed to.
	return list(ctx, q, "domains of environment "+envID, func(row pgx.Row) (api.Domain, error) {
		var d api.Domain
		err := row.Scan(&d.Host, &d.ServiceID, &d.ServiceName, &d.EnvironmentID, &d.CreatedAt)
		return d, err
	}, `SELECT d.host, d.service_id::text, coalesce(s.name, ''), d.environment_id::text, d.created_at
	      FROM domains d LEFT JOIN services s ON s.id = d.service_id
	     WHERE `+w.sql()+` ORDER BY d.host`, w.args...)
}
