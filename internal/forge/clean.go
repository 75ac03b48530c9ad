package forge

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bounds of the strings a Delivery carries.
const (
	maxRepository  = 2048
	maxRef         = 1024
	maxPusher      = 256
	maxHeadMessage = 200
	maxEvent       = 128
	maxDeliveryID  = 256
)

// cleanText makes a forge-given string safe to store and show: invalid
// UTF-8, control characters (tab and newline too: these are one-line
// fields) and bidirectional overrides, which can make a log line or a
// page read other than it is, are dropped; the rest is cut at max bytes on
// a rune boundary.
func cleanText(s string, max int) string {
	var b strings.Builder
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || isBidi(r) {
			continue // RuneError: an invalid byte, or U+FFFD itself
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}

func isBidi(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' ||
		(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// firstLine is a commit message's subject, cleaned.
func firstLine(msg string) string {
	if i := strings.IndexAny(msg, "\r\n"); i >= 0 {
		msg = msg[:i]
	}
	return cleanText(msg, maxHeadMessage)
}

// startsObject says the body can only be a JSON object: json.Unmarshal
// into a struct takes null without complaint. Whether it is valid JSON is
// left to json.Unmarshal (push) or json.Valid (other events), so that a
// push is scanned once, not twice.
func startsObject(body []byte) bool {
	t := bytes.TrimLeft(body, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// isCommit says s is a full SHA-1 or SHA-256 object name in lower case,
// the only forms forges send; anything else means a malformed payload.
func isCommit(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func isZero(s string) bool {
	return strings.Trim(s, "0") == ""
}

// zeros is the null object name of the hash length of commit.
func zeros(commit string) string {
	if len(commit) == 64 {
		return strings.Repeat("0", 64)
	}
	return strings.Repeat("0", 40)
}

// checkRef refuses refs that git itself would refuse (git check-ref-format)
// or that are too long, rather than cleaning them: a cleaned ref would
// name another branch.
func checkRef(ref string) error {
	rest, ok := strings.CutPrefix(ref, "refs/")
	switch {
	case !ok || rest == "":
		return fail(ErrPayload, "ref is not under refs/")
	case len(ref) > maxRef:
		return fail(ErrPayload, "ref is longer than %d bytes", maxRef)
	case !utf8.ValidString(ref):
		return fail(ErrPayload, "ref is not valid UTF-8")
	case strings.ContainsAny(ref, " ~^:?*[\\"), strings.Contains(ref, ".."),
		strings.Contains(ref, "@{"), strings.Contains(ref, "//"),
		strings.HasSuffix(ref, "/"), strings.HasSuffix(ref, "."),
		strings.HasSuffix(ref, ".lock"), strings.Contains(ref, "/."):
		return fail(ErrPayload, "ref is not a valid git ref")
	}
	for _, r := range ref {
		if unicode.IsControl(r) || isBidi(r) || r == utf8.RuneError {
			return fail(ErrPayload, "ref has control characters")
		}
	}
	return nil
}

// change builds a Change from a payload's ref and object names, checking
// them. deleted is the forge's own deletion flag, when it has one.
func change(ref, before, after string, deleted bool, message string) (Change, error) {
	if err := checkRef(ref); err != nil {
		return Change{}, err
	}
	if !isCommit(after) || !isCommit(before) {
		return Change{}, fail(ErrPayload, "before and after must be full lower-case commit ids")
	}
	c := Change{
		Ref:         ref,
		After:       after,
		Before:      before,
		Deleted:     deleted || isZero(after),
		HeadMessage: firstLine(message),
	}
	if c.Deleted {
		c.HeadMessage = ""
	}
	if b, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		c.Branch = b
	} else if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		c.Tag = t
	}
	return c, nil
}

// newPush fills a Push from its changes; there is at least one.
func newPush(repository, pusher string, changes []Change) (*Push, error) {
	repo, err := checkRepository(repository)
	if err != nil {
		return nil, err
	}
	if len(changes) == 0 {
		return nil, fail(ErrPayload, "push changes no ref")
	}
	c := changes[0]
	return &Push{
		Repository:  repo,
		Ref:         c.Ref,
		Branch:      c.Branch,
		Tag:         c.Tag,
		After:       c.After,
		Before:      c.Before,
		Deleted:     c.Deleted,
		Pusher:      cleanText(pusher, maxPusher),
		HeadMessage: c.HeadMessage,
		Changes:     changes,
	}, nil
}

// checkRepository refuses a clone URL NormalizeURL refuses: a push for a
// repository that cannot be matched to a project is of no use, and a URL
// with control characters is not one to pass to git.
func checkRepository(u string) (string, error) {
	if u == "" {
		return "", fail(ErrPayload, "no repository URL")
	}
	if len(u) > maxRepository {
		return "", fail(ErrPayload, "repository URL is longer than %d bytes", maxRepository)
	}
	if _, err := NormalizeURL(u); err != nil {
		return "", fail(ErrPayload, "repository URL: %v", err)
	}
	return u, nil
}

// firstNonEmpty is the first of ss that is not empty.
func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
