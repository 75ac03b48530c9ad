package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/forge"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// Builds from Git: the projects' push webhook endpoints, the builds and
// their logs, the branch each Git service tracks, and deploying a Git
// service (which builds).

// HookPath is where a project's push webhook is delivered: HookPath + the
// project's id.
const HookPath = "/api/v1/hooks/git/"

// maxHookBody bounds a webhook's body: forges send pushes of a few KiB to
// a few hundred; more is refused (413) before anything is read further.
const maxHookBody = 1 << 20

func (a *API) hookURL(projectID string) string {
	return strings.TrimSuffix(a.cfg.PublicURL, "/") + HookPath + projectID
}

func (a *API) webhookInfo(ctx context.Context, projectID string) (api.WebhookInfo, error) {
	info := api.WebhookInfo{URL: a.hookURL(projectID), ContentType: "application/json"}
	w, err := query.ProjectWebhook(ctx, a.pool, projectID)
	if errors.Is(err, query.ErrNotFound) {
		return info, nil
	}
	if err != nil {
		return info, err
	}
	info.SecretSet, info.RotatedAt, info.PreviousUntil = true, &w.RotatedAt, w.PreviousUntil
	if w.PreviousUntil != nil && !w.PreviousUntil.After(a.cfg.Now()) {
		info.PreviousUntil = nil
	}
	return info, nil
}

func (a *API) getWebhook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	info, err := a.webhookInfo(r.Context(), c.project.ID)
	return http.StatusOK, info, err
}

// rotateWebhook makes a new secret (the first, or the next: the one before
// is accepted for domain.WebhookSecretGrace), shown this once.
func (a *API) rotateWebhook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return 0, nil, err
	}
	secret := "nbh_" + base64.RawURLEncoding.EncodeToString(raw)
	sealed, err := a.cfg.Sealer.Seal(ctx, c.org.ID, []byte(secret))
	if err != nil {
		return 0, nil, err
	}
	if _, err := a.projectCommand(ctx, r, c, domain.RotateWebhookSecret{Secret: sealed}); err != nil {
		return 0, nil, err
	}
	info, err := a.webhookInfo(ctx, c.project.ID)
	return http.StatusOK, api.WebhookSecret{WebhookInfo: info, Secret: secret}, err
}

func (a *API) listDeliveries(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	d, err := query.DeliveriesAfter(r.Context(), a.pool, c.project.ID, after, c.page.limit+1)
	return http.StatusOK, d, err
}

// receiveHook takes a forge's delivery: verified over the raw body against
// the project's secrets before anything else is read, recorded once per
// delivery id, and answered with what came of it.
func (a *API) receiveHook(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxHookBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return 0, nil, errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the webhook's body is larger than %d bytes", maxHookBody)
	}
	if err != nil {
		return 0, nil, badRequest("reading the webhook's body: %v", err)
	}
	// An unknown project and a project without a secret answer as a bad
	// signature does: the URL alone proves nothing.
	unauthorized := errorf(http.StatusUnauthorized, "bad_signature", "the webhook's signature does not match this project's secret")
	project, err := query.ProjectOfWebhook(ctx, a.pool, r.PathValue("hook"))
	if errors.Is(err, query.ErrNotFound) {
		return 0, nil, unauthorized
	}
	if err != nil {
		return 0, nil, err
	}
	hook, err := query.ProjectWebhook(ctx, a.pool, project.ID)
	if errors.Is(err, query.ErrNotFound) {
		return 0, nil, unauthorized
	}
	if err != nil {
		return 0, nil, err
	}
	secrets, err := a.openHookSecrets(ctx, hook)
	if err != nil {
		return 0, nil, err
	}
	d, err := forge.Verifier{Secrets: secrets, Now: a.cfg.Now}.Verify(r.Header, body)
	switch {
	case errors.Is(err, forge.ErrUnsigned):
		return 0, nil, errorf(http.StatusUnauthorized, "unsigned", "the webhook carries no signature this endpoint knows (%v)", err)
	case errors.Is(err, forge.ErrBadSignature):
		return 0, nil, unauthorized
	case errors.Is(err, forge.ErrPayload), errors.Is(err, forge.ErrNoDeliveryID):
		return 0, nil, badRequest("%v", err)
	case err != nil:
		return 0, nil, err
	}
	cmd, err := a.deliveryOutcome(ctx, project, d)
	if err != nil {
		return 0, nil, err
	}
	id := domain.DeliveryID(project.ID, string(d.Provider), d.ID)
	cc := dispatch.Context{Actor: domain.Actor{Kind: domain.ActorSystem, ID: "webhook", Name: string(d.Provider) + " webhook"}, RequestID: requestID(ctx)}
	res, err := a.cmd.Delivery(ctx, cc, project.OrgID, id, cmd)
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	if len(res.Events) == 0 {
		return http.StatusOK, api.HookResponse{Outcome: "duplicate", Reason: "this delivery was received before", DeliveryID: id}, nil
	}
	resp := api.HookResponse{Outcome: cmd.Outcome, Reason: cmd.Reason, DeliveryID: id}
	for _, b := range cmd.Builds {
		resp.Builds = append(resp.Builds, domain.BuildID(b.ServiceID, cmd.Commit, b.ClusterID))
	}
	return http.StatusOK, resp, nil
}

