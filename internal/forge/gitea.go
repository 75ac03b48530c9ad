package forge

// Gitea signs with X-Gitea-Signature: the bare hex HMAC-SHA256 of the body
// keyed by the hook's secret, and names the event in X-Gitea-Event and the
// delivery in X-Gitea-Delivery (services/webhook/deliver.go in Gitea). It
// sends the same values again under Gogs' and GitHub's names, which are
// ignored here. Its push payload is GitHub's (see githubPush).
var giteaSource = source{
	provider:  Gitea,
	signature: hdrGiteaSignature,
	delivery:  "X-Gitea-Delivery",
	event:     "X-Gitea-Event",
	check:     checkHex(hdrGiteaSignature, ""),
	parse:     parseGitHubEvent,
}

// Forgejo, a fork of Gitea, sends Gitea's headers and its own
// X-Forgejo-Signature, X-Forgejo-Event and X-Forgejo-Delivery with the
// same values. Its own are read when present, so the delivery is reported
// as Forgejo's; a bad X-Forgejo-Signature is not rescued by a good
// X-Gitea-Signature.
var forgejoSource = source{
	provider:  Forgejo,
	signature: hdrForgejoSignature,
	delivery:  "X-Forgejo-Delivery",
	event:     "X-Forgejo-Event",
	check:     checkHex(hdrForgejoSignature, ""),
	parse:     parseGitHubEvent,
}
