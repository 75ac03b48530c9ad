package domain

import "time"

// WebhookDelivery is one push webhook delivery a project's endpoint
// accepted: a stream of its own, whose id derives from the project, the
// forge and the forge's delivery id, so that a redelivery finds the stream
// there and changes nothing. Its one event says what the delivery asked for
// and what came of it (builds, or ignored with the reason).
type WebhookDelivery struct {
	Exists bool
}

// DeliveryStream names a delivery's stream.
func DeliveryStream(id string) string { return "delivery-" + id }

// DeliveryID is the id of a forge's delivery to a project's endpoint.
func DeliveryID(projectID, provider, forgeDeliveryID string) string {
	return DeriveID("webhook-delivery", projectID, provider, forgeDeliveryID)
}

// NewWebhookDelivery returns the empty state of a delivery stream.
func NewWebhookDelivery() *WebhookDelivery { return &WebhookDelivery{} }

// Apply folds an event into the state.
func (w *WebhookDelivery) Apply(e Event) {
	if _, ok := e.(WebhookDeliveryRecorded); ok {
		w.Exists = true
	}
}

// DeliveryCommand is a command of the delivery aggregate.
type DeliveryCommand interface{ deliveryCommand() }

// RecordDelivery records a verified delivery. Recording it again (a
// redelivery) changes nothing.
type RecordDelivery struct {
	ProjectID  string
	Provider   string
	ForgeID    string
	Event      string
	Repository string
	Ref        string
	Branch     string
	Commit     string
	// Outcome is DeliveryBuilding with Builds, or DeliveryIgnored with Reason.
	Outcome string
	Reason  string
	Builds  []DeliveryBuild
}

func (RecordDelivery) deliveryCommand() {}

// Outcomes of a delivery.
const (
	DeliveryBuilding = "building"
	DeliveryIgnored  = "ignored"
	DeliveryPing     = "ping"
)

// DeliveryBuild is a build a push asks for: a service on a cluster, and the
// environments there that track the branch.
type DeliveryBuild struct {
	ServiceID    string   `json:"serviceId"`
	ClusterID    string   `json:"clusterId"`
	Environments []string `json:"environments"`
	// Repository, Dockerfile and Context are the service's source when the
	// delivery came (the clone URL the service names, not the payload's).
	Repository string `json:"repository,omitempty"`
	Dockerfile string `json:"dockerfile,omitempty"`
	Context    string `json:"context,omitempty"`
}

// Decide decides a delivery command.
func (w *WebhookDelivery) Decide(id string, cmd DeliveryCommand, m Meta) (Decision, error) {
	if err := m.Validate(); err != nil {
		return Decision{}, err
	}
	if err := ValidateID("delivery", id); err != nil {
		return Decision{}, err
	}
	c, ok := cmd.(RecordDelivery)
	if !ok {
		return Decision{}, invalidf("command %T is not a delivery command", cmd)
	}
	if w.Exists {
		return Decision{}, nil
	}
	if err := ValidateID("project", c.ProjectID); err != nil {
		return Decision{}, err
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"provider", c.Provider, 32}, {"delivery id", c.ForgeID, 200}, {"event", c.Event, 200}, {"repository", c.Repository, 2048},
		{"ref", c.Ref, 1024}, {"branch", c.Branch, 1024}, {"commit", c.Commit, 64}, {"reason", c.Reason, 1000}} {
		if err := ValidateText(f.name, f.v, f.max); err != nil {
			return Decision{}, err
		}
	}
	if c.ForgeID == "" {
		return Decision{}, invalidf("a delivery has an id")
	}
	switch c.Outcome {
	case DeliveryBuilding:
		if len(c.Builds) == 0 {
			return Decision{}, invalidf("a delivery that builds names its builds")
		}
		if err := ValidateCommit(c.Commit); err != nil {
			return Decision{}, err
		}
	case DeliveryIgnored, DeliveryPing:
		if len(c.Builds) > 0 {
			return Decision{}, invalidf("an ignored delivery builds nothing")
		}
	default:
		return Decision{}, invalidf("delivery outcome %q is unknown", c.Outcome)
	}
	for _, b := range c.Builds {
		if err := ValidateID("service", b.ServiceID); err != nil {
			return Decision{}, err
		}
		if err := ValidateID("cluster", b.ClusterID); err != nil {
			return Decision{}, err
		}
		if err := ValidateText("repository", b.Repository, 2048); err != nil {
			return Decision{}, err
		}
		if err := validateRepoPath("Dockerfile", b.Dockerfile); err != nil {
			return Decision{}, err
		}
		if err := validateRepoPath("build context", b.Context); err != nil {
			return Decision{}, err
		}
		for _, env := range b.Environments {
			if err := ValidateID("environment", env); err != nil {
				return Decision{}, err
			}
		}
	}
	builds := c.Builds
	if builds == nil {
		builds = []DeliveryBuild{}
	}
	return decided(WebhookDeliveryRecorded{DeliveryID: id, ProjectID: c.ProjectID, Provider: c.Provider, ForgeID: c.ForgeID,
		Event: c.Event, Repository: c.Repository, Ref: c.Ref, Branch: c.Branch, Commit: c.Commit, Outcome: c.Outcome,
		Reason: c.Reason, Builds: builds, At: m.Now}), nil
}

