package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/command"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/projections"
	"github.com/nebulactrl/nebulactrl/query"
	"github.com/nebulactrl/nebulactrl/telemetry"
	"github.com/nebulactrl/nebulactrl/transport"
)

// CreateProjectRequest creates a project.
type CreateProjectRequest struct {
	Name string `json:"name"`
}

// CreateEnvironmentRequest creates an environment on a cluster of the organisation.
type CreateEnvironmentRequest struct {
	Name      string `json:"name"`
	Cluster   string `json:"cluster"`
	Protected bool   `json:"protected,omitempty"`
}

// UpdateEnvironmentRequest changes an environment; absent fields stay.
type UpdateEnvironmentRequest struct {
	Cluster   *string `json:"cluster,omitempty"`
	Protected *bool   `json:"protected,omitempty"`
}

// ServiceRequest creates or (PATCH: absent fields stay) changes a service.
// Without processes a service gets one "web" process with Port and Replicas.
// ProgressDeadlineSeconds bounds how long a release may take to become ready
// once its pods start (0: the default, 600; at most 86400); a release that
// is not ready by then fails and the one before it runs again.
type ServiceRequest struct {
	Name       string `json:"name,omitempty"`
	Image      string `json:"image,omitempty"`
	GitURL     string `json:"gitUrl,omitempty" input:"max=2048"`
	GitBranch  string `json:"gitBranch,omitempty"`
	Dockerfile string `json:"dockerfile,omitempty" input:"max=1024"`
	Context    string `json:"context,omitempty" input:"max=1024"`
	// GitToken (an HTTPS token, with GitUsername) or GitSSHKey (a deploy
	// key, PEM) reads a private repository: sealed before it is stored,
	// delivered only to the build, never returned. GitCredentialNone
	// removes the one set.
	GitUsername string `json:"gitUsername,omitempty" input:"max=200"`
	GitToken    string `json:"gitToken,omitempty" input:"opaque,max=4096"`
	GitSSHKey   string `json:"gitSshKey,omitempty" input:"opaque,max=16384"`
	// GitKnownHosts pins the forge's SSH host keys (known_hosts lines, as
	// ssh-keyscan prints them) for GitSSHKey; without them the build
	// accepts the host key on first contact.
	GitKnownHosts           string           `json:"gitKnownHosts,omitempty" input:"max=16384"`
	GitCredentialNone       bool             `json:"gitCredentialNone,omitempty"`
	Port                    *int             `json:"port,omitempty"`
	Replicas                *int             `json:"replicas,omitempty"`
	Processes               []domain.Process `json:"processes,omitempty"`
	ProgressDeadlineSeconds *int             `json:"progressDeadlineSeconds,omitempty"`
}

// deadline is the request's progress deadline, or current when it has none.
func (req ServiceRequest) deadline(current int) int {
	if req.ProgressDeadlineSeconds != nil {
		return *req.ProgressDeadlineSeconds
	}
	return current
}

// VariableInput is one variable to set. A secret's value is sealed before it
// is stored and never returned.
type VariableInput struct {
	Name   string `json:"name"`
	Value  string `json:"value" input:"opaque,max=32768"`
	Secret bool   `json:"secret,omitempty"`
}

// SetVariablesRequest sets variables.
type SetVariablesRequest struct {
	Variables []VariableInput `json:"variables"`
}

// VariablesResponse lists variables after a change, or the change set that
// holds the change for a protected environment.
type VariablesResponse struct {
	Variables []query.Variable `json:"variables"`
	ChangeSet *query.ChangeSet `json:"changeSet,omitempty"`
}

// AddDomainRequest routes a host name to a service.
type AddDomainRequest struct {
	Host string `json:"host"`
}

// DeployRequest deploys an image (a tag is resolved to its digest) or, without
// one, the service's image again.
type DeployRequest struct {
	Image string `json:"image,omitempty"`
	// Commit builds that commit of a Git service (default: the tracked
	// branch's head).
	Commit string `json:"commit,omitempty" input:"max=64"`
}

// RollbackRequest deploys an earlier release again.
type RollbackRequest struct {
	Release int `json:"release"`
}

