// Package domain owns NebulaCtrl's aggregates, commands, events and invariants.
//
// It is pure Go: no I/O, no clock, no randomness. A command handler outside this
// package loads the events of a stream, folds them into state with Apply, asks
// Decide what the command means, and appends the returned events with the
// stream's version as the expected version. Identifiers, timestamps and sealed
// secret values arrive inside the command, so deciding twice gives the same answer.
package domain

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Sentinel errors that callers branch on with errors.Is.
var (
	// ErrInvalid marks a command that can never succeed as given (HTTP 400/422).
	ErrInvalid = errors.New("invalid")
	// ErrNotFound marks a command whose target does not exist (HTTP 404).
	ErrNotFound = errors.New("not found")
	// ErrConflict marks a command that clashes with the current state (HTTP 409).
	ErrConflict = errors.New("conflict")
	// ErrForbidden marks a command the actor may not issue (HTTP 403).
	ErrForbidden = errors.New("forbidden")
)

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func notFoundf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotFound, fmt.Sprintf(format, args...))
}

func conflictf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}

// isDNSLabel is the hand-written form of ^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$:
// the compiler checks every reference with it, so it must be cheap.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] < 'a' || s[0] > 'z' || s[len(s)-1] == '-' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateName checks that name is a DNS label (RFC 1123, starting with a
// letter, at most 63 characters): organisations, projects, environments,
// services, processes and clusters all end up in Kubernetes object names.
func ValidateName(kind, name string) error {
	if !isDNSLabel(name) {
		return invalidf("%s name %q must be a DNS label: lower-case letters, digits and '-', starting with a letter, at most 63 characters", kind, name)
	}
	return nil
}

var hostnameRE = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidateHostname checks a domain name such as shop.example.com.
func ValidateHostname(host string) error {
	if len(host) > 253 || !hostnameRE.MatchString(host) {
		return invalidf("domain %q is not a valid lower-case host name", host)
	}
	return nil
}

