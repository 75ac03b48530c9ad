package forge

import (
	"encoding/json"
	"strings"
)

// Bitbucket Cloud signs with X-Hub-Signature: "sha256=" and the hex
// HMAC-SHA256 of the body (GitHub's format under GitHub's SHA-1 header
// name), names the event in X-Event-Key and the delivery in X-Request-UUID
// (support.atlassian.com, "Manage webhooks" and "Event payloads").
// Bitbucket Data Center sends X-Request-Id and repo:refs_changed instead,
// a different payload, which is not read here.
var bitbucketSource = source{
	provider:  Bitbucket,
	signature: hdrHubSignature,
	delivery:  "X-Request-UUID",
	event:     "X-Event-Key",
	check:     checkHex(hdrHubSignature, "sha256="),
	parse:     parseBitbucketEvent,
}

func parseBitbucketEvent(event string, body []byte) (string, *Push, error) {
	switch event {
	case "repo:push":
		p, err := parseBitbucketPush(body)
		return "push", p, err
	case "diagnostics:ping":
		// Bitbucket has no ping of its own: this key is taken as one in
		// case a test delivery uses it.
		return otherEvent("ping", body)
	}
	return otherEvent(event, body)
}

// bitbucketPush is the repo:push payload: one push, push.changes[] with a
// change per ref, each with the ref's new and old state; new is null
// when the ref was deleted and old when it was created.
type bitbucketPush struct {
	Actor *struct {
		Nickname    string `json:"nickname"`
		DisplayName string `json:"display_name"`
	} `json:"actor"`
	Repository *struct {
		FullName string `json:"full_name"`
		Links    struct {
			HTML struct {
				Href string `json:"href"`
			} `json:"html"`
		} `json:"links"`
	} `json:"repository"`
	Push *struct {
		Changes []struct {
			New    *bitbucketRef `json:"new"`
			Old    *bitbucketRef `json:"old"`
			Closed bool          `json:"closed"`
		} `json:"changes"`
	} `json:"push"`
}

type bitbucketRef struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	Target struct {
		Hash    string `json:"hash"`
		Message string `json:"message"`
	} `json:"target"`
}

// refPrefix maps a Bitbucket ref type to its place under refs/.
var refPrefix = map[string]string{
	"branch": "refs/heads/",
	"tag":    "refs/tags/",
}

func parseBitbucketPush(body []byte) (*Push, error) {
	var p bitbucketPush
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fail(ErrPayload, "push: %v", err)
	}
	if p.Repository == nil || p.Push == nil {
		return nil, fail(ErrPayload, "push has no repository or no push")
	}
	changes := make([]Change, 0, len(p.Push.Changes))
	for _, ch := range p.Push.Changes {
		ref := ch.New
		if ref == nil {
			ref = ch.Old
		}
		if ref == nil {
			return nil, fail(ErrPayload, "change has neither new nor old ref")
		}
		if ch.New != nil && ch.Old != nil && (ch.New.Type != ch.Old.Type || ch.New.Name != ch.Old.Name) {
			return nil, fail(ErrPayload, "change's new and old refs differ")
		}
		prefix, ok := refPrefix[ref.Type]
		if !ok {
			return nil, fail(ErrPayload, "unknown ref type")
		}
		var before, after, msg string
		if ch.Old != nil {
			before = ch.Old.Target.Hash
		}
		if ch.New != nil {
			after, msg = ch.New.Target.Hash, ch.New.Target.Message
		}
		// The missing side is the null id of the other side's length.
		if ch.Old == nil {
			before = zeros(after)
		}
		if ch.New == nil {
			after = zeros(before)
		}
		c, err := change(prefix+ref.Name, before, after, ch.New == nil || ch.Closed, msg)
		if err != nil {
			return nil, err
		}
		changes = append(changes, c)
	}
	// The html link is the repository's page, which git also clones from;
	// full_name is the fallback for a payload without links.
	repo := p.Repository.Links.HTML.Href
	if repo == "" && p.Repository.FullName != "" {
		repo = "https://bitbucket.org/" + strings.TrimPrefix(p.Repository.FullName, "/")
	}
	pusher := ""
	if p.Actor != nil {
		pusher = firstNonEmpty(p.Actor.Nickname, p.Actor.DisplayName)
	}
	return newPush(repo, pusher, changes)
}