func (a *API) openHookSecrets(ctx context.Context, w query.Webhook) (forge.Secrets, error) {
	cur, err := a.cfg.Sealer.Open(ctx, w.Secret)
	if err != nil {
		return nil, err
	}
	secrets := forge.Secrets{cur}
	if w.Previous != nil && w.PreviousUntil != nil && a.cfg.Now().Before(*w.PreviousUntil) {
		prev, err := a.cfg.Sealer.Open(ctx, *w.Previous)
		if err != nil {
			return nil, err
		}
		secrets = append(secrets, prev)
	}
	return secrets, nil
}

// deliveryOutcome decides what a verified delivery asks for: builds of
// the project's Git services that build from the pushed repository, on each
// cluster with environments that track the pushed branch (matched exactly),
// or ignored with the reason.
func (a *API) deliveryOutcome(ctx context.Context, project api.Project, d forge.Delivery) (domain.RecordDelivery, error) {
	cmd := domain.RecordDelivery{ProjectID: project.ID, Provider: string(d.Provider), ForgeID: d.ID, Event: d.Event}
	ignore := func(reason string) (domain.RecordDelivery, error) {
		cmd.Outcome, cmd.Reason = domain.DeliveryIgnored, reason
		return cmd, nil
	}
	if d.Event == "ping" {
		cmd.Outcome = domain.DeliveryPing
		return cmd, nil
	}
	p := d.Push
	if p == nil {
		return ignore("event " + d.Event + " is not a push")
	}
	cmd.Repository, cmd.Ref, cmd.Branch = p.Repository, p.Ref, p.Branch
	if !p.Deleted {
		cmd.Commit = p.After
	}
	switch {
	case p.Tag != "":
		return ignore("tag pushes are not built (tag " + p.Tag + ")")
	case p.Deleted:
		return ignore("branch " + p.Branch + " was deleted")
	case p.Branch == "":
		return ignore("ref " + p.Ref + " is not a branch")
	}
	services, err := query.Services(ctx, a.pool, project.ID)
	if err != nil {
		return cmd, err
	}
	envs, err := query.Environments(ctx, a.pool, project.ID)
	if err != nil {
		return cmd, err
	}
	tracking, err := query.ProjectTracking(ctx, a.pool, project.ID)
	if err != nil {
		return cmd, err
	}
	fromRepo := false
	for _, s := range services {
		if s.Source.GitURL == "" || !forge.SameRepository(s.Source.GitURL, p.Repository) {
			continue
		}
		fromRepo = true
		byCluster := map[string]int{}
		for _, env := range envs {
			if query.TrackedBranch(tracking, env.ID, s) != p.Branch {
				continue
			}
			i, ok := byCluster[env.ClusterID]
			if !ok {
				i = len(cmd.Builds)
				byCluster[env.ClusterID] = i
				cmd.Builds = append(cmd.Builds, domain.DeliveryBuild{ServiceID: s.ID, ClusterID: env.ClusterID,
					Repository: s.Source.GitURL, Dockerfile: s.Source.Dockerfile, Context: s.Source.Context})
			}
			cmd.Builds[i].Environments = append(cmd.Builds[i].Environments, env.ID)
		}
	}
	switch {
	case !fromRepo:
		return ignore("no service of this project builds from " + p.Repository)
	case len(cmd.Builds) == 0:
		return ignore("no environment tracks branch " + p.Branch)
	}
	cmd.Outcome = domain.DeliveryBuilding
	return cmd, nil
}

