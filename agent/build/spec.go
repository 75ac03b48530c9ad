package build

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nebulactrl/nebulactrl/transport"
)

var (
	// commitID is a full object id (SHA-1 or SHA-256 repositories): the
	// clone fetches it by id, which an abbreviation cannot be.
	commitID = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
	// imagePath is a repository path as the OCI distribution spec allows it.
	imagePath = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
)

// checkSpec says what is wrong with a build spec, all at once; such a build
// gets no Job but a failed report. The scripts take every field from the
// environment, so these checks are about what git, BuildKit and Kubernetes
// accept, and about keeping the build inside its checkout.
func checkSpec(s transport.BuildSpec) error {
	var errs []error
	if s.ID == "" {
		errs = append(errs, errors.New("no build id"))
	} else if msgs := validation.IsValidLabelValue(s.ID); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("build id %q: %s", s.ID, strings.Join(msgs, "; ")))
	}
	if s.Service != "" {
		if msgs := validation.IsValidLabelValue(s.Service); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("service %q: %s", s.Service, strings.Join(msgs, "; ")))
		}
	}
	errs = append(errs, checkRepository(s.Repository))
	if s.Branch == "" && s.Commit == "" {
		errs = append(errs, errors.New("neither a branch nor a commit"))
	}
	if s.Branch != "" && !validBranch(s.Branch) {
		errs = append(errs, fmt.Errorf("branch %q is not a branch name", s.Branch))
	}
	if s.Commit != "" && !commitID.MatchString(s.Commit) {
		errs = append(errs, fmt.Errorf("commit %q is not a full lower-case commit id", s.Commit))
	}
	if !imagePath.MatchString(s.Image) || len(s.Image) > 200 {
		errs = append(errs, fmt.Errorf("image %q is not a registry repository path", s.Image))
	}
	errs = append(errs, checkPath("dockerfile", s.Dockerfile), checkPath("context", s.Context))
	if s.TimeoutSeconds < 0 {
		errs = append(errs, fmt.Errorf("timeout %d s is negative", s.TimeoutSeconds))
	}
	if c := s.Credential; c != nil && c.Token == "" && c.SSHKey == "" {
		errs = append(errs, errors.New("a credential with neither a token nor an SSH key"))
	}
	return errors.Join(errs...)
}

// checkRepository accepts a URL git can fetch (https, http, ssh, git, file)
// or scp-like user@host:path, without a password in it: a credential comes
// in the spec's Credential, never in the URL, which git prints.
func checkRepository(repo string) error {
	if repo == "" {
		return errors.New("no repository")
	}
	// "transport::address" would pick one of git's remote helpers (ext::
	// runs a command); the clone allows only the protocols below.
	if strings.HasPrefix(repo, "-") || strings.ContainsAny(repo, " \t\r\n\x00") || strings.Contains(repo, "::") {
		return fmt.Errorf("repository %q is not a Git URL", repo)
	}
	if !strings.Contains(repo, "://") {
		// scp-like syntax: [user@]host:path
		if host, _, ok := strings.Cut(repo, ":"); !ok || host == "" || strings.Contains(host, "/") {
			return fmt.Errorf("repository %q is not a Git URL", repo)
		}
		return nil
	}
	u, err := url.Parse(repo)
	if err != nil {
		return fmt.Errorf("repository: %w", err)
	}
	switch u.Scheme {
	case "https", "http", "ssh", "git", "file":
	default:
		return fmt.Errorf("repository %q: scheme %q is not one the clone allows", u.Redacted(), u.Scheme)
	}
	if _, hasPassword := u.User.Password(); hasPassword {
		return fmt.Errorf("repository %q holds a password: send it as the build's credential", u.Redacted())
	}
	return nil
}

// validBranch is a conservative subset of git check-ref-format.
func validBranch(b string) bool {
	if b == "" || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".lock") || strings.HasSuffix(b, ".") || strings.Contains(b, "..") ||
		strings.Contains(b, "//") || strings.Contains(b, "@{") {
		return false
	}
	for _, r := range b {
		if r < 0x21 || r == 0x7f || strings.ContainsRune(`~^:?*[\`, r) {
			return false
		}
	}
	return true
}

// checkPath keeps a path of the spec inside the checkout.
func checkPath(field, p string) error {
	if strings.ContainsAny(p, "\x00\r\n") {
		return fmt.Errorf("%s %q holds a control character", field, p)
	}
	for _, part := range strings.Split(strings.Trim(p, "/"), "/") {
		if part == ".." {
			return fmt.Errorf("%s %q leaves the repository", field, p)
		}
	}
	return nil
}
