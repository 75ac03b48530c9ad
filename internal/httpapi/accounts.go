package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

func validatePassword(pw string) error {
	if len(pw) < 12 {
		return errorf(http.StatusUnprocessableEntity, "validation_failed", "a password needs at least 12 characters")
	}
	if len(pw) > 72 {
		return errorf(http.StatusUnprocessableEntity, "validation_failed", "a password has at most 72 bytes")
	}
	return nil
}

func (a *API) setup(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.SetupRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"email": req.Email, "password": req.Password, "organisation": req.Organisation}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	if n, err := query.CountUsers(ctx, a.pool); err != nil {
		return 0, nil, err
	} else if n > 0 {
		return 0, nil, errorf(http.StatusConflict, "setup_done", "this control plane is set up already; sign in instead")
	}
	if err := domain.ValidateName("organisation", req.Organisation); err != nil {
		return 0, nil, err
	}
	if err := validatePassword(req.Password); err != nil {
		return 0, nil, err
	}
	hash, err := a.hashPassword(ctx, req.Password)
	if err != nil {
		return 0, nil, err
	}
	userID, orgID := uuid.NewString(), uuid.NewString()
	email, err := domain.NormalizeEmail(req.Email)
	if err != nil {
		return 0, nil, err
	}
	actor := domain.Actor{Kind: domain.ActorUser, ID: userID, Name: email}
	cc := dispatch.Context{Actor: actor, Person: userID, RequestID: requestID(ctx)}
	// The first user claims the instance's setup: a concurrent setup loses.
	if _, err := a.cmd.User(ctx, cc, userID, domain.RegisterUser{UserID: userID, Email: email, Name: req.Name, PasswordHash: hash, InstanceAdmin: true, FirstUser: true}); err != nil {
		if toAPIError(err).status == http.StatusConflict {
			return 0, nil, errorf(http.StatusConflict, "setup_done", "this control plane is set up already; sign in instead")
		}
		return 0, nil, err
	}
	if _, err := a.cmd.Instance(ctx, cc, domain.SetAgentAutoUpgrade{Enabled: true}); err != nil {
		return 0, nil, err
	}
	if _, err := a.cmd.Organisation(ctx, cc, orgID, domain.CreateOrganisation{OrgID: orgID, Name: req.Organisation, Owner: userID}); err != nil {
		return 0, nil, err
	}
	tok, res, err := a.issueToken(ctx, cc, userID, "setup", domain.Scopes, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	user, err := query.UserByID(ctx, a.pool, userID)
	if err != nil {
		return 0, nil, err
	}
	org, err := query.OrganisationByName(ctx, a.pool, req.Organisation)
	if err != nil {
		return 0, nil, err
	}
	org.Role = string(domain.RoleOwner)
	return http.StatusCreated, api.SetupResponse{User: user, Organisation: org, Token: tok}, nil
}

func (a *API) issueToken(ctx context.Context, cc dispatch.Context, userID, name string, scopes []domain.Scope, expires *time.Time) (string, dispatch.Result, error) {
	id, tok, hash, err := newToken()
	if err != nil {
		return "", dispatch.Result{}, err
	}
	res, err := a.cmd.User(ctx, cc, userID, domain.CreateToken{TokenID: id, Name: name, Scopes: scopes, TokenHash: hash, ExpiresAt: expires})
	return tok, res, err
}

func (a *API) login(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.LoginRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"email": req.Email, "password": req.Password}); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	email := strings.ToLower(strings.TrimSpace(req.Email))
	client := clientAddress(r)
	// A place among the sign-ins being checked first: when there is none,
	// 429 at once, touching nothing.
	leave, err := a.gate.admit()
	if err != nil {
		return 0, nil, err
	}
	defer leave()
	if err := a.countLoginAttempt(ctx, email, client); err != nil {
		return 0, nil, err
	}
	userID, hash, err := query.Credentials(ctx, a.pool, email)
	if err != nil && !isNotFound(err) {
		a.uncountLoginAttempt(ctx, email, client, false)
		return 0, nil, err
	}
	if err != nil {
		// Spend the same time as a wrong password, so that timing does not
		// tell which addresses have accounts.
		userID, hash = "", dummyHash
	}
	ok, err := a.checkPassword(ctx, hash, req.Password)
	if err != nil {
		a.uncountLoginAttempt(ctx, email, client, false)
		return 0, nil, err
	}
	if !ok || userID == "" {
		return 0, nil, unauthorized("wrong e-mail address or password")
	}
	a.uncountLoginAttempt(ctx, email, client, true)
	user, err := query.UserByID(ctx, a.pool, userID)
	if err != nil {
		return 0, nil, err
	}
	// A session acts with the user's roles; its scopes only record them.
	scopes := make([]domain.Scope, 0, len(domain.Scopes))
	for _, s := range domain.Scopes {
		if s != domain.ScopeInstanceAdmin || user.InstanceAdmin {
			scopes = append(scopes, s)
		}
	}
	expires := a.cfg.Now().Add(a.cfg.SessionTTL).UTC().Truncate(time.Second)
	cc := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorUser, ID: userID, Name: email}, Person: userID, RequestID: requestID(ctx)}
	tok, res, err := a.issueToken(ctx, cc, userID, query.SessionPrefix+"console", scopes, &expires)
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.SessionResponse{Token: tok, ExpiresAt: expires, User: user}, nil
}

