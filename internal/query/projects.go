package query

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// Project is a project of an organisation.
type Project struct {
	ID        string    `json:"id"`
	OrgID     string    `json:"orgId"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
}

// Environment is an environment of a project and the cluster it runs on.
type Environment struct {
	ID          string    `json:"id"`
	ProjectID   string    `json:"projectId"`
	Name        string    `json:"name"`
	ClusterID   string    `json:"clusterId"`
	ClusterName string    `json:"clusterName"`
	Protected   bool      `json:"protected"`
	CreatedAt   time.Time `json:"createdAt"`
}

// Service is a service of a project: where its image comes from and its processes.
type Service struct {
	ID        string           `json:"id"`
	ProjectID string           `json:"projectId"`
	Name      string           `json:"name"`
	Source    ServiceSource    `json:"source"`
	Processes []domain.Process `json:"processes"`
	// ProgressDeadlineSeconds bounds how long a release may take to become
	// ready once its pods start; 0 means the default (600).
	ProgressDeadlineSeconds int       `json:"progressDeadlineSeconds"`
	CreatedAt               time.Time `json:"createdAt"`
	UpdatedAt               time.Time `json:"updatedAt"`
}

// ServiceSource is a service's source as the API shows it: a Git source's
// credential is named by its kind and user name, never returned.
type ServiceSource struct {
	Image      string          `json:"image,omitempty"`
	GitURL     string          `json:"gitUrl,omitempty"`
	GitBranch  string          `json:"gitBranch,omitempty"`
	Dockerfile string          `json:"dockerfile,omitempty"`
	Context    string          `json:"context,omitempty"`
	Credential *CredentialInfo `json:"credential,omitempty"`
	// sealed is the credential as stored, for the builds' delivery only.
	sealed *domain.GitCredential
}

// CredentialInfo says that a Git source has a read credential, and which.
type CredentialInfo struct {
	Kind     string `json:"kind"`
	Username string `json:"username,omitempty"`
	// KnownHosts are the pinned SSH host keys (public, not a secret).
	KnownHosts string `json:"knownHosts,omitempty"`
}

// Sealed returns the stored (sealed) credential, for delivery to a build.
func (s ServiceSource) Sealed() *domain.GitCredential { return s.sealed }

// Domain returns the source as the domain keeps it (with the sealed
// credential), so that an update that does not touch it keeps it.
func (s ServiceSource) Domain() domain.Source {
	return domain.Source{Image: s.Image, GitURL: s.GitURL, GitBranch: s.GitBranch, Dockerfile: s.Dockerfile, Context: s.Context, Credential: s.sealed}
}

func sourceOf(d domain.Source) ServiceSource {
	s := ServiceSource{Image: d.Image, GitURL: d.GitURL, GitBranch: d.GitBranch, Dockerfile: d.Dockerfile, Context: d.Context, sealed: d.Credential}
	if d.Credential != nil {
		s.Credential = &CredentialInfo{Kind: d.Credential.Kind, Username: d.Credential.Username, KnownHosts: d.Credential.KnownHosts}
	}
	return s
}

// Where a variable is set, as Variable.Scope says.
const (
	VariableScopeEnvironment = "environment"
	VariableScopeService     = "service"
)

// Variable is a configuration variable. A secret's value never leaves the
// database: it comes back with Secret set and Value empty.
type Variable struct {
	Name   string `json:"name"`
	Value  string `json:"value,omitempty"`
	Secret bool   `json:"secret"`
	// Scope is VariableScopeEnvironment or VariableScopeService.
	Scope     string    `json:"scope"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Domain is a host name routed to a service in an environment.
type Domain struct {
	Host          string    `json:"host"`
	ServiceID     string    `json:"serviceId"`
	ServiceName   string    `json:"serviceName"`
	EnvironmentID string    `json:"environmentId"`
	CreatedAt     time.Time `json:"createdAt"`
}

const projectColumns = `id::text, org_id::text, name, created_at`

func scanProject(row pgx.Row) (Project, error) {
	var p Project
	err := row.Scan(&p.ID, &p.OrgID, &p.Name, &p.CreatedAt)
	return p, err
}

// Projects lists the live projects of an organisation by name.
func Projects(ctx context.Context, q eventstore.Querier, orgID string) ([]Project, error) {
	if !validID(orgID) {
		return []Project{}, nil
	}
	return list(ctx, q, "projects of organisation "+orgID, scanProject,
		`SELECT `+projectColumns+` FROM projects WHERE org_id = $1 AND deleted_at IS NULL ORDER BY name`, orgID)
}

// ProjectByName finds a live project of an organisation by name.
func ProjectByName(ctx context.Context, q eventstore.Querier, orgID, name string) (Project, error) {
	what := fmt.Sprintf("project %q", name)
	if !validID(orgID) {
		return Project{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanProject,
		`SELECT `+projectColumns+` FROM projects WHERE org_id = $1 AND name = $2 AND deleted_at IS NULL`, orgID, name)
}

// The cluster is joined without regard to its deleted_at: an environment
// still names the cluster it was on after that cluster is deleted.
const environmentSelect = `SELECT e.id::text, e.project_id::text, e.name, e.cluster_id::text, coalesce(c.name, ''), e.protected, e.created_at
	FROM environments e LEFT JOIN clusters c ON c.id = e.cluster_id`

func scanEnvironment(row pgx.Row) (Environment, error) {
	var e Environment
	err := row.Scan(&e.ID, &e.ProjectID, &e.Name, &e.ClusterID, &e.ClusterName, &e.Protected, &e.CreatedAt)
	return e, err
}

// Environments lists the live environments of a project by name.
func Environments(ctx context.Context, q eventstore.Querier, projectID string) ([]Environment, error) {
	if !validID(projectID) {
		return []Environment{}, nil
	}
	return list(ctx, q, "environments of project "+projectID, scanEnvironment,
		environmentSelect+` WHERE e.project_id = $1 AND e.deleted_at IS NULL ORDER BY e.name`, projectID)
}

// EnvironmentByName finds a live environment of a project by name.
func EnvironmentByName(ctx context.Context, q eventstore.Querier, projectID, name string) (Environment, error) {
	what := fmt.Sprintf("environment %q", name)
	if !validID(projectID) {
		return Environment{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanEnvironment,
		environmentSelect+` WHERE e.project_id = $1 AND e.name = $2 AND e.deleted_at IS NULL`, projectID, name)
}

// EnvironmentsOnCluster lists the live environments that run on a cluster,
// by id: what stands in the way of deleting the cluster.
func EnvironmentsOnCluster(ctx context.Context, q eventstore.Querier, clusterID string) ([]Environment, error) {
	if !validID(clusterID) {
		return []Environment{}, nil
	}
	return list(ctx, q, "environments on cluster "+clusterID, scanEnvironment,
		environmentSelect+` WHERE e.cluster_id = $1 AND e.deleted_at IS NULL ORDER BY e.id`, clusterID)
}

const serviceColumns = `id::text, project_id::text, name, source, processes, progress_deadline_seconds, created_at, updated_at`

func scanService(row pgx.Row) (Service, error) {
	var s Service
	var src domain.Source
	err := row.Scan(&s.ID, &s.ProjectID, &s.Name, &src, &s.Processes, &s.ProgressDeadlineSeconds, &s.CreatedAt, &s.UpdatedAt)
	s.Source = sourceOf(src)
	if s.Processes == nil {
		s.Processes = []domain.Process{}
	}
	return s, err
}

// Services lists the live services of a project by name.
func Services(ctx context.Context, q eventstore.Querier, projectID string) ([]Service, error) {
	if !validID(projectID) {
		return []Service{}, nil
	}
	return list(ctx, q, "services of project "+projectID, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE project_id = $1 AND deleted_at IS NULL ORDER BY name`, projectID)
}

// ServiceByName finds a live service of a project by name.
func ServiceByName(ctx context.Context, q eventstore.Querier, projectID, name string) (Service, error) {
	what := fmt.Sprintf("service %q", name)
	if !validID(projectID) {
		return Service{}, notFound("%s", what)
	}
	return one(ctx, q, what, scanService,
		`SELECT `+serviceColumns+` FROM services WHERE project_id = $1 AND name = $2 AND deleted_at IS NULL`, projectID, name)
}

// variableColumns never selects the secret column, and blanks the value of
// a secret as well (it is empty by the domain's rules, but a secret's value
// must not reach a response even if a row broke them).
const variableColumns = `name, CASE WHEN secret IS NULL THEN value ELSE '' END, secret IS NOT NULL,
	CASE WHEN service_id = '' THEN 'environment' ELSE 'service' END, updated_at`

func scanVariable(row pgx.Row) (Variable, error) {
	var v Variable
	err := row.Scan(&v.Name, &v.Value, &v.Secret, &v.Scope, &v.UpdatedAt)
	return v, err
}

// Variables lists the variables set on one level, by name: the
// environment-wide ones when serviceID is "", else the ones set on that
// service in the environment (without the environment-wide ones).
func Variables(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]Variable, error) {
	if !validID(envID) {
		return []Variable{}, nil
	}
	return list(ctx, q, "variables of environment "+envID, scanVariable,
		`SELECT `+variableColumns+` FROM variables WHERE environment_id = $1 AND service_id = $2 ORDER BY name`, envID, serviceID)
}

// EffectiveVariables lists, by name, the variables a service sees in an
// environment: the environment-wide ones overridden by the service's own.
// Scope tells which level each comes from. With serviceID "" it is the
// environment-wide ones.
func EffectiveVariables(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]Variable, error) {
	if !validID(envID) {
		return []Variable{}, nil
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
func Domains(ctx context.Context, q eventstore.Querier, envID, serviceID string) ([]Domain, error) {
	if !validID(envID) || serviceID != "" && !validID(serviceID) {
		return []Domain{}, nil
	}
	var w where
	w.add("d.environment_id = %s", envID)
	if serviceID != "" {
		w.add("d.service_id = %s", serviceID)
	}
	// The service is joined without regard to deleted_at: the name is what
	// the domain was routed to.
	return list(ctx, q, "domains of environment "+envID, func(row pgx.Row) (Domain, error) {
		var d Domain
		err := row.Scan(&d.Host, &d.ServiceID, &d.ServiceName, &d.EnvironmentID, &d.CreatedAt)
		return d, err
	}, `SELECT d.host, d.service_id::text, coalesce(s.name, ''), d.environment_id::text, d.created_at
	      FROM domains d LEFT JOIN services s ON s.id = d.service_id
	     WHERE `+w.sql()+` ORDER BY d.host`, w.args...)
}
