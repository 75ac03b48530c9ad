package desiredstate

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxLabel is the longest DNS label, and so the longest Kubernetes namespace name.
const maxLabel = 63

// Namespace returns the Kubernetes namespace of an environment:
// "<org>-<project>-<env>".
//
// org, project and env are expected to be DNS labels already (the domain
// validates every name). When the joined name is longer than 63 characters it
// is cut and suffixed with "-" and the first 8 hex digits of the SHA-256 of
// the full name: the result stays a valid DNS label, and two long names that
// share a prefix still get different namespaces.
func Namespace(org, project, env string) string {
	full := org + "-" + project + "-" + env
	if len(full) <= maxLabel {
		return full
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "-" + hex.EncodeToString(sum[:4])
	// The cut may land on a '-'; drop it so the name does not read
	// "shop--1a2b3c4d" (the suffix brings its own separator).
	prefix := strings.TrimRight(full[:maxLabel-len(suffix)], "-")
	return prefix + suffix
}