func (a *API) track(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	var req api.TrackRequest
	if err := decodeJSON(c.body, &req); err != nil {
		return 0, nil, err
	}
	ctx := r.Context()
	if _, err := a.projectCommand(ctx, r, c, domain.TrackBranch{EnvironmentID: c.env.ID, ServiceID: c.service.ID, Branch: req.Branch, None: req.None}); err != nil {
		return 0, nil, err
	}
	return a.getTracking(w, r, c)
}

func (a *API) getTracking(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	if c.service.Source.GitURL == "" {
		return 0, nil, notFound("service " + c.service.Name + " deploys an image: it tracks no branch")
	}
	ts, err := query.ProjectTracking(r.Context(), a.pool, c.project.ID)
	if err != nil {
		return 0, nil, err
	}
	b := query.TrackedBranch(ts, c.env.ID, c.service)
	return http.StatusOK, api.TrackingView{Branch: b, Untracked: b == ""}, nil
}

func (a *API) listBuilds(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	after, err := c.keysetPage()
	if err != nil {
		return 0, nil, err
	}
	serviceID := ""
	if name := r.URL.Query().Get("service"); name != "" {
		s, err := query.ServiceByName(r.Context(), a.pool, c.project.ID, name)
		if err != nil {
			return 0, nil, named(err, "service "+name)
		}
		serviceID = s.ID
	}
	b, err := query.BuildsAfter(r.Context(), a.pool, c.project.ID, serviceID, after, c.page.limit+1)
	return http.StatusOK, b, err
}

func (a *API) getBuild(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	b, err := query.BuildByID(r.Context(), a.pool, c.org.ID, r.PathValue("build"))
	return http.StatusOK, b, named(err, "build "+r.PathValue("build"))
}

func (a *API) cancelBuild(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	b, err := query.BuildByID(ctx, a.pool, c.org.ID, r.PathValue("build"))
	if err != nil {
		return 0, nil, named(err, "build "+r.PathValue("build"))
	}
	res, err := a.cmd.Build(ctx, commandContext(r, c), c.org.ID, b.ID, domain.CancelBuild{Reason: "cancelled by " + c.actor.Name})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	b, err = query.BuildByID(ctx, a.pool, c.org.ID, b.ID)
	return http.StatusOK, b, err
}

func (a *API) buildLogs(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	b, err := query.BuildByID(r.Context(), a.pool, c.org.ID, r.PathValue("build"))
	if err != nil {
		return 0, nil, named(err, "build "+r.PathValue("build"))
	}
	limit, err := intQuery(r, "limit", 1000, 1, 5000)
	if err != nil {
		return 0, nil, err
	}
	after, err := seqCursor(r)
	if err != nil {
		return 0, nil, err
	}
	lines, err := a.cfg.Telemetry.BuildLogs(r.Context(), b.ID, after, limit)
	if err != nil {
		return 0, nil, err
	}
	next := after
	if len(lines) > 0 {
		next = lines[len(lines)-1].ID
	}
	return http.StatusOK, api.BuildLogPage{Items: lines, Next: strconv.FormatInt(next, 10)}, nil
}

