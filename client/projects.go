package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
)

func projectPath(org, project string) string {
	return path("/api/v1/orgs/%s/projects/%s", org, project)
}

func envPath(org, project, env string) string {
	return projectPath(org, project) + path("/environments/%s", env)
}

// levelPath is an environment's path, or a service's in it when service is not "".
func levelPath(org, project, env, service string) string {
	p := envPath(org, project, env)
	if service != "" {
		p += path("/services/%s", service)
	}
	return p
}

// Projects lists an organisation's projects.
func (c *Client) Projects(ctx context.Context, org string) ([]api.Project, error) {
	return list[api.Project](ctx, c, request{method: http.MethodGet, path: path("/api/v1/orgs/%s/projects", org)}, 0)
}

// CreateProject creates a project.
func (c *Client) CreateProject(ctx context.Context, org, name string) (api.Project, error) {
	var out api.Project
	_, err := c.call(ctx, request{method: http.MethodPost, path: path("/api/v1/orgs/%s/projects", org),
		in: api.CreateProjectRequest{Name: name}, creating: true}, &out)
	return out, err
}

// Project reads a project.
func (c *Client) Project(ctx context.Context, org, project string) (api.Project, error) {
	var out api.Project
	_, err := c.call(ctx, request{method: http.MethodGet, path: projectPath(org, project)}, &out)
	return out, err
}

// DeleteProject deletes a project; with a protected environment the
// deletion waits in its change set, which is returned.
func (c *Client) DeleteProject(ctx context.Context, org, project string) (*api.ChangeSet, error) {
	return c.maybeChangeSet(ctx, request{method: http.MethodDelete, path: projectPath(org, project)}, nil)
}

