package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

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
