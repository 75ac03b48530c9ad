package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// deadline is the request's progress deadline, or current when it has none.
func deadline(req api.ServiceRequest, current int) int {
	if req.ProgressDeadlineSeconds != nil {
		return *req.ProgressDeadlineSeconds
	}
	return current
}

func (a *API) listServices(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	s, err := query.Services(r.Context(), a.pool, c.project.ID)
	return http.StatusOK, s, err
}

// processes turns the request's shorthand into processes.
func processes(req api.ServiceRequest, current []api.Process) []domain.Process {
	if len(req.Processes) > 0 {
		return domainProcesses(req.Processes)
	}
	procs := domainProcesses(current)
	if len(procs) == 0 {
		procs = []domain.Process{{Name: "web", Replicas: 1}}
	}
	out := procs
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
	var req api.ServiceRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"name": req.Name}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	src, err := a.sourceOf(ctx, c, req, domain.Source{})
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.projectCommand(ctx, r, c, domain.CreateService{ServiceID: id, Name: req.Name, Source: src, Processes: processes(req, nil),
		ProgressDeadlineSeconds: deadline(req, 0)}); err != nil {
		return 0, nil, err
	}
	s, err := query.ServiceByName(ctx, a.pool, c.project.ID, req.Name)
	return http.StatusCreated, s, err
}

// sourceOf is the service's source after the request: a new image or Git
// repository replaces the current source; a Git source's other fields and its
// credential change where the request names them. A credential is sealed
// here, before anything is decided.
func (a *API) sourceOf(ctx context.Context, c *call, req api.ServiceRequest, current domain.Source) (domain.Source, error) {
	src := current
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
	var req api.ServiceRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if req.Name != "" && req.Name != c.service.Name {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "a service cannot be renamed")
	}
	ctx := r.Context()
	current, err := query.ServiceSourceByID(ctx, a.pool, c.service.ID)
	if err != nil {
		return 0, nil, err
	}
	src, err := a.sourceOf(ctx, c, req, current)
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.projectCommand(ctx, r, c, domain.UpdateService{ServiceID: c.service.ID, Source: src, Processes: processes(req, c.service.Processes),
		ProgressDeadlineSeconds: deadline(req, c.service.ProgressDeadlineSeconds)}); err != nil {
		return 0, nil, err
	}
	s, err := query.ServiceByName(ctx, a.pool, c.project.ID, c.service.Name)
	return http.StatusOK, s, err
}

func (a *API) deleteService(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	return a.noContentOrChangeSet(r, c, domain.DeleteService{ServiceID: c.service.ID})
}

// domainProcesses are the API's processes as the domain takes them (a new
// slice: the caller may change it).
func domainProcesses(ps []api.Process) []domain.Process {
	out := make([]domain.Process, len(ps))
	for i, p := range ps {
		out[i] = domain.Process{Name: p.Name, Command: p.Command, Port: p.Port, Replicas: p.Replicas}
		if h := p.HealthCheck; h != nil {
			out[i].HealthCheck = &domain.HealthCheck{Path: h.Path, Port: h.Port, InitialDelaySeconds: h.InitialDelaySeconds, PeriodSeconds: h.PeriodSeconds}
		}
	}
	return out
}