// DeployResponse is the deployment started, or the change set that waits for
// approval in a protected environment.
type DeployResponse struct {
	Deployment *query.Deployment `json:"deployment,omitempty"`
	Release    *query.Release    `json:"release,omitempty"`
	ChangeSet  *query.ChangeSet  `json:"changeSet,omitempty"`
	// Build is the build a Git service's deploy waits for (the deployment
	// starts when it succeeds), or the one whose image it deploys.
	Build *query.Build `json:"build,omitempty"`
}

// ChangeSetDecision approves or rejects a change set. An approval must name
// the version of the change set it approves, as the change set's read shows
// it: 422 without one, 409 when changes joined the change set since (review
// it again). A rejection may give a reason.
type ChangeSetDecision struct {
	Reason  string `json:"reason,omitempty" input:"text,max=4096"`
	Version int    `json:"version,omitempty"`
}

func (a *API) projectCommand(ctx context.Context, r *http.Request, c *call, cmd domain.ProjectCommand) (command.Result, error) {
	res, err := a.cmd.Project(ctx, commandContext(r, c), c.org.ID, c.project.ID, cmd)
	if err != nil {
		return res, err
	}
	c.version = res.Version
	return res, a.settle(ctx, res)
}

// changeSetOf returns the change set a command opened, or the open one of
// the same person that the change joined, if the change waits in one.
func (a *API) changeSetOf(ctx context.Context, res command.Result) (*query.ChangeSet, error) {
	for _, e := range res.Events {
		id := ""
		switch cs := e.(type) {
		case domain.ChangeSetOpened:
			id = cs.ChangeSetID
		case domain.ChangeSetChanged:
			id = cs.ChangeSetID
		}
		if id != "" {
			got, err := query.ChangeSetByID(ctx, a.pool, id)
			return &got, err
		}
	}
	return nil, nil
}

func (a *API) listProjects(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	p, err := query.Projects(r.Context(), a.pool, c.org.ID)
	return http.StatusOK, p, err
}

func (a *API) createProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req CreateProjectRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	res, err := a.cmd.Project(ctx, commandContext(r, c), c.org.ID, id, domain.CreateProject{ProjectID: id, OrgID: c.org.ID, Name: req.Name})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	p, err := query.ProjectByName(ctx, a.pool, c.org.ID, req.Name)
	return http.StatusCreated, p, err
}

func (a *API) getProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, c.project, nil
}

func (a *API) deleteProject(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteProject{})
}

// noContentOrChangeSet runs a command that happens at once (204), or waits in
// a change set of a protected environment (202 with the change set).
func (a *API) noContentOrChangeSet(r *http.Request, c *call, cmd domain.ProjectCommand) (int, any, error) {
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	cs, err := a.changeSetOf(ctx, res)
	if cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	return http.StatusNoContent, nil, nil
}

func (a *API) listEnvironments(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	e, err := query.Environments(r.Context(), a.pool, c.project.ID)
	return http.StatusOK, e, err
}

func (a *API) clusterID(ctx context.Context, orgID, name string) (string, error) {
	cl, err := query.ClusterByName(ctx, a.pool, orgID, name)
	if err != nil {
		if isNotFound(err) {
			return "", errorf(http.StatusUnprocessableEntity, "validation_failed", "the organisation has no cluster %s", name)
		}
		return "", err
	}
	return cl.ID, nil
}

func (a *API) createEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req CreateEnvironmentRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"name": req.Name, "cluster": req.Cluster}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	cluster, err := a.clusterID(ctx, c.org.ID, req.Cluster)
	if err != nil {
		return 0, nil, err
	}
	id := uuid.NewString()
	if _, err := a.projectCommand(ctx, r, c, domain.CreateEnvironment{EnvironmentID: id, Name: req.Name, ClusterID: cluster, Protected: req.Protected}); err != nil {
		return 0, nil, err
	}
	e, err := query.EnvironmentByName(ctx, a.pool, c.project.ID, req.Name)
	return http.StatusCreated, e, err
}

func (a *API) getEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, c.env, nil
}

