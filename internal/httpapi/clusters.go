package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
	"github.com/nebulactrl/nebulactrl/internal/reactions"
)

// joinTokenTTL is how long a join token lasts unless asked otherwise.
const joinTokenTTL = 24 * time.Hour

// clusterStatus is Connected while one of the cluster's servers is live at
// the API's clock (domain.Lease.Live).
func (a *API) clusterStatus(ctx context.Context, clusterID string) (api.ClusterStatus, error) {
	return query.StatusOfCluster(ctx, a.pool, clusterID, a.cfg.Now())
}

func (a *API) joinToken(hours int) (domain.IssueJoinToken, string, error) {
	if hours < 0 || hours > 720 {
		return domain.IssueJoinToken{}, "", errorf(http.StatusUnprocessableEntity, "validation_failed", "expiresInHours must be between 1 and 720")
	}
	ttl := joinTokenTTL
	if hours > 0 {
		ttl = time.Duration(hours) * time.Hour
	}
	id, tok, hash, err := newToken()
	if err != nil {
		return domain.IssueJoinToken{}, "", err
	}
	return domain.IssueJoinToken{TokenID: id, TokenHash: hash, ExpiresAt: a.cfg.Now().Add(ttl).UTC().Truncate(time.Second)}, tok, nil
}

func (a *API) listClusters(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	cl, err := query.Clusters(r.Context(), a.pool, c.org.ID)
	return http.StatusOK, cl, err
}

func (a *API) createCluster(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateClusterRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	jt, secret, err := a.joinToken(req.ExpiresInHours)
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	res, err := a.cmd.Cluster(ctx, commandContext(r, c), c.org.ID, id, domain.CreateCluster{ClusterID: id, OrgID: c.org.ID, Name: req.Name, JoinToken: jt})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	cl, err := query.ClusterByName(ctx, a.pool, c.org.ID, req.Name)
	if err != nil {
		return 0, nil, err
	}
	toks, err := query.JoinTokens(ctx, a.pool, id)
	if err != nil || len(toks) == 0 {
		return 0, nil, errors.Join(err, errors.New("the new cluster has no join token"))
	}
	return http.StatusCreated, api.ClusterResponse{Cluster: cl, Status: api.ClusterStatus{State: api.StateDisconnected}, JoinToken: &api.CreatedJoinToken{JoinToken: toks[0], Token: secret}}, nil
}

func (a *API) getCluster(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	st, err := a.clusterStatus(r.Context(), c.cluster.ID)
	return http.StatusOK, api.ClusterResponse{Cluster: c.cluster, Status: st}, err
}

func (a *API) revokeServer(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("server")
	if domain.ValidateID("server", id) != nil {
		return 0, nil, notFound("server " + id)
	}
	res, err := a.cmd.Cluster(r.Context(), commandContext(r, c), c.org.ID, c.cluster.ID, domain.RevokeServer{ServerID: id})
	if err != nil {
		return 0, nil, named(err, "server "+id)
	}
	// Every replica drops the server's connection when it sees the revocation.
	return http.StatusNoContent, nil, a.settle(r.Context(), res)
}

func (a *API) deleteCluster(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	envs, err := query.EnvironmentsOnCluster(ctx, a.pool, c.cluster.ID)
	if err != nil {
		return 0, nil, err
	}
	if len(envs) > 0 {
		return 0, nil, errorf(http.StatusConflict, "conflict", "cluster %s still runs %d environment(s); move or delete them first", c.cluster.Name, len(envs))
	}
	res, err := a.cmd.Cluster(ctx, commandContext(r, c), c.org.ID, c.cluster.ID, domain.DeleteCluster{})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, a.settle(ctx, res)
}

func (a *API) listJoinTokens(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	t, err := query.JoinTokens(r.Context(), a.pool, c.cluster.ID)
	return http.StatusOK, t, err
}

func (a *API) createJoinToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.JoinTokenRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	jt, secret, err := a.joinToken(req.ExpiresInHours)
	if err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	res, err := a.cmd.Cluster(ctx, commandContext(r, c), c.org.ID, c.cluster.ID, jt)
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	t, err := a.joinTokenOf(ctx, c, jt.TokenID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.CreatedJoinToken{JoinToken: t, Token: secret}, nil
}

func (a *API) revokeJoinToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("token")
	if domain.ValidateID("join token", id) != nil {
		return 0, nil, notFound("join token " + id)
	}
	res, err := a.cmd.Cluster(r.Context(), commandContext(r, c), c.org.ID, c.cluster.ID, domain.RevokeJoinToken{TokenID: id})
	if err != nil {
		return 0, nil, named(err, "join token "+id)
	}
	return http.StatusNoContent, nil, a.settle(r.Context(), res)
}

func (a *API) listServers(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	now := a.cfg.Now()
	s, err := query.Servers(r.Context(), a.pool, c.cluster.ID, now)
	if err != nil {
		return 0, nil, err
	}
	// Whether there is a binary for each agent's architecture: what an
	// upgrade needs, so that a client offers it only where it would work.
	binaries := reactions.BinaryHashes(a.agentBinaries())
	for i := range s {
		s[i].NoAgentBinary = binaries[s[i].Arch] == ""
	}
	return http.StatusOK, query.WithSkew(s, a.cfg.Version), nil
}

func (a *API) nodes(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	n, err := query.Nodes(r.Context(), a.pool, c.cluster.ID)
	return http.StatusOK, n, err
}

func (a *API) clusterEvents(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	e, err := query.ClusterEvents(r.Context(), a.pool, c.cluster.ID)
	return http.StatusOK, e, err
}