// maybeChangeSet makes a call whose change may wait in a change set of a
// protected environment (202 with the change set); otherwise the answer goes
// into out.
func (c *Client) maybeChangeSet(ctx context.Context, r request, out any) (*api.ChangeSet, error) {
	var raw json.RawMessage
	status, err := c.call(ctx, r, &raw)
	if err != nil {
		return nil, err
	}
	if status == http.StatusAccepted {
		var cs api.ChangeSet
		if err := json.Unmarshal(raw, &cs); err != nil {
			return nil, fmt.Errorf("reading the change set: %w", err)
		}
		return &cs, nil
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// Environments lists a project's environments.
func (c *Client) Environments(ctx context.Context, org, project string) ([]api.Environment, error) {
	return list[api.Environment](ctx, c, request{method: http.MethodGet, path: projectPath(org, project) + "/environments"}, 0)
}

// CreateEnvironment creates an environment on a cluster of the organisation.
func (c *Client) CreateEnvironment(ctx context.Context, org, project string, req api.CreateEnvironmentRequest) (api.Environment, error) {
	var out api.Environment
	_, err := c.call(ctx, request{method: http.MethodPost, path: projectPath(org, project) + "/environments", in: req, creating: true}, &out)
	return out, err
}

// Environment reads an environment.
func (c *Client) Environment(ctx context.Context, org, project, env string) (api.Environment, error) {
	var out api.Environment
	_, err := c.call(ctx, request{method: http.MethodGet, path: envPath(org, project, env)}, &out)
	return out, err
}

// UpdateEnvironment changes an environment's cluster or protection. Turning
// a protected environment's protection off, or moving it, waits in its
// change set, which is returned instead.
func (c *Client) UpdateEnvironment(ctx context.Context, org, project, env string, req api.UpdateEnvironmentRequest) (api.Environment, *api.ChangeSet, error) {
	var out api.Environment
	cs, err := c.maybeChangeSet(ctx, request{method: http.MethodPatch, path: envPath(org, project, env), in: req}, &out)
	return out, cs, err
}

// DeleteEnvironment deletes an environment; a protected one's deletion waits
// in its change set, which is returned.
func (c *Client) DeleteEnvironment(ctx context.Context, org, project, env string) (*api.ChangeSet, error) {
	return c.maybeChangeSet(ctx, request{method: http.MethodDelete, path: envPath(org, project, env)}, nil)
}

// Services lists a project's services.
func (c *Client) Services(ctx context.Context, org, project string) ([]api.Service, error) {
	return list[api.Service](ctx, c, request{method: http.MethodGet, path: projectPath(org, project) + "/services"}, 0)
}

// CreateService creates a service from an image or a Git branch.
func (c *Client) CreateService(ctx context.Context, org, project string, req api.ServiceRequest) (api.Service, error) {
	var out api.Service
	_, err := c.call(ctx, request{method: http.MethodPost, path: projectPath(org, project) + "/services", in: req, creating: true}, &out)
	return out, err
}

// Service reads a service.
func (c *Client) Service(ctx context.Context, org, project, service string) (api.Service, error) {
	var out api.Service
	_, err := c.call(ctx, request{method: http.MethodGet, path: projectPath(org, project) + path("/services/%s", service)}, &out)
	return out, err
}

// UpdateService changes a service's source or processes; absent fields stay.
func (c *Client) UpdateService(ctx context.Context, org, project, service string, req api.ServiceRequest) (api.Service, error) {
	var out api.Service
	_, err := c.call(ctx, request{method: http.MethodPatch, path: projectPath(org, project) + path("/services/%s", service), in: req}, &out)
	return out, err
}

// DeleteService deletes a service everywhere; when it runs in a protected
// environment the deletion waits in that environment's change set, which is
// returned.
func (c *Client) DeleteService(ctx context.Context, org, project, service string) (*api.ChangeSet, error) {
	return c.maybeChangeSet(ctx, request{method: http.MethodDelete, path: projectPath(org, project) + path("/services/%s", service)}, nil)
}

// Variables lists the environment-wide variables (service "") or the ones a
// service sees in the environment, environment-wide ones merged. Secret
// values are never returned.
func (c *Client) Variables(ctx context.Context, org, project, env, service string) ([]api.Variable, error) {
	return list[api.Variable](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/variables"}, 0)
}

// SetVariables sets environment-wide variables (service "") or a service's.
// In a protected environment the answer carries the change set that waits
// for approval instead.
func (c *Client) SetVariables(ctx context.Context, org, project, env, service string, vars []api.VariableInput) (api.VariablesResponse, error) {
	var out api.VariablesResponse
	_, err := c.call(ctx, request{method: http.MethodPut, path: levelPath(org, project, env, service) + "/variables",
		in: api.SetVariablesRequest{Variables: vars}}, &out)
	return out, err
}

// UnsetVariable unsets an environment-wide variable (service "") or a service's.
func (c *Client) UnsetVariable(ctx context.Context, org, project, env, service, name string) (api.VariablesResponse, error) {
	var out api.VariablesResponse
	_, err := c.call(ctx, request{method: http.MethodDelete, path: levelPath(org, project, env, service) + path("/variables/%s", name)}, &out)
	return out, err
}

// Domains lists the domains of an environment (service "") or of a service in it.
func (c *Client) Domains(ctx context.Context, org, project, env, service string) ([]api.Domain, error) {
	return list[api.Domain](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/domains"}, 0)
}

// DomainResult is the domain routed, or, in a protected environment, the
// change set that waits for approval.
type DomainResult struct {
	Domain    *api.Domain
	ChangeSet *api.ChangeSet
}

// AddDomain routes a host name to a service.
func (c *Client) AddDomain(ctx context.Context, org, project, env, service, host string) (DomainResult, error) {
	var raw json.RawMessage
	status, err := c.call(ctx, request{method: http.MethodPost, path: levelPath(org, project, env, service) + "/domains",
		in: api.AddDomainRequest{Host: host}, creating: true}, &raw)
	if err != nil {
		return DomainResult{}, err
	}
	if status == http.StatusAccepted {
		var cs api.ChangeSet
		return DomainResult{ChangeSet: &cs}, json.Unmarshal(raw, &cs)
	}
	var d api.Domain
	return DomainResult{Domain: &d}, json.Unmarshal(raw, &d)
}

// RemoveDomain stops routing a host name; in a protected environment it
// returns the change set that waits for approval, else nil.
func (c *Client) RemoveDomain(ctx context.Context, org, project, env, service, host string) (*api.ChangeSet, error) {
	var raw json.RawMessage
	status, err := c.call(ctx, request{method: http.MethodDelete, path: levelPath(org, project, env, service) + path("/domains/%s", host)}, &raw)
	if err != nil || status != http.StatusAccepted {
		return nil, err
	}
	var cs api.ChangeSet
	return &cs, json.Unmarshal(raw, &cs)
}

// Deploy deploys an image (its tag resolved to a digest by the control
// plane) as a new release, or the service's own image when image is "".
func (c *Client) Deploy(ctx context.Context, org, project, env, service, image string) (api.DeployResponse, error) {
	var out api.DeployResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: levelPath(org, project, env, service) + "/deployments",
		in: api.DeployRequest{Image: image}, creating: true}, &out)
	return out, err
}

// Rollback deploys an earlier release again.
func (c *Client) Rollback(ctx context.Context, org, project, env, service string, release int) (api.DeployResponse, error) {
	var out api.DeployResponse
	_, err := c.call(ctx, request{method: http.MethodPost, path: levelPath(org, project, env, service) + "/rollback",
		in: api.RollbackRequest{Release: release}, creating: true}, &out)
	return out, err
}

// Deployments lists a service's newest deployments in an environment (at
// most limit; 0 means DefaultDeployments), newest first, with their rollout
// stage, stall flag and blockers.
func (c *Client) Deployments(ctx context.Context, org, project, env, service string, limit int) ([]api.DeploymentView, error) {
	if limit <= 0 {
		limit = DefaultDeployments
	}
	return list[api.DeploymentView](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/deployments"}, limit)
}

// DefaultDeployments is how many deployments Deployments reads without a limit.
const DefaultDeployments = 50

// LatestDeployment is the id that names a service's newest deployment in an
// environment.
const LatestDeployment = "latest"

// Deployment reads a deployment (LatestDeployment: the newest) with every
// stage of its rollout.
func (c *Client) Deployment(ctx context.Context, org, project, env, service, id string) (api.DeploymentDetail, error) {
	var out api.DeploymentDetail
	_, err := c.call(ctx, request{method: http.MethodGet, path: levelPath(org, project, env, service) + path("/deployments/%s", id)}, &out)
	return out, err
}

// Target reads a service in an environment: its current release, latest
// deployment, and whether its automatic deploys are paused.
func (c *Client) Target(ctx context.Context, org, project, env, service string) (api.TargetView, error) {
	var out api.TargetView
	_, err := c.call(ctx, request{method: http.MethodGet, path: levelPath(org, project, env, service)}, &out)
	return out, err
}

// ResumeDeploys resumes the automatic deploys of a service in an
// environment that a rollback paused.
func (c *Client) ResumeDeploys(ctx context.Context, org, project, env, service string) (api.TargetView, error) {
	var out api.TargetView
	_, err := c.call(ctx, request{method: http.MethodPost, path: levelPath(org, project, env, service) + "/resume-deploys"}, &out)
	return out, err
}

// Releases lists a service's release history in an environment, newest first.
func (c *Client) Releases(ctx context.Context, org, project, env, service string) ([]api.Release, error) {
	return list[api.Release](ctx, c, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/releases"}, 0)
}

// StateQuery picks a revision of the desired state: the latest when zero.
type StateQuery struct {
	Revision int
	At       time.Time
}

// State reads an environment's desired state.
func (c *Client) State(ctx context.Context, org, project, env string, q StateQuery) (api.Revision, error) {
	v := url.Values{}
	if q.Revision > 0 {
		v.Set("revision", strconv.Itoa(q.Revision))
	}
	if !q.At.IsZero() {
		v.Set("at", q.At.UTC().Format(time.RFC3339))
	}
	var out api.Revision
	_, err := c.call(ctx, request{method: http.MethodGet, path: envPath(org, project, env) + "/state", query: v}, &out)
	return out, err
}

// ChangeSets lists an environment's change sets, newest first; status
// ("open", "approved", "rejected", "expired") filters unless it is "".
func (c *Client) ChangeSets(ctx context.Context, org, project, env, status string) ([]api.ChangeSet, error) {
	var q url.Values
	if status != "" {
		q = url.Values{"status": {status}}
	}
	return list[api.ChangeSet](ctx, c, request{method: http.MethodGet, path: envPath(org, project, env) + "/changesets", query: q}, 0)
}

// ChangeSet reads a change set with what each of its changes changes.
func (c *Client) ChangeSet(ctx context.Context, org, project, env, id string) (api.ChangeSetView, error) {
	var out api.ChangeSetView
	_, err := c.call(ctx, request{method: http.MethodGet, path: envPath(org, project, env) + path("/changesets/%s", id)}, &out)
	return out, err
}

// ApproveChangeSet approves and applies a change set someone else opened,
// at the version the approver reviewed: the API answers 409 (conflict) when
// changes joined it since.
func (c *Client) ApproveChangeSet(ctx context.Context, org, project, env, id string, version int) (api.ChangeSet, error) {
	var out api.ChangeSet
	_, err := c.call(ctx, request{method: http.MethodPost, path: envPath(org, project, env) + path("/changesets/%s/approve", id),
		in: api.ChangeSetDecision{Version: version}}, &out)
	return out, err
}

// RejectChangeSet rejects a change set.
func (c *Client) RejectChangeSet(ctx context.Context, org, project, env, id, reason string) (api.ChangeSet, error) {
	var out api.ChangeSet
	_, err := c.call(ctx, request{method: http.MethodPost, path: envPath(org, project, env) + path("/changesets/%s/reject", id),
		in: api.ChangeSetDecision{Reason: reason}}, &out)
	return out, err
}

// Logs reads a service's container logs after cursor ("": the latest
// lines); the page's Next, always set, is the cursor to follow from.
func (c *Client) Logs(ctx context.Context, org, project, env, service, cursor string, limit int) (api.LogPage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.LogPage
	_, err := c.call(ctx, request{method: http.MethodGet, path: levelPath(org, project, env, service) + "/logs", query: q}, &out)
	return out, err
}