func (a *API) updateEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req UpdateEnvironmentRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	cmd := domain.UpdateEnvironment{EnvironmentID: c.env.ID, ClusterID: c.env.ClusterID, Protected: c.env.Protected}
	if req.Cluster != nil {
		id, err := a.clusterID(ctx, c.org.ID, *req.Cluster)
		if err != nil {
			return 0, nil, err
		}
		cmd.ClusterID = id
	}
	if req.Protected != nil {
		cmd.Protected = *req.Protected
	}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	e, err := query.EnvironmentByName(ctx, a.pool, c.project.ID, c.env.Name)
	return http.StatusOK, e, err
}

func (a *API) deleteEnvironment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteEnvironment{EnvironmentID: c.env.ID})
}

func (a *API) listServices(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	s, err := query.Services(r.Context(), a.pool, c.project.ID)
	return http.StatusOK, s, err
}

// processes turns the request's shorthand into processes.
func (req ServiceRequest) processes(current []domain.Process) []domain.Process {
	if len(req.Processes) > 0 {
		return req.Processes
	}
	procs := current
	if len(procs) == 0 {
		procs = []domain.Process{{Name: "web", Replicas: 1}}
	}
	out := make([]domain.Process, len(procs))
	copy(out, procs)
	for i := range out {
		if out[i].Name != "web" && len(out) > 1 {
			continue
		}
		if req.Port != nil {
			out[i].Port = *req.Port
			if out[i].HealthCheck == nil && *req.Port > 0 {
				out[i].HealthCheck = &domain.HealthCheck{Port: *req.Port}
			}
		}
		if req.Replicas != nil {
			out[i].Replicas = *req.Replicas
		}
	}
	return out
}

func (a *API) createService(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req ServiceRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"name": req.Name}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	src, err := a.sourceOf(ctx, c, req, query.ServiceSource{})
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.projectCommand(ctx, r, c, domain.CreateService{ServiceID: id, Name: req.Name, Source: src, Processes: req.processes(nil),
		ProgressDeadlineSeconds: req.deadline(0)}); err != nil {
		return 0, nil, err
	}
	s, err := query.ServiceByName(ctx, a.pool, c.project.ID, req.Name)
	return http.StatusCreated, s, err
}

// sourceOf is the service's source after the request: a new image or Git
// repository replaces the current source; a Git source's other fields and its
// credential change where the request names them. A credential is sealed
// here, before anything is decided.
func (a *API) sourceOf(ctx context.Context, c *call, req ServiceRequest, current query.ServiceSource) (domain.Source, error) {
	src := current.Domain()
	switch {
	case req.Image != "":
		src = domain.Source{Image: req.Image}
	case req.GitURL != "":
		if req.GitURL != current.GitURL {
			src = domain.Source{GitURL: req.GitURL}
		}
	}
	if req.GitBranch != "" {
		src.GitBranch = req.GitBranch
	}
	if req.Dockerfile != "" {
		src.Dockerfile = req.Dockerfile
	}
	if req.Context != "" {
		src.Context = req.Context
	}
	var cred *domain.GitCredential
	switch {
	case req.GitToken != "" && req.GitSSHKey != "":
		return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "give a Git token or an SSH key, not both")
	case req.GitToken != "":
		cred = &domain.GitCredential{Kind: domain.CredentialToken, Username: req.GitUsername}
	case req.GitSSHKey != "":
		if !strings.Contains(req.GitSSHKey, "PRIVATE KEY-----") {
			return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "gitSshKey must be a private key in PEM form (-----BEGIN ... PRIVATE KEY-----)")
		}
		cred = &domain.GitCredential{Kind: domain.CredentialSSH, KnownHosts: req.GitKnownHosts}
	case req.GitUsername != "":
		return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "gitUsername goes with a gitToken")
	case req.GitKnownHosts != "":
		return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "gitKnownHosts goes with a gitSshKey")
	}
	if req.GitCredentialNone {
		if cred != nil {
			return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "gitCredentialNone removes the credential; give no other")
		}
		src.Credential = nil
	}
	if cred != nil {
		if !src.IsGit() {
			return domain.Source{}, errorf(http.StatusUnprocessableEntity, "validation_failed", "a Git credential belongs to a Git source")
		}
		plain := req.GitToken + req.GitSSHKey
		sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(plain))
		if err != nil {
			return domain.Source{}, err
		}
		cred.Sealed = sealed
		src.Credential = cred
	}
	return src, nil
}