func (a *API) logout(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	res, err := a.cmd.User(r.Context(), commandContext(r, c), c.principal.UserID, domain.RevokeToken{TokenID: c.tokenID})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, a.settle(r.Context(), res)
}

func (a *API) me(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	user, err := query.UserByID(ctx, a.pool, c.principal.UserID)
	if err != nil {
		return 0, nil, err
	}
	orgs, err := query.OrganisationsOfUser(ctx, a.pool, user.ID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, api.MeResponse{User: user, Organisations: orgs, Scopes: scopeNames(c.principal.TokenScopes)}, nil
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	toks, err := query.TokensOfUser(r.Context(), a.pool, c.principal.UserID)
	return http.StatusOK, toks, err
}

func (a *API) createToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateTokenRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"name": req.Name}); err != nil {
		return 0, nil, err
	}
	if strings.HasPrefix(req.Name, "session:") {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "token names may not start with session:")
	}
	scopes, err := domain.ParseScopes(req.Scopes)
	if err != nil {
		return 0, nil, err
	}
	// A token never carries more than the token that makes it.
	for _, s := range scopes {
		if c.principal.TokenScopes != nil && !containsScope(c.principal.TokenScopes, s) {
			return 0, nil, errorf(http.StatusForbidden, "forbidden", "the token in use lacks the scope %s, so it cannot grant it", s)
		}
	}
	if req.ExpiresInDays < 0 || req.ExpiresInDays > 3650 {
		return 0, nil, errorf(http.StatusUnprocessableEntity, "validation_failed", "expiresInDays must be between 1 and 3650")
	}
	var expires *time.Time
	if req.ExpiresInDays > 0 {
		t := a.cfg.Now().Add(time.Duration(req.ExpiresInDays) * 24 * time.Hour).UTC().Truncate(time.Second)
		expires = &t
	}
	ctx := r.Context()
	tok, res, err := a.issueToken(ctx, commandContext(r, c), c.principal.UserID, req.Name, scopes, expires)
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	created := res.Events[0].(domain.TokenCreated)
	t, _, err := query.TokenByID(ctx, a.pool, created.TokenID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusCreated, api.CreatedToken{Token: t, Secret: tok}, nil
}

func containsScope(list []domain.Scope, s domain.Scope) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	id := r.PathValue("token")
	if domain.ValidateID("token", id) != nil {
		return 0, nil, notFound("token " + id)
	}
	res, err := a.cmd.User(r.Context(), commandContext(r, c), c.principal.UserID, domain.RevokeToken{TokenID: id})
	if err != nil {
		return 0, nil, named(err, "token "+id)
	}
	return http.StatusNoContent, nil, a.settle(r.Context(), res)
}

func (a *API) listUsers(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	users, err := query.Users(r.Context(), a.pool)
	return http.StatusOK, users, err
}

func (a *API) createUser(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateUserRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"email": req.Email, "password": req.Password}); err != nil {
		return 0, nil, err
	}
	if err := validatePassword(req.Password); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	hash, err := a.hashPassword(ctx, req.Password)
	if err != nil {
		return 0, nil, err
	}
	id := uuid.NewString()
	res, err := a.cmd.User(ctx, commandContext(r, c), id, domain.RegisterUser{UserID: id, Email: req.Email, Name: req.Name, PasswordHash: hash, InstanceAdmin: req.InstanceAdmin})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	u, err := query.UserByID(ctx, a.pool, id)
	return http.StatusCreated, u, err
}

func (a *API) listOrganisations(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	orgs, err := query.OrganisationsOfUser(r.Context(), a.pool, c.principal.UserID)
	return http.StatusOK, orgs, err
}

func (a *API) createOrganisation(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.CreateOrganisationRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	id := uuid.NewString()
	res, err := a.cmd.Organisation(ctx, commandContext(r, c), id, domain.CreateOrganisation{OrgID: id, Name: req.Name, Owner: c.principal.UserID})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	org, err := query.OrganisationByName(ctx, a.pool, req.Name)
	org.Role = string(domain.RoleOwner)
	return http.StatusCreated, org, err
}

func (a *API) getOrganisation(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	org := c.org
	org.Role = string(c.principal.Roles[org.ID])
	return http.StatusOK, org, nil
}

func (a *API) listMembers(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	m, err := query.Members(r.Context(), a.pool, c.org.ID)
	return http.StatusOK, m, err
}

