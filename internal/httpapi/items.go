package httpapi

import (
	"context"
	"net/http"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/backup"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// Reads of single items whose collections are created into with 201: the
// Location of a created token, user, member, join token, domain or backup
// names one of these. Each answers 404 for an item the caller cannot see,
// with the scope of its collection's list.

// getToken is one of the caller's API tokens (never its secret); another
// user's token is not found.
func (a *API) getToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("token")
	t, _, err := query.TokenByID(r.Context(), a.pool, id)
	if err != nil {
		return 0, nil, named(err, "token "+id)
	}
	if t.UserID != c.principal.UserID {
		return 0, nil, notFound("token " + id)
	}
	return http.StatusOK, t, nil
}

// getUser is one user (instance administrator).
func (a *API) getUser(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("user")
	u, err := query.UserByID(r.Context(), a.pool, id)
	if err != nil {
		return 0, nil, named(err, "user "+id)
	}
	return http.StatusOK, u, nil
}

// getMember is one member of an organisation, by user id.
func (a *API) getMember(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("user")
	status, m, err := a.member(r.Context(), c.org.ID, id, http.StatusOK)
	if err != nil {
		return 0, nil, named(err, "member "+id)
	}
	return status, m, nil
}

// getJoinToken is one join token of a cluster (never its secret).
func (a *API) getJoinToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	t, err := a.joinTokenOf(r.Context(), c, r.PathValue("token"))
	return http.StatusOK, t, err
}

// joinTokenOf is a join token of the call's cluster, by id.
func (a *API) joinTokenOf(ctx context.Context, c *call, id string) (api.JoinToken, error) {
	toks, err := query.JoinTokens(ctx, a.pool, c.cluster.ID)
	if err != nil {
		return api.JoinToken{}, err
	}
	for _, t := range toks {
		if t.ID == id {
			return t, nil
		}
	}
	return api.JoinToken{}, notFound("join token " + id)
}

// getDomain is one host name routed to a service in an environment.
func (a *API) getDomain(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	d, err := a.domainOf(r.Context(), c, r.PathValue("host"))
	return http.StatusOK, d, err
}

// domainOf is a host name routed in the call's environment (to the call's
// service, when it names one).
func (a *API) domainOf(ctx context.Context, c *call, host string) (api.Domain, error) {
	host = strings.ToLower(host)
	ds, err := query.Domains(ctx, a.pool, c.env.ID, c.service.ID)
	if err != nil {
		return api.Domain{}, err
	}
	for _, d := range ds {
		if d.Host == host {
			return d, nil
		}
	}
	return api.Domain{}, notFound("domain " + host)
}

// getBackup is one control-plane backup, by its dump's file name
// (instance administrator).
func (a *API) getBackup(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if err := a.backupsConfigured(); err != nil {
		return 0, nil, err
	}
	name := r.PathValue("backup")
	ms, err := backup.List(a.cfg.Backup.Dir)
	if err != nil {
		return 0, nil, err
	}
	for _, m := range ms {
		if m.Dump == name {
			return http.StatusOK, backupView(m), nil
		}
	}
	return 0, nil, notFound("backup " + name)
}