func (a *API) getService(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return http.StatusOK, c.service, nil
}

func (a *API) updateService(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req ServiceRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if req.Name != "" && req.Name != c.service.Name {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "a service cannot be renamed")
	}
	ctx := r.Context()
	src, err := a.sourceOf(ctx, c, req, c.service.Source)
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.projectCommand(ctx, r, c, domain.UpdateService{ServiceID: c.service.ID, Source: src, Processes: req.processes(c.service.Processes),
		ProgressDeadlineSeconds: req.deadline(c.service.ProgressDeadlineSeconds)}); err != nil {
		return 0, nil, err
	}
	s, err := query.ServiceByName(ctx, a.pool, c.project.ID, c.service.Name)
	return http.StatusOK, s, err
}

func (a *API) deleteService(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteService{ServiceID: c.service.ID})
}

func (a *API) listVariables(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var vars []query.Variable
	var err error
	if c.service.ID == "" {
		vars, err = query.Variables(r.Context(), a.pool, c.env.ID, "")
	} else {
		vars, err = query.EffectiveVariables(r.Context(), a.pool, c.env.ID, c.service.ID)
	}
	return http.StatusOK, vars, err
}

func (a *API) setVariables(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req SetVariablesRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Variables) == 0 {
		return 0, nil, badRequest("no variables to set")
	}
	ctx := r.Context()
	vars := make([]domain.Variable, 0, len(req.Variables))
	for _, in := range req.Variables {
		if err := domain.ValidateVariableName(in.Name); err != nil {
			return 0, nil, err
		}
		v := domain.Variable{Name: in.Name, Value: in.Value}
		if in.Secret {
			// Sealed here, before the value becomes part of any command or log.
			sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(in.Value))
			if err != nil {
				return 0, nil, err
			}
			v = domain.Variable{Name: in.Name, Secret: &sealed}
		}
		vars = append(vars, v)
	}
	res, err := a.projectCommand(ctx, r, c, domain.SetVariables{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Variables: vars})
	if err != nil {
		return 0, nil, err
	}
	return a.variablesAfter(ctx, r, c, res)
}

func (a *API) variablesAfter(ctx context.Context, r *http.Request, c *call, res command.Result) (int, any, error) {
	cs, err := a.changeSetOf(ctx, res)
	if err != nil {
		return 0, nil, err
	}
	_, listed, err := a.listVariables(nil, r, c)
	if err != nil {
		return 0, nil, err
	}
	status := http.StatusOK
	if cs != nil {
		status = http.StatusAccepted
	}
	return status, VariablesResponse{Variables: listed.([]query.Variable), ChangeSet: cs}, nil
}

func (a *API) unsetVariable(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, domain.UnsetVariables{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Names: []string{r.PathValue("name")}})
	if err != nil {
		return 0, nil, err
	}
	return a.variablesAfter(ctx, r, c, res)
}

func (a *API) listDomains(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	d, err := query.Domains(r.Context(), a.pool, c.env.ID, c.service.ID)
	return http.StatusOK, d, err
}

func (a *API) addDomain(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req AddDomainRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	host := strings.ToLower(strings.TrimSpace(req.Host))
	ctx := r.Context()
	res, err := a.projectCommand(ctx, r, c, domain.AddDomain{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Host: host})
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	d, err := a.domainOf(ctx, c, host)
	return http.StatusCreated, d, err
}

func (a *API) removeDomain(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	d, err := a.domainOf(ctx, c, r.PathValue("host"))
	if err != nil {
		return 0, nil, err
	}
	host := d.Host
	res, err := a.projectCommand(ctx, r, c, domain.RemoveDomain{EnvironmentID: c.env.ID, Host: host})
	if err != nil {
		return 0, nil, err
	}
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, cs, err
	}
	return http.StatusNoContent, nil, nil
}

