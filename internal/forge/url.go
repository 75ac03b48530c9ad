package forge

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NormalizeURL reduces a clone URL to "host/path", the key under which the
// forms of one repository compare equal: https and http, ssh
// (ssh://git@host:22/owner/repo.git and scp-like git@host:owner/repo.git),
// git://, with or without ".git", trailing slashes, userinfo and port. The
// host is lower-cased; the path keeps its case, because GitLab and Gitea
// paths may be case-sensitive and a false "different" only fails a match
// where a false "same" would deploy the wrong repository. The result is
// itself accepted, so normalising is idempotent.
//
// The port is dropped, not only the default one: on a forge it selects
// the protocol (Gitea's HTTP on 3000 and SSH on 2222), not the repository,
// so the https and ssh URLs of one repository compare equal. Two forges on
// one host with different ports would collide; routing by URL is not
// authentication (the webhook secret is).
//
// Refused: schemes other than https, http, ssh and git; no host or no
// path; control characters, spaces, backslashes, "?" and "#"; "." and
// ".." path segments, which a server may resolve to another repository;
// a leading "-", which git would read as an option.
func NormalizeURL(raw string) (string, error) {
	if err := checkURLText(raw); err != nil {
		return "", err
	}
	var host, path string
	var err error
	if i := strings.Index(raw, "://"); i >= 0 {
		host, path, err = splitURL(strings.ToLower(raw[:i]), raw[i+3:])
	} else {
		host, path, err = splitSCP(raw)
	}
	if err != nil {
		return "", err
	}
	if host, err = normalHost(host); err != nil {
		return "", err
	}
	if path, err = normalPath(path); err != nil {
		return "", err
	}
	return host + "/" + path, nil
}

// SameRepository says a and b are clone URLs of one repository: equal
// under NormalizeURL, or, on github.com, whose owner and repository names
// are case-insensitive, equal but for ASCII case. An invalid URL is the
// same as nothing.
func SameRepository(a, b string) bool {
	na, err := NormalizeURL(a)
	if err != nil {
		return false
	}
	nb, err := NormalizeURL(b)
	if err != nil {
		return false
	}
	if na == nb {
		return true
	}
	const gh = "github.com/"
	return strings.HasPrefix(na, gh) && strings.HasPrefix(nb, gh) && asciiLower(na) == asciiLower(nb)
}

func urlError(reason string) error {
	return errors.New("forge: URL " + reason)
}

func checkURLText(raw string) error {
	switch {
	case raw == "":
		return urlError("is empty")
	case len(raw) > maxRepository:
		return urlError("is too long")
	case !utf8.ValidString(raw):
		return urlError("is not valid UTF-8")
	case raw[0] == '-':
		return urlError("starts with '-'")
	}
	for _, r := range raw {
		if unicode.IsControl(r) || unicode.IsSpace(r) || isBidi(r) || strings.ContainsRune(`\?#`, r) {
			return urlError("has a control character, space, '\\', '?' or '#'")
		}
	}
	return nil
}

// splitURL splits scheme://[userinfo@]host[:port]/path.
func splitURL(scheme, rest string) (host, path string, err error) {
	switch scheme {
	case "https", "http", "ssh", "git":
	default:
		return "", "", urlError("scheme is not https, http, ssh or git")
	}
	slash := strings.IndexByte(rest, '/')
	if slash < 0 {
		return "", "", urlError("has no path")
	}
	authority, path := rest[:slash], rest[slash:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		authority = authority[at+1:]
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") {
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return "", "", urlError("has an unclosed '['")
		}
		host, port = authority[:end+1], authority[end+1:]
	} else if c := strings.LastIndexByte(authority, ':'); c >= 0 {
		host, port = authority[:c], authority[c:]
	}
	if port != "" && !isPort(port) {
		return "", "", urlError("has a bad port")
	}
	return host, path, nil
}

// isPort says p is ':' and a port number.
func isPort(p string) bool {
	digits, ok := strings.CutPrefix(p, ":")
	return ok && digits != "" && len(digits) <= 5 && strings.Trim(digits, "0123456789") == ""
}

// splitSCP splits the forms without a scheme: git's scp-like
// [user@]host:path, and host/path, the form NormalizeURL returns. As in
// git, a ':' before any '/' makes it scp-like.
func splitSCP(raw string) (host, path string, err error) {
	rest := raw
	if at := strings.IndexByte(raw, '@'); at >= 0 && at < strings.IndexAny(raw+":/", ":/") {
		rest = raw[at+1:]
	}
	var sep byte
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 || end+1 == len(rest) {
			return "", "", urlError("has no path")
		}
		host, sep, path = rest[:end+1], rest[end+1], rest[end+2:]
	} else {
		i := strings.IndexAny(rest, ":/")
		if i < 0 {
			return "", "", urlError("has no path")
		}
		host, sep, path = rest[:i], rest[i], rest[i+1:]
	}
	switch {
	case sep != ':' && sep != '/':
		return "", "", urlError("has no path")
	case sep == ':' && strings.HasPrefix(path, ":"):
		// host::address is git's syntax for a remote helper.
		return "", "", urlError("names a remote helper")
	case sep == ':' && len(host) == 1:
		// C:/repo is a Windows path, not host C.
		return "", "", urlError("is a local path")
	}
	return host, path, nil
}

// normalHost lower-cases a DNS name or a bracketed IPv6 address and checks
// it. Only ASCII names are taken: an internationalised host must be given
// in its punycode form, so that one host has one spelling.
func normalHost(h string) (string, error) {
	h = asciiLower(strings.TrimSuffix(h, "."))
	if h == "" {
		return "", urlError("has no host")
	}
	if strings.HasPrefix(h, "[") {
		inner := strings.TrimSuffix(h[1:], "]")
		if len(inner) < 2 || !strings.HasSuffix(h, "]") || strings.Trim(inner, "0123456789abcdef:.") != "" {
			return "", urlError("has a bad IPv6 host")
		}
		return h, nil
	}
	if len(h) > 253 {
		return "", urlError("host is too long")
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "", urlError("has a bad host")
		}
	}
	return h, nil
}

// normalPath strips the slashes around the path and ".git" until none is
// left, so that "a/b.git/" and "a/b" agree and the result is stable.
func normalPath(p string) (string, error) {
	p = strings.TrimLeft(p, "/")
	for {
		q := strings.TrimSuffix(strings.TrimRight(p, "/"), ".git")
		if q == p {
			break
		}
		p = q
	}
	if p == "" {
		return "", urlError("has no path")
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return "", urlError("has an empty, '.' or '..' path segment")
		}
	}
	return p, nil
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