// isVariableName is the hand-written form of ^[A-Za-z_][A-Za-z0-9_]{0,254}$.
func isVariableName(s string) bool {
	if len(s) == 0 || len(s) > 255 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ValidateVariableName checks an environment variable name.
func ValidateVariableName(name string) error {
	if !isVariableName(name) {
		return invalidf("variable name %q must match [A-Za-z_][A-Za-z0-9_]*", name)
	}
	return nil
}

// Actor is who caused an event: a user, an API token, an agent or a system job.
type Actor struct {
	Kind ActorKind `json:"kind"`
	ID   string    `json:"id"`
	// Name is what people read in the audit log: an email, a token name, a
	// server name or a job name.
	Name string `json:"name"`
}

// ActorKind says what kind of principal an Actor is.
type ActorKind string

// Actor kinds.
const (
	ActorUser   ActorKind = "user"
	ActorToken  ActorKind = "token"
	ActorAgent  ActorKind = "agent"
	ActorSystem ActorKind = "system"
)

// System returns the actor for a background job of the control plane.
func System(job string) Actor { return Actor{Kind: ActorSystem, ID: job, Name: job} }

// Validate reports whether the actor is usable on a command.
func (a Actor) Validate() error {
	switch a.Kind {
	case ActorUser, ActorToken, ActorAgent, ActorSystem:
	default:
		return invalidf("actor kind %q is unknown", a.Kind)
	}
	if a.ID == "" {
		return invalidf("actor has no id")
	}
	return nil
}

// SealedValue is a secret as events carry it: ciphertext sealed with its own
// data key, and the id of that data key. The data key itself is stored wrapped
// by the master key, outside the events, so rotating the master key never
// touches an event.
type SealedValue struct {
	DataKeyID  string `json:"dataKeyId"`
	Ciphertext []byte `json:"ciphertext"`
}

// Validate checks the shape of a sealed value; it cannot check the seal.
func (s SealedValue) Validate() error {
	if s.DataKeyID == "" || len(s.Ciphertext) == 0 {
		return invalidf("sealed value is incomplete")
	}
	return nil
}

// Variable is one configuration variable. Value may contain references to
// another service's variable in the same environment, written ${{ api.PORT }};
// they are resolved by the compiler. A secret variable has Secret set and no Value.
type Variable struct {
	Name   string       `json:"name"`
	Value  string       `json:"value,omitempty"`
	Secret *SealedValue `json:"secret,omitempty"`
}

// Equal reports whether two variables have the same name and value (sealed
// values compare by key and ciphertext).
func (v Variable) Equal(o Variable) bool {
	if v.Name != o.Name || v.Value != o.Value || (v.Secret == nil) != (o.Secret == nil) {
		return false
	}
	return v.Secret == nil || v.Secret.DataKeyID == o.Secret.DataKeyID && bytes.Equal(v.Secret.Ciphertext, o.Secret.Ciphertext)
}

// Limits of variables. Releases and revisions record what changed, not every
// variable again, so these bound the size of a service's configuration (what
// the agent and the compiler handle at once), not what an update stores.
const (
	// MaxVariableValue bounds one value (a secret's plain value too).
	MaxVariableValue = 32 << 10
	// MaxVariablesPerScope bounds the variables of a service, or the
	// environment-wide ones, in one environment.
	MaxVariablesPerScope = 1000
	// MaxVariableBytesPerScope bounds their values together.
	MaxVariableBytesPerScope = 256 << 10
)

// Validate checks a variable.
func (v Variable) Validate() error {
	if err := ValidateVariableName(v.Name); err != nil {
		return err
	}
	if v.Secret != nil {
		if v.Value != "" {
			return invalidf("variable %s is a secret and may not carry a plain value", v.Name)
		}
		// Sealing adds a nonce and a tag (well under 256 bytes).
		if len(v.Secret.Ciphertext) > MaxVariableValue+256 {
			return invalidf("secret %s is longer than %d KiB", v.Name, MaxVariableValue>>10)
		}
		return v.Secret.Validate()
	}
	if len(v.Value) > MaxVariableValue {
		return invalidf("variable %s is longer than %d KiB", v.Name, MaxVariableValue>>10)
	}
	// Values may hold any text (PEM blocks with CRLF, tabs), but no NUL:
	// PostgreSQL's text cannot store one.
	if !utf8.ValidString(v.Value) || strings.ContainsRune(v.Value, 0) {
		return invalidf("variable %s is not valid UTF-8 text without NUL", v.Name)
	}
	if _, err := ParseReferences(v.Value); err != nil {
		return fmt.Errorf("variable %s: %w", v.Name, err)
	}
	return nil
}

// Reference is one ${{ service.VARIABLE }} inside a variable value.
type Reference struct {
	Service  string
	Variable string
	// Start and End are the byte offsets of the whole ${{ ... }} in the value.
	Start, End int
}

// ParseReferences finds the references in a variable value. A "${{" that is
// not a well-formed reference is an error, so typos are caught when the
// variable is set rather than when it is compiled.
func ParseReferences(value string) ([]Reference, error) {
	var refs []Reference
	offset := 0
	for {
		i := strings.Index(value[offset:], "${{")
		if i < 0 {
			return refs, nil
		}
		start := offset + i
		j := strings.Index(value[start:], "}}")
		if j < 0 {
			return nil, invalidf("reference at byte %d is not closed with }}", start)
		}
		end := start + j + 2
		inner := strings.TrimSpace(value[start+3 : start+j])
		svc, name, ok := strings.Cut(inner, ".")
		if !ok || ValidateName("service", svc) != nil || ValidateVariableName(name) != nil {
			return nil, invalidf("reference %q must look like ${{ service.VARIABLE }}", value[start:end])
		}
		refs = append(refs, Reference{Service: svc, Variable: name, Start: start, End: end})
		offset = end
	}
}

// HealthCheck is how a process is probed before it takes traffic.
type HealthCheck struct {
	// Path is an HTTP path probed on Port; empty means a TCP check.
	Path                string `json:"path,omitempty"`
	Port                int    `json:"port"`
	InitialDelaySeconds int    `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int    `json:"periodSeconds,omitempty"`
}

// Process is one kind of process of a service: web, worker, ...
type Process struct {
	Name        string       `json:"name"`
	Command     []string     `json:"command,omitempty"`
	Port        int          `json:"port,omitempty"`
	Replicas    int          `json:"replicas"`
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
}

// Validate checks a process definition.
func (p Process) Validate() error {
	if err := ValidateName("process", p.Name); err != nil {
		return err
	}
	if p.Port < 0 || p.Port > 65535 {
		return invalidf("process %s: port %d is out of range", p.Name, p.Port)
	}
	if p.Replicas < 0 || p.Replicas > 1000 {
		return invalidf("process %s: replicas %d must be between 0 and 1000", p.Name, p.Replicas)
	}
	if hc := p.HealthCheck; hc != nil {
		if hc.Port <= 0 || hc.Port > 65535 {
			return invalidf("process %s: health check port %d is out of range", p.Name, hc.Port)
		}
		if hc.Path != "" && !strings.HasPrefix(hc.Path, "/") {
			return invalidf("process %s: health check path must start with /", p.Name)
		}
	}
	return nil
}

// Source is where a service's image comes from: an image reference, or a
// Git repository that the cluster builds (its default branch, the Dockerfile
// and the build context in it, and a read credential for a private one).
type Source struct {
	Image     string `json:"image,omitempty"`
	GitURL    string `json:"gitUrl,omitempty"`
	GitBranch string `json:"gitBranch,omitempty"`
	// Dockerfile is the Dockerfile's path in the repository ("" for
	// "Dockerfile"); Context the build context directory ("" for the root).
	Dockerfile string `json:"dockerfile,omitempty"`
	Context    string `json:"context,omitempty"`
	// Credential reads a private repository; sealed, delivered only to
	// the build, never returned.
	Credential *GitCredential `json:"credential,omitempty"`
}

// GitCredential is a repository's read credential: an HTTPS token (with an
// optional user name) or an SSH deploy key, sealed.
type GitCredential struct {
	Kind     string      `json:"kind"`
	Username string      `json:"username,omitempty"`
	Sealed   SealedValue `json:"sealed"`
	// KnownHosts pins the forge's SSH host keys (known_hosts lines; not a
	// secret) for an SSH key.
	KnownHosts string `json:"knownHosts,omitempty"`
}

// Kinds of Git credentials.
const (
	CredentialToken = "token"
	CredentialSSH   = "ssh"
)

// Defaults of a Git source.
const (
	DefaultDockerfile = "Dockerfile"
	DefaultContext    = "."
)

// IsGit reports whether the service builds from Git.
func (s Source) IsGit() bool { return s.GitURL != "" }

// DockerfilePath is the Dockerfile's path, defaulted.
func (s Source) DockerfilePath() string {
	if s.Dockerfile == "" {
		return DefaultDockerfile
	}
	return s.Dockerfile
}

// ContextDir is the build context, defaulted.
func (s Source) ContextDir() string {
	if s.Context == "" {
		return DefaultContext
	}
	return s.Context
}

// Validate checks that exactly one kind of source is given, and the Git
// source's parts.
func (s Source) Validate() error {
	switch {
	case s.Image != "" && s.GitURL != "":
		return invalidf("a service has either an image or a Git source, not both")
	case s.Image != "":
		if strings.ContainsAny(s.Image, " \t\n") {
			return invalidf("image %q contains white space", s.Image)
		}
		if s.GitBranch != "" || s.Dockerfile != "" || s.Context != "" || s.Credential != nil {
			return invalidf("a branch, a Dockerfile, a build context and a Git credential belong to a Git source")
		}
	case s.GitURL != "":
		if err := ValidateText("Git URL", s.GitURL, 2048); err != nil {
			return err
		}
		if strings.ContainsAny(s.GitURL, " \t\n") {
			return invalidf("Git URL %q contains white space", s.GitURL)
		}
		if s.GitBranch == "" {
			return invalidf("a Git source needs a branch")
		}
		if err := ValidateBranch(s.GitBranch); err != nil {
			return err
		}
		for _, p := range []struct{ field, v string }{{"Dockerfile", s.Dockerfile}, {"build context", s.Context}} {
			if err := validateRepoPath(p.field, p.v); err != nil {
				return err
			}
		}
		if c := s.Credential; c != nil {
			if c.Kind != CredentialToken && c.Kind != CredentialSSH {
				return invalidf("a Git credential is a token or an SSH key, not %q", c.Kind)
			}
			if err := ValidateText("Git user name", c.Username, 200); err != nil {
				return err
			}
			if err := ValidateText("known hosts", c.KnownHosts, 16<<10); err != nil {
				return err
			}
			if c.KnownHosts != "" && c.Kind != CredentialSSH {
				return invalidf("known hosts go with an SSH key")
			}
			if err := c.Sealed.Validate(); err != nil {
				return err
			}
		}
	default:
		return invalidf("a service needs an image or a Git source")
	}
	return nil
}

// ValidateBranch checks a branch name by Git's rules for ref names (git
// check-ref-format), so that a branch accepted here is one a push can name.
func ValidateBranch(b string) error {
	bad := b == "" || len(b) > 255 || b == "@" || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "/") ||
		strings.HasSuffix(b, "/") || strings.HasSuffix(b, ".") || strings.HasSuffix(b, ".lock") ||
		strings.Contains(b, "..") || strings.Contains(b, "//") || strings.Contains(b, "@{") || strings.Contains(b, "/.") ||
		strings.HasPrefix(b, ".") || strings.HasPrefix(b, "refs/")
	for _, r := range b {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			bad = true
		}
	}
	if bad {
		return invalidf("branch %q is not a valid Git branch name", b)
	}
	return nil
}

// ValidateCommit checks a full commit id: 40 (SHA-1) or 64 (SHA-256)
// lower-case hexadecimal digits.
func ValidateCommit(c string) error {
	if len(c) != 40 && len(c) != 64 {
		return invalidf("commit %q is not a full commit id (40 or 64 hexadecimal digits)", c)
	}
	for _, r := range c {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return invalidf("commit %q is not a full commit id (40 or 64 lower-case hexadecimal digits)", c)
		}
	}
	return nil
}

// validateRepoPath checks a path inside the repository: relative, without
// .. and at most 1024 bytes ("" is the default).
func validateRepoPath(field, p string) error {
	if p == "" {
		return nil
	}
	if err := ValidateText(field, p, 1024); err != nil {
		return err
	}
	if strings.HasPrefix(p, "/") || strings.Contains(p, "\\") || strings.ContainsAny(p, "\n\t") {
		return invalidf("%s %q must be a relative path in the repository", field, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return invalidf("%s %q must stay inside the repository", field, p)
		}
	}
	return nil
}

// ValidateText checks a free-text field that reaches an event: valid UTF-8,
// no NUL or other control characters than tab and newline, at most max bytes.
func ValidateText(field, s string, max int) error {
	if len(s) > max {
		return invalidf("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return invalidf("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f {
			return invalidf("%s contains a control character", field)
		}
	}
	return nil
}
