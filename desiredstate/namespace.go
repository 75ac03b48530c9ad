package desiredstate

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// maxLabel is the longest DNS label, and so the longest Kubernetes namespace name.
const maxLabel = 63

// suffixLen is the length of the hash suffix, with its separator.
const suffixLen = 1 + 10

// lowerBase32 spells the suffix: DNS label characters only.
var lowerBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Namespace returns the Kubernetes namespace of an environment. Two
// environments with different (org, project, environment) names never get
// the same namespace, by construction:
//
//   - "<org>-<project>-<env>" when no name contains a '-' and the join fits
//     in 63 characters ("acme-shop-production"). Every '-'-separated part of
//     it is a whole name, which starts with a letter.
//   - otherwise the join, cut to leave room, then "-" and a suffix of ten
//     characters taken from the SHA-256 of the three names joined with '/'
//     (which no name contains, so the hashed string is unambiguous, where
//     "orga/x-y/z" and "orga/x/y-z" both join to "orga-x-y-z"). The suffix
//     starts with a digit, so it never reads as the first case's last
//     name, and its 48 bits make two environments meeting on it as likely
//     as a random collision among 2^48.
//
// org, project and env are expected to be DNS labels starting with a letter
// already (the domain validates every name). The result is a DNS label of at
// most 63 characters that starts with the organisation's name.
func Namespace(org, project, env string) string {
	full := org + "-" + project + "-" + env
	if len(full) <= maxLabel && !strings.Contains(org+project+env, "-") {
		return full
	}
	sum := sha256.Sum256([]byte(org + "/" + project + "/" + env))
	suffix := "-" + string(rune('0'+sum[0]%10)) + lowerBase32.EncodeToString(sum[1:])[:suffixLen-2]
	// The cut may land on a '-'; drop it so the name does not read
	// "shop--1a2b3c4d" (the suffix brings its own separator).
	prefix := strings.TrimRight(full[:min(len(full), maxLabel-suffixLen)], "-")
	return prefix + suffix
}