// WebhookDeliveryRecorded records a delivery and its outcome (webhook.delivery).
type WebhookDeliveryRecorded struct {
	DeliveryID string          `json:"deliveryId"`
	ProjectID  string          `json:"projectId"`
	Provider   string          `json:"provider"`
	ForgeID    string          `json:"forgeId"`
	Event      string          `json:"event"`
	Repository string          `json:"repository,omitempty"`
	Ref        string          `json:"ref,omitempty"`
	Branch     string          `json:"branch,omitempty"`
	Commit     string          `json:"commit,omitempty"`
	Outcome    string          `json:"outcome"`
	Reason     string          `json:"reason,omitempty"`
	Builds     []DeliveryBuild `json:"builds"`
	At         time.Time       `json:"at"`
}

func (WebhookDeliveryRecorded) EventType() string { return "webhook.delivery.recorded" }

// Project events of Git services.

// BranchTracked records the branch a Git service follows in an environment
// (None: it follows none, and pushes deploy nothing there).
type BranchTracked struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Branch        string `json:"branch,omitempty"`
	None          bool   `json:"none,omitempty"`
}

// WebhookSecretRotated records the project's push webhook secret, sealed;
// the previous one is accepted until PreviousUntil.
type WebhookSecretRotated struct {
	ProjectID     string       `json:"projectId"`
	Secret        SealedValue  `json:"secret"`
	Previous      *SealedValue `json:"previous,omitempty"`
	PreviousUntil *time.Time   `json:"previousUntil,omitempty"`
}

// DeployWaiting records an automatic deploy (a successful build of a
// tracked branch) that waits because a rollback paused automatic deploys;
// resuming them deploys it.
type DeployWaiting struct {
	EnvironmentID string `json:"environmentId"`
	ServiceID     string `json:"serviceId"`
	Image         string `json:"image"`
	BuildID       string `json:"buildId,omitempty"`
	ClusterID     string `json:"clusterId,omitempty"`
}

func (BranchTracked) EventType() string        { return "service.branch.tracked" }
func (WebhookSecretRotated) EventType() string { return "project.webhook.rotated" }
func (DeployWaiting) EventType() string        { return "service.deploy.waiting" }

// WebhookSecretGrace is how long the previous webhook secret is still
// accepted after a rotation: long enough to update the forge's settings.
const WebhookSecretGrace = 24 * time.Hour

// TrackBranch sets the branch a Git service follows in an environment.
type TrackBranch struct {
	EnvironmentID, ServiceID, Branch string
	None                             bool
}

// RotateWebhookSecret sets a new webhook secret (sealed by the caller).
type RotateWebhookSecret struct{ Secret SealedValue }

func (TrackBranch) projectCommand()         {}
func (RotateWebhookSecret) projectCommand() {}

// SystemOpener is who opened a change set that a system job opened (a
// build's automatic deploy into a protected environment): nobody in person,
// so any person with approvals:write may approve it.
const SystemOpener = "system"

func (p *Project) track(c TrackBranch) (Decision, error) {
	if _, err := p.environment(c.EnvironmentID); err != nil {
		return Decision{}, err
	}
	s, err := p.service(c.ServiceID)
	if err != nil {
		return Decision{}, err
	}
	if !s.Source.IsGit() {
		return Decision{}, invalidf("service %s deploys an image; only a Git service tracks a branch", s.Name)
	}
	if c.None == (c.Branch != "") {
		return Decision{}, invalidf("track names a branch, or none")
	}
	if !c.None {
		if err := ValidateBranch(c.Branch); err != nil {
			return Decision{}, err
		}
	}
	if t, ok := p.Tracking[c.EnvironmentID][c.ServiceID]; ok && t == (Track{Branch: c.Branch, None: c.None}) {
		return Decision{}, nil
	}
	return decided(BranchTracked{EnvironmentID: c.EnvironmentID, ServiceID: c.ServiceID, Branch: c.Branch, None: c.None}), nil
}

// resume lets automatic deploys happen again, and deploys the one that
// waited for it.
func (p *Project) resume(c ResumeDeploys, m Meta) (Decision, error) {
	env, err := p.environment(c.EnvironmentID)
	if err != nil {
		return Decision{}, err
	}
	svc, err := p.service(c.ServiceID)
	if err != nil {
		return Decision{}, err
	}
	if !p.Paused[env.ID][svc.ID] {
		return Decision{}, nil
	}
	w := &pending{p: p.clone()}
	w.emit(DeploymentsResumed{EnvironmentID: env.ID, ServiceID: svc.ID})
	if wait, ok := p.Waiting[env.ID][svc.ID]; ok {
		d := Deploy{EnvironmentID: env.ID, ServiceID: svc.ID, Image: wait.Image, BuildID: wait.BuildID, ClusterID: wait.ClusterID,
			ReleaseID: DeriveID(m.CommandID, "release"), DeploymentID: DeriveID(m.CommandID, "deployment")}
		if env.Protected {
			// Resuming needs no approval; what it deploys does.
			more, err := p.openChangeSet(env, Change{Deploy: &d}, m)
			if err != nil {
				return Decision{}, err
			}
			w.d.Events = append(w.d.Events, more.Events...)
			return w.d, nil
		}
		if err := w.apply(Change{Deploy: &d}, m); err != nil {
			return Decision{}, err
		}
	}
	return w.d, nil
}