// buildLogEvents streams a build's output: a "build" snapshot first, a
// "line" event per line (id: the line's id; resume with Last-Event-ID), a
// "build" event when its status changes, and the stream closes once the
// build is over and its last lines are sent.
func (a *API) buildLogEvents(w http.ResponseWriter, r *http.Request, c *call) (int, any, error) {
	ctx := r.Context()
	after, _, err := lastEventID(r)
	if err != nil {
		return 0, nil, err
	}
	b, err := query.BuildByID(ctx, a.pool, c.org.ID, r.PathValue("build"))
	if err != nil {
		return 0, nil, named(err, "build "+r.PathValue("build"))
	}
	s, err := startStream(w)
	if err != nil {
		return http.StatusOK, nil, nil
	}
	if err := s.event("build", "", b); err != nil {
		return http.StatusOK, nil, nil
	}
	status := b.Status
	a.follow(ctx, r, c.route, s, func(ctx context.Context) (bool, error) {
		// The status first: lines read after a build is over are its last.
		cur, err := query.BuildByID(ctx, a.pool, c.org.ID, b.ID)
		if err != nil {
			return false, err
		}
		for {
			lines, err := a.cfg.Telemetry.BuildLogs(ctx, b.ID, after, 1000)
			if err != nil {
				return false, err
			}
			for _, l := range lines {
				if err := s.event("line", strconv.FormatInt(l.ID, 10), l); err != nil {
					return true, nil
				}
				after = l.ID
			}
			if len(lines) < 1000 {
				break
			}
			s.recheck() // the next page is read later
		}
		if cur.Status != status {
			status = cur.Status
			if err := s.event("build", "", cur); err != nil {
				return true, nil
			}
		}
		return domain.BuildStatus(cur.Status).Terminal(), nil
	})
	return http.StatusOK, nil, nil
}

// deployGit deploys a Git service: the succeeded build of the commit on the
// environment's cluster when there is one, or a new build that deploys
// there when it succeeds. The commit is the one asked for, or the tracked
// branch's head as the last push said (without one, the cluster builds the
// branch's head as it finds it).
func (a *API) deployGit(ctx context.Context, r *http.Request, c *call, req api.DeployRequest) (int, any, error) {
	commit := strings.TrimSpace(req.Commit)
	if commit != "" {
		if err := domain.ValidateCommit(commit); err != nil {
			return 0, nil, err
		}
	}
	ts, err := query.ProjectTracking(ctx, a.pool, c.project.ID)
	if err != nil {
		return 0, nil, err
	}
	branch := query.TrackedBranch(ts, c.env.ID, c.service)
	if branch == "" {
		branch = c.service.Source.GitBranch
	}
	if commit == "" {
		if commit, err = query.LastPushedCommit(ctx, a.pool, c.project.ID, branch); err != nil {
			return 0, nil, err
		}
	}
	if commit != "" {
		b, err := query.SucceededBuild(ctx, a.pool, c.service.ID, commit, c.env.ClusterID)
		switch {
		case err == nil:
			cmd := domain.Deploy{EnvironmentID: c.env.ID, ServiceID: c.service.ID, ReleaseID: uuid.NewString(), DeploymentID: uuid.NewString(),
				Image: b.Image + "@" + b.Digest, BuildID: b.ID, ClusterID: b.ClusterID}
			res, err := a.projectCommand(ctx, r, c, cmd)
			if err != nil {
				return 0, nil, err
			}
			st, body, err := a.deployResponse(ctx, res, cmd.DeploymentID)
			if resp, ok := body.(api.DeployResponse); ok {
				resp.Build = &b
				body = resp
			}
			return st, body, err
		case !errors.Is(err, query.ErrNotFound):
			return 0, nil, err
		}
	}
	id := uuid.NewString()
	if commit != "" {
		id = domain.BuildID(c.service.ID, commit, c.env.ClusterID)
	}
	src := c.service.Source
	res, err := a.cmd.Build(ctx, commandContext(r, c), c.org.ID, id, domain.QueueBuild{ProjectID: c.project.ID, ServiceID: c.service.ID,
		ClusterID: c.env.ClusterID, Repository: src.GitURL, Branch: branch, Commit: commit, Dockerfile: src.Dockerfile, Context: src.Context,
		Environments: []string{c.env.ID}, Trigger: "deploy", Timeout: a.cfg.BuildTimeout})
	if err != nil {
		return 0, nil, err
	}
	if err := a.settle(ctx, res); err != nil {
		return 0, nil, err
	}
	b, err := query.BuildByID(ctx, a.pool, c.org.ID, id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, api.DeployResponse{Build: &b}, nil
}
