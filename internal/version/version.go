// Package version compares NebulaCtrl versions, of the control plane and of
// its agents, with a real semantic-versioning parser. Only release versions
// (1.5.0) are comparable: a development build ("dev") or a build between
// releases ("1.4.0-3-gabc1234", a pre-release by semver's rules) is not, and
// is never upgraded automatically.
package version

import (
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Version skew of an agent against its control plane, as the server card
// and GET /api/v1/instance/upgrade show it ("" when they match).
const (
	SkewNewer         = "Newer than the control plane"
	SkewNotComparable = "Version not comparable"
	// skewBehind is followed by the control plane's version.
	skewBehind = "Behind "
)

// parse reads a release version: MAJOR.MINOR.PATCH, an optional leading
// "v", no pre-release and no build metadata.
func parse(v string) (*semver.Version, bool) {
	s := strings.TrimPrefix(v, "v")
	sv, err := semver.StrictNewVersion(s)
	if err != nil || sv.Prerelease() != "" || sv.Metadata() != "" {
		return nil, false
	}
	return sv, true
}

// Release reports whether v is a release version (1.5.0 or v1.5.0), the
// only kind that compares.
func Release(v string) bool {
	_, ok := parse(v)
	return ok
}

// Compare compares two release versions: -1 when a is lower, 0 when equal,
// 1 when higher. ok is false when either is not a release version.
func Compare(a, b string) (int, bool) {
	va, ok := parse(a)
	if !ok {
		return 0, false
	}
	vb, ok := parse(b)
	if !ok {
		return 0, false
	}
	return va.Compare(vb), true
}

// Behind reports whether agent is provably behind controlPlane: both are
// release versions and the agent's is lower.
func Behind(agent, controlPlane string) bool {
	c, ok := Compare(agent, controlPlane)
	return ok && c < 0
}

// Skew says how an agent's version compares with the control plane's:
// "Behind 1.5.0" (the control plane's version), "Newer than the control
// plane", "Version not comparable" (either is not a release version), or ""
// when they are the same.
func Skew(agent, controlPlane string) string {
	if agent == controlPlane {
		return ""
	}
	c, ok := Compare(agent, controlPlane)
	switch {
	case !ok:
		return SkewNotComparable
	case c < 0:
		return skewBehind + strings.TrimPrefix(controlPlane, "v")
	case c > 0:
		return SkewNewer
	}
	return ""
}
