package forge

import "encoding/json"

// GitHub signs with X-Hub-Signature-256: "sha256=" and the hex
// HMAC-SHA256 of the body keyed by the hook's secret, and names the event
// in X-GitHub-Event and the delivery in X-GitHub-Delivery
// (docs.github.com, "Validating webhook deliveries" and "Webhook events
// and payloads"). Its older X-Hub-Signature is HMAC-SHA1 and not accepted.
var githubSource = source{
	provider:  GitHub,
	signature: hdrHubSignature256,
	delivery:  "X-GitHub-Delivery",
	event:     hdrGitHubEvent,
	check:     checkHex(hdrHubSignature256, "sha256="),
	parse:     parseGitHubEvent,
}

func parseGitHubEvent(event string, body []byte) (string, *Push, error) {
	if event != "push" {
		return otherEvent(event, body) // ping and the rest
	}
	p, err := parseGitHubPush(body)
	return event, p, err
}

// githubPush is the push payload of GitHub, which Gitea and Forgejo copy
// (Gitea's modules/structs PushPayload): the same names, minus GitHub's
// deleted flag, plus login/username on the pusher.
type githubPush struct {
	Ref        string `json:"ref"`
	Before     string `json:"before"`
	After      string `json:"after"`
	Deleted    bool   `json:"deleted"`
	Repository *struct {
		CloneURL string `json:"clone_url"`
		SSHURL   string `json:"ssh_url"`
		HTMLURL  string `json:"html_url"`
	} `json:"repository"`
	Pusher *struct {
		Login    string `json:"login"`
		Username string `json:"username"`
		Name     string `json:"name"`
	} `json:"pusher"`
	HeadCommit *githubCommit  `json:"head_commit"`
	Commits    []githubCommit `json:"commits"`
}

type githubCommit struct {
	ID      string `json:"id"`
	Message string `json:"message"`
}

func parseGitHubPush(body []byte) (*Push, error) {
	var p githubPush
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fail(ErrPayload, "push: %v", err)
	}
	if p.Repository == nil {
		return nil, fail(ErrPayload, "push has no repository")
	}
	// head_commit is the new head; older Gitea releases leave it out, so
	// then the commit with the new id is looked for. Gitea lists commits
	// newest first and GitHub oldest first, so position says nothing.
	msg := ""
	if p.HeadCommit != nil {
		msg = p.HeadCommit.Message
	} else {
		for _, c := range p.Commits {
			if c.ID == p.After {
				msg = c.Message
				break
			}
		}
	}
	c, err := change(p.Ref, p.Before, p.After, p.Deleted, msg)
	if err != nil {
		return nil, err
	}
	pusher := ""
	if p.Pusher != nil {
		// GitHub's pusher.name is the login; Gitea's is absent and its
		// login (username is the deprecated alias) is the user name.
		pusher = firstNonEmpty(p.Pusher.Login, p.Pusher.Username, p.Pusher.Name)
	}
	repo := firstNonEmpty(p.Repository.CloneURL, p.Repository.SSHURL, p.Repository.HTMLURL)
	return newPush(repo, pusher, []Change{c})
}
