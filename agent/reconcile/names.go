package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Label and annotation keys. They are part of the agent's contract with the
// cluster: a new leader, or a newer agent, finds what an older one made by
// them, so they never change.
const (
	labelManagedBy     = "app.kubernetes.io/managed-by"
	managedByValue     = "nebulactrl"
	labelOrg           = "nebulactrl.io/org"
	labelProject       = "nebulactrl.io/project"
	labelEnvironment   = "nebulactrl.io/environment"
	labelEnvironmentID = "nebulactrl.io/environment-id"
	labelService       = "nebulactrl.io/service"
	labelProcess       = "nebulactrl.io/process"
	labelRelease       = "nebulactrl.io/release"

	annotationSpecHash        = "nebulactrl.io/spec-hash"
	annotationSwitchedAt      = "nebulactrl.io/switched-at"
	annotationAppliedRevision = "nebulactrl.io/applied-revision"
	annotationAppliedHash     = "nebulactrl.io/applied-hash"
)

// managedSelector selects every object the agent made in a namespace.
const managedSelector = labelManagedBy + "=" + managedByValue

// maxName is the longest DNS label. Every object name is kept to it, even
// where Kubernetes allows a longer DNS subdomain, because names end up in
// labels, pod names and DNS records that are labels.
const maxName = validation.DNS1123LabelMaxLength

// hashSuffixLen is "-" plus 8 hex digits of SHA-256: enough to keep two long
// names that share a prefix apart.
const hashSuffixLen = 9

// labelValue returns s when it is a valid label value, otherwise a valid one
// derived from it. Names in the document are DNS labels already (the domain
// validates them), so the fallback exists for safety, not for everyday use:
// a value the API server rejects would fail every apply of the service.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	return hashed(s, sanitize(s), validation.LabelValueMaxLength)
}

// objectName joins parts with "-" into a DNS-1123 label. A name that is not
// one already (too long, or with characters a label cannot have) is
// sanitised, cut and suffixed with a hash of the joined parts, so it stays
// unique and stable.
func objectName(parts ...string) string {
	s := strings.Join(parts, "-")
	if len(validation.IsDNS1123Label(s)) == 0 {
		return s
	}
	return hashed(s, sanitize(s), maxName)
}

// serviceName is the name of a Kubernetes Service, which must be a DNS-1035
// label: a DNS-1123 label that starts with a letter.
func serviceName(service string) string {
	if len(validation.IsDNS1035Label(service)) == 0 {
		return service
	}
	clean := sanitize(service)
	if clean == "" || clean[0] < 'a' || clean[0] > 'z' {
		clean = "svc-" + clean
	}
	return hashed(service, clean, maxName)
}

// ingressName is "<service>-<host with dots as dashes>" for the Ingress of
// one domain. forceHash is for the rare pair of hosts that map to the same
// dashed name (a-b.com and a.b-com): the second one gets the hashed form.
func ingressName(service, host string, forceHash bool) string {
	full := service + "-" + strings.ReplaceAll(host, ".", "-")
	if !forceHash {
		return objectName(full)
	}
	return hashed(service+"/"+host, sanitize(full), maxName)
}

// deploymentName is "<service>-<process>-r<release>".
func deploymentName(service, process string, release int) string {
	return objectName(service, process, "r"+strconv.Itoa(release))
}

// secretName is "<service>-r<release>".
func secretName(service string, release int) string {
	return objectName(service, "r"+strconv.Itoa(release))
}

// hashed cuts clean so that it plus a hash suffix of full fits in max, and
// appends the suffix. The hash is of the original, so two inputs that
// sanitise alike still get different names.
func hashed(full, clean string, max int) string {
	sum := sha256.Sum256([]byte(full))
	suffix := "-" + hex.EncodeToString(sum[:4])
	if len(clean) > max-hashSuffixLen {
		clean = clean[:max-hashSuffixLen]
	}
	clean = strings.TrimRight(clean, "-")
	if clean == "" {
		// A suffix alone would start with '-'.
		return "x" + suffix
	}
	return clean + suffix
}

// sanitize lower-cases s and replaces everything but [a-z0-9-] by '-',
// trimming dashes at both ends.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}