func (a *API) deploy(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req DeployRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ref := strings.TrimSpace(req.Image)
	ctx := r.Context()
	if ref == "" && c.service.Source.GitURL != "" {
		return a.deployGit(ctx, r, c, req)
	}
	if req.Commit != "" {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "commit is for a Git service's deploy without an image")
	}
	if ref == "" {
		ref = c.service.Source.Image
	}
	// Resolve before anything is decided: an image that cannot be resolved
	// creates nothing.
	pinned, err := a.cfg.Images.Resolve(ctx, ref)
	if err != nil {
		return 0, nil, err
	}
	cmd := domain.Deploy{EnvironmentID: c.env.ID, ServiceID: c.service.ID, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(), Image: pinned}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	return a.deployResponse(ctx, res, cmd.DeploymentID)
}

func (a *API) deployResponse(ctx context.Context, res command.Result, deploymentID string) (int, any, error) {
	if cs, err := a.changeSetOf(ctx, res); cs != nil || err != nil {
		return http.StatusAccepted, DeployResponse{ChangeSet: cs}, err
	}
	d, err := query.DeploymentByID(ctx, a.pool, deploymentID)
	if err != nil {
		return 0, nil, err
	}
	rel, err := query.ReleaseByID(ctx, a.pool, d.ReleaseID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, DeployResponse{Deployment: &d, Release: &rel}, nil
}

func (a *API) rollback(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req RollbackRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	rels, err := query.Releases(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return 0, nil, err
	}
	var target *query.Release
	for i, rel := range rels {
		if rel.Number == req.Release {
			target = &rels[i]
		}
	}
	if target == nil {
		return 0, nil, notFound("release " + strconv.Itoa(req.Release))
	}
	cmd := domain.Rollback{EnvironmentID: c.env.ID, ServiceID: c.service.ID, ReleaseID: target.ID, DeploymentID: uuid.NewString(),
		Release: domain.ReleaseRef{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Number: target.Number, Image: target.Image}}
	res, err := a.projectCommand(ctx, r, c, cmd)
	if err != nil {
		return 0, nil, err
	}
	return a.deployResponse(ctx, res, cmd.DeploymentID)
}

func (a *API) listReleases(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	rel, err := query.ReleasesAfter(r.Context(), a.pool, c.env.ID, c.service.ID, after, c.page.limit+1)
	return http.StatusOK, rel, err
}

// DeploymentView is a deployment with what holds it up: "delivery" while its
// cluster is Disconnected and its revision is not applied yet (the
// deployment is still requested or delivering).
type DeploymentView struct {
	query.Deployment
	Blockers []string `json:"blockers"`
}

// DeploymentDetail is a deployment with every stage of its rollout, in order.
type DeploymentDetail struct {
	DeploymentView
	Stages []query.DeploymentStage `json:"stages"`
}

// BlockerDelivery holds up a deployment whose cluster is Disconnected.
const BlockerDelivery = "delivery"

// blockers says what holds a deployment up, given its cluster's state.
func blockers(d query.Deployment, cluster query.ClusterStatus) []string {
	out := []string{}
	pending := d.Status == string(domain.StatusRequested) || d.Status == string(domain.StatusDelivering)
	if pending && cluster.State == query.StateDisconnected {
		out = append(out, BlockerDelivery)
	}
	return out
}

func (a *API) listDeployments(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	ds, err := query.DeploymentsAfter(ctx, a.pool, c.env.ID, c.service.ID, after, c.page.limit+1)
	if err != nil {
		return 0, nil, err
	}
	st, err := a.clusterStatus(ctx, c.env.ClusterID)
	if err != nil {
		return 0, nil, err
	}
	out := make([]DeploymentView, len(ds))
	for i, d := range ds {
		out[i] = DeploymentView{Deployment: d, Blockers: blockers(d, st)}
	}
	return http.StatusOK, out, nil
}

// deploymentIn finds a deployment of the service in the environment the
// path names; "latest" names the newest.
func (a *API) deploymentIn(ctx context.Context, q eventstore.Querier, c *call, id string) (query.Deployment, error) {
	if id == "latest" {
		ds, err := query.Deployments(ctx, q, c.env.ID, c.service.ID, 1)
		if err != nil {
			return query.Deployment{}, err
		}
		if len(ds) == 0 {
			return query.Deployment{}, notFound("deployment of " + c.service.Name + " in " + c.env.Name)
		}
		return ds[0], nil
	}
	d, err := query.DeploymentByID(ctx, q, id)
	if err != nil || d.EnvironmentID != c.env.ID || d.ServiceID != c.service.ID {
		if err != nil && !isNotFound(err) {
			return query.Deployment{}, err
		}
		return query.Deployment{}, notFound("deployment " + id)
	}
	return d, nil
}

// deploymentView reads a deployment again, with its blockers.
func (a *API) deploymentView(ctx context.Context, q eventstore.Querier, c *call, id string) (DeploymentView, error) {
	d, err := a.deploymentIn(ctx, q, c, id)
	if err != nil {
		return DeploymentView{}, err
	}
	st, err := query.StatusOfCluster(ctx, q, c.env.ClusterID, a.cfg.Now(), transport.DisconnectedAfter)
	if err != nil {
		return DeploymentView{}, err
	}
	return DeploymentView{Deployment: d, Blockers: blockers(d, st)}, nil
}

// deploymentAndStages reads a deployment and its stages after seq after as
// of one moment: a deployment read as over comes with the stage that ended
// it, and the stages come with the deployment's reason and supersededBy.
func (a *API) deploymentAndStages(ctx context.Context, c *call, id string, after int) (DeploymentView, []query.DeploymentStage, error) {
	tx, err := a.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return DeploymentView{}, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	v, err := a.deploymentView(ctx, tx, c, id)
	if err != nil {
		return v, nil, err
	}
	stages, err := query.DeploymentStages(ctx, tx, v.ID, after)
	return v, stages, err
}

func (a *API) getDeployment(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	v, stages, err := a.deploymentAndStages(ctx, c, r.PathValue("deployment"), 0)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, DeploymentDetail{DeploymentView: v, Stages: stages}, nil
}

// TargetView is a service in an environment: the service, its current
// release and latest deployment there, and whether its automatic deploys are
// paused (a rollback pauses them until someone resumes them).
type TargetView struct {
	Service          query.Service      `json:"service"`
	EnvironmentID    string             `json:"environmentId"`
	Environment      string             `json:"environment"`
	CurrentRelease   *query.Release     `json:"currentRelease,omitempty"`
	LatestDeployment *DeploymentView    `json:"latestDeployment,omitempty"`
	DeploysPaused    *query.DeployPause `json:"deploysPaused,omitempty"`
}

func (a *API) targetView(ctx context.Context, c *call) (TargetView, error) {
	v := TargetView{Service: c.service, EnvironmentID: c.env.ID, Environment: c.env.Name}
	rels, err := query.Releases(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return v, err
	}
	for i := range rels {
		if rels[i].Current {
			v.CurrentRelease = &rels[i]
		}
	}
	if d, err := a.deploymentView(ctx, a.pool, c, "latest"); err == nil {
		v.LatestDeployment = &d
	} else if !isNotFound(err) {
		return v, err
	}
	v.DeploysPaused, err = query.DeployPauseOf(ctx, a.pool, c.env.ID, c.service.ID)
	return v, err
}

func (a *API) getTarget(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	v, err := a.targetView(r.Context(), c)
	return http.StatusOK, v, err
}

func (a *API) resumeDeploys(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	if _, err := a.projectCommand(ctx, r, c, domain.ResumeDeploys{EnvironmentID: c.env.ID, ServiceID: c.service.ID}); err != nil {
		return 0, nil, err
	}
	v, err := a.targetView(ctx, c)
	return http.StatusOK, v, err
}

func (a *API) listAcknowledgements(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	acks, err := query.Acknowledgements(r.Context(), a.pool, c.env.ID)
	return http.StatusOK, acks, err
}

func (a *API) state(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	var rev projections.Revision
	var err error
	at := r.URL.Query().Get("at")
	switch {
	case at != "" && r.URL.Query().Get("revision") != "":
		return 0, nil, badRequest("give either revision or at, not both")
	case at != "":
		t, perr := time.Parse(time.RFC3339, at)
		if perr != nil {
			return 0, nil, badRequest("query parameter at must be an RFC 3339 time")
		}
		rev, err = projections.StateAt(ctx, a.pool, c.env.ID, t)
	default:
		n, qerr := intQuery(r, "revision", 0, 1, 1<<30)
		if qerr != nil {
			return 0, nil, qerr
		}
		rev, err = projections.RevisionNumber(ctx, a.pool, c.env.ID, n)
	}
	if errors.Is(err, projections.ErrNoRevision) {
		return 0, nil, notFound("revision")
	}
	if err != nil {
		return 0, nil, err
	}
	// The stored document carries secrets sealed; none are opened here.
	return http.StatusOK, rev, nil
}

func (a *API) listChangeSets(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	status := r.URL.Query().Get("status")
	switch status {
	case "", "open", "approved", "rejected", "expired":
	default:
		return 0, nil, badRequest("status must be open, approved, rejected or expired")
	}
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	cs, err := query.ChangeSetsAfter(r.Context(), a.pool, c.env.ID, status, after, c.page.limit+1)
	return http.StatusOK, cs, err
}

// ChangeSetView is a change set with what each of its changes changes.
type ChangeSetView struct {
	query.ChangeSet
	Diff []query.ChangeDiff `json:"diff"`
}

func (a *API) changeSetIn(ctx context.Context, c *call, id string) (query.ChangeSet, error) {
	cs, err := query.ChangeSetByID(ctx, a.pool, id)
	if err != nil && !isNotFound(err) {
		return cs, err
	}
	if err != nil || cs.EnvironmentID != c.env.ID {
		return cs, notFound("change set " + id)
	}
	return cs, nil
}

func (a *API) getChangeSet(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	cs, err := a.changeSetIn(ctx, c, r.PathValue("changeset"))
	if err != nil {
		return 0, nil, err
	}
	diff, err := query.ChangeSetDiff(ctx, a.pool, cs)
	return http.StatusOK, ChangeSetView{ChangeSet: cs, Diff: diff}, err
}

func (a *API) decideChangeSet(approve bool) func(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return func(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
		var req ChangeSetDecision
		if len(strings.TrimSpace(string(c.body))) > 0 {
			if err := decodeJSON(c.body, &req); err != nil {
				return 0, nil, err
			}
		}
		id := r.PathValue("changeset")
		ctx := r.Context()
		cs, err := a.changeSetIn(ctx, c, id)
		if err != nil {
			return 0, nil, err
		}
		var cmd domain.ProjectCommand = domain.RejectChangeSet{ChangeSetID: id, Reason: req.Reason}
		if approve {
			cmd = domain.ApproveChangeSet{ChangeSetID: id, Version: req.Version}
		}
		if _, err := a.projectCommand(ctx, r, c, cmd); err != nil {
			return 0, nil, err
		}
		cs, err = query.ChangeSetByID(ctx, a.pool, id)
		return http.StatusOK, cs, err
	}
}

// LogPage is a page of a service's container logs, in the envelope of
// every list. Logs are followed, so Next is always present: the position
// to continue from (pass it as ?cursor=), the same as the cursor asked for
// when no new line came.
type LogPage struct {
	Items []telemetry.LogLine `json:"items"`
	// Next is always present: where to continue following from.
	Next string `json:"next"`
}

func (a *API) logs(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	limit, err := intQuery(r, "limit", 200, 1, 5000)
	if err != nil {
		return 0, nil, err
	}
	after, err := seqCursor(r)
	if err != nil {
		return 0, nil, err
	}
	lines, err := a.cfg.Telemetry.Logs(r.Context(), c.env.ID, c.service.Name, after, limit)
	if err != nil {
		return 0, nil, err
	}
	if lines == nil {
		lines = []telemetry.LogLine{}
	}
	next := after
	if len(lines) > 0 {
		next = lines[len(lines)-1].ID
	}
	return http.StatusOK, LogPage{Items: lines, Next: strconv.FormatInt(next, 10)}, nil
}

func (a *API) workloads(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ws, err := query.Workloads(r.Context(), a.pool, c.env.ID)
	return http.StatusOK, ws, err
}