func (a *API) addMember(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.AddMemberRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if err := required(map[string]string{"email": req.Email, "role": req.Role}); err != nil {
		return 0, nil, err
	}
	role, err := domain.ParseRole(req.Role)
	if err != nil {
		return 0, nil, err
	}
	if err := a.mayGrant(c, role); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	user, err := query.UserByEmail(ctx, a.pool, req.Email)
	if err != nil {
		return 0, nil, named(err, "user "+req.Email)
	}
	res, err := a.cmd.Organisation(ctx, commandContext(r, c), c.org.ID, domain.AddMember{UserID: user.ID, Role: role})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	return a.member(ctx, c.org.ID, user.ID, http.StatusCreated)
}

// mayGrant keeps an Admin from making Owners: only Owners do.
func (a *API) mayGrant(c *call, role domain.Role) error {
	if role == domain.RoleOwner && c.principal.Roles[c.org.ID] != domain.RoleOwner {
		return errorf(http.StatusForbidden, "forbidden", "only an owner can make someone an owner")
	}
	return nil
}

func (a *API) member(ctx context.Context, orgID, userID string, status int) (int, any, error) {
	members, err := query.Members(ctx, a.pool, orgID)
	if err != nil {
		return 0, nil, err
	}
	for _, m := range members {
		if m.UserID == userID {
			return status, m, nil
		}
	}
	return 0, nil, notFound("member")
}

func (a *API) changeMember(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.ChangeRoleRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	role, err := domain.ParseRole(req.Role)
	if err != nil {
		return 0, nil, err
	}
	if err := a.mayGrant(c, role); err != nil {
		return 0, nil, err
	}
	userID := r.PathValue("user")
	if domain.ValidateID("user", userID) != nil {
		return 0, nil, notFound("member " + userID)
	}
	ctx := r.Context()
	res, err := a.cmd.Organisation(ctx, commandContext(r, c), c.org.ID, domain.ChangeMemberRole{UserID: userID, Role: role})
	if err != nil {
		return 0, nil, err
	}
	c.version = res.Version
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	return a.member(ctx, c.org.ID, userID, http.StatusOK)
}

func (a *API) removeMember(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	userID := r.PathValue("user")
	if domain.ValidateID("user", userID) != nil {
		return 0, nil, notFound("member " + userID)
	}
	res, err := a.cmd.Organisation(r.Context(), commandContext(r, c), c.org.ID, domain.RemoveMember{UserID: userID})
	if err != nil {
		return 0, nil, err
	}
	return http.StatusNoContent, nil, a.settle(r.Context(), res)
}

func (a *API) getSettings(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	s, err := query.Settings(r.Context(), a.pool)
	return http.StatusOK, s, err
}

func (a *API) updateSettings(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.SettingsRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	if req.AgentAutoUpgrade == nil {
		return 0, nil, badRequest("missing required field(s): agentAutoUpgrade")
	}
	ctx := r.Context()
	res, err := a.cmd.Instance(ctx, commandContext(r, c), domain.SetAgentAutoUpgrade{Enabled: *req.AgentAutoUpgrade})
	if err != nil {
		return 0, nil, err
	}
	c.version = res.Version
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	s, err := query.Settings(ctx, a.pool)
	return http.StatusOK, s, err
}

func (a *API) audit(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	f := query.AuditFilter{OrgID: c.org.ID, Action: r.URL.Query().Get("action"), ActorID: r.URL.Query().Get("actor"), Target: r.URL.Query().Get("target")}
	for name, dst := range map[string]**time.Time{"since": &f.Since, "until": &f.Until} {
		if v := r.URL.Query().Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return 0, nil, badRequest("query parameter %s must be an RFC 3339 time", name)
			}
			*dst = &t
		}
	}
	limit, err := intQuery(r, "limit", 100, 1, 1000)
	if err != nil {
		return 0, nil, err
	}
	after, err := seqCursor(r)
	if err != nil {
		return 0, nil, err
	}
	f.Limit, f.After = limit, after
	switch r.URL.Query().Get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return 0, nil, badRequest("query parameter order must be oldest or newest")
	}
	rows, next, err := query.Audit(r.Context(), a.pool, f)
	if err != nil {
		return 0, nil, err
	}
	page := api.AuditPage{Items: rows}
	if next != 0 {
		page.Next = strconv.FormatInt(next, 10)
	}
	return http.StatusOK, page, nil
}

// seqCursor reads ?cursor= of a list paged by sequence number (the audit
// log, a service's logs): the next of the previous page, 0 without one.
func seqCursor(r *http.Request) (int64, error) {
	raw := r.URL.Query().Get("cursor")
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("query parameter cursor is not a cursor this API gave (use the next of the previous page)")
	}
	return n, nil
}

// scopeNames are the scopes as the API names them.
func scopeNames(scopes []domain.Scope) []string {
	if scopes == nil {
		return nil
	}
	out := make([]string, len(scopes))
	for i, s := range scopes {
		out[i] = string(s)
	}
	return out
}
