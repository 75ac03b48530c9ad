package forge

import "encoding/json"

// GitLab's secret token is sent as it is in X-Gitlab-Token, with the event
// in X-Gitlab-Event ("Push Hook", "Tag Push Hook", ...) and the delivery
// in X-Gitlab-Event-UUID (docs.gitlab.com, "Webhooks" and "Webhook
// events"). It proves only that the sender knows the token: it signs
// neither the body nor a time.
var gitlabTokenSource = source{
	provider:  GitLab,
	signature: hdrGitLabToken,
	delivery:  "X-Gitlab-Event-UUID",
	event:     "X-Gitlab-Event",
	check:     checkGitLabToken,
	parse:     parseGitLabEvent,
}

// GitLab's signing token (new, first behind the webhook_signing_token
// feature flag: gitlab-org/gitlab merge request 230944) signs the delivery
// the Standard Webhooks way (see checkStandard); webhook-id, the same
// value as Idempotency-Key, is the delivery id.
var gitlabSignedSource = source{
	provider:  GitLab,
	signature: hdrStandardSignature,
	delivery:  "Webhook-Id",
	event:     "X-Gitlab-Event",
	check:     checkStandard,
	parse:     parseGitLabEvent,
}

// gitlabEvents maps the event header of pushes to Delivery.Event and the
// object_kind the body must then have.
var gitlabEvents = map[string]string{
	"Push Hook":     "push",
	"Tag Push Hook": "tag_push",
}

func parseGitLabEvent(event string, body []byte) (string, *Push, error) {
	kind, isPush := gitlabEvents[event]
	if event == "System Hook" {
		// Instance-wide hooks send every event under one header; the
		// body's object_kind tells pushes apart.
		var k struct {
			ObjectKind string `json:"object_kind"`
		}
		if err := json.Unmarshal(body, &k); err != nil {
			return "", nil, fail(ErrPayload, "system hook: %v", err)
		}
		if k.ObjectKind == "push" || k.ObjectKind == "tag_push" {
			kind, isPush = k.ObjectKind, true
		}
	}
	if !isPush {
		return otherEvent(event, body)
	}
	p, err := parseGitLabPush(kind, body)
	return kind, p, err
}

// gitlabPush is GitLab's push and tag push payload. The repository object
// is the deprecated copy of project, read only when project is missing.
type gitlabPush struct {
	ObjectKind   string  `json:"object_kind"`
	Ref          string  `json:"ref"`
	Before       string  `json:"before"`
	After        string  `json:"after"`
	CheckoutSHA  *string `json:"checkout_sha"`
	UserUsername string  `json:"user_username"`
	UserName     string  `json:"user_name"`
	Project      *struct {
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		WebURL     string `json:"web_url"`
	} `json:"project"`
	Repository *struct {
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		Homepage   string `json:"homepage"`
	} `json:"repository"`
	Commits []struct {
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"commits"`
}

func parseGitLabPush(kind string, body []byte) (*Push, error) {
	var p gitlabPush
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fail(ErrPayload, "push: %v", err)
	}
	if p.ObjectKind != "" && p.ObjectKind != kind {
		return nil, fail(ErrPayload, "object_kind does not match the event header")
	}
	// For an annotated tag, after is the tag object and checkout_sha the
	// commit it points at, which is the head a deployment wants; for a
	// branch they are equal. checkout_sha is null for a deletion.
	after := p.After
	if p.CheckoutSHA != nil && *p.CheckoutSHA != "" && !isZero(p.After) {
		after = *p.CheckoutSHA
	}
	// commits holds at most 20, oldest first, ending with the new head;
	// the commit with the head's id is preferred in case that changes.
	msg := ""
	for _, c := range p.Commits {
		if c.ID == after {
			msg = c.Message
		}
	}
	if msg == "" && len(p.Commits) > 0 {
		msg = p.Commits[len(p.Commits)-1].Message
	}
	c, err := change(p.Ref, p.Before, after, false, msg)
	if err != nil {
		return nil, err
	}
	repo := ""
	if p.Project != nil {
		repo = firstNonEmpty(p.Project.GitHTTPURL, p.Project.GitSSHURL, p.Project.WebURL)
	}
	if repo == "" && p.Repository != nil {
		repo = firstNonEmpty(p.Repository.GitHTTPURL, p.Repository.GitSSHURL, p.Repository.Homepage)
	}
	return newPush(repo, firstNonEmpty(p.UserUsername, p.UserName), []Change{c})
}
