package transport

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Agent frames reach the control plane's tables (telemetry, server facts,
// stages, outcomes): their strings are checked at the boundary like API
// input (names, ids and versions by the rule of domain.ValidateText, which
// transport cannot import: TestTextRuleIsTheDomains keeps them one; free text from the
// cluster must be valid UTF-8 without NUL), so that nothing a projection or a table cannot store gets in. A
// frame that breaks a rule is refused whole: the hub answers with an error
// frame (code invalid_frame, naming the field) and closes the connection;
// nothing of it is stored, and no other connection is affected.

// ErrInvalidFrame marks a frame whose content breaks the rules.
var ErrInvalidFrame = errors.New("invalid frame")

// Limits of agent frames: generous for what an agent honestly sends.
const (
	maxName      = 253      // Kubernetes names, hosts, services, pods, containers
	maxShort     = 128      // versions, architectures, states, ids, hashes
	maxMessage   = 32 << 10 // reasons, details, event messages, errors
	maxLogLine   = 64 << 10
	maxNodes     = 5000
	maxWorkloads = 20000
	maxEvents    = 5000
	maxLogLines  = 10000
	maxOutcomes  = 10000
	maxApplied   = 10000
)

// Validator is a payload whose content can be checked.
type Validator interface {
	Validate() error
}

// fieldCheck collects the first broken rule of a payload.
type fieldCheck struct{ err error }

func (c *fieldCheck) text(field, s string, max int) {
	if c.err != nil {
		return
	}
	c.err = checkText(field, s, max)
}

// checkText is domain.ValidateText's rule: valid UTF-8, no NUL or other
// control characters than tab and newline, at most max bytes.
func checkText(field, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is longer than %d bytes", field, max)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for _, r := range s {
		if r < 0x20 && r != '\t' && r != '\n' || r == 0x7f {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// free checks free text from the cluster (log output, event messages,
// details): valid UTF-8 without NUL, at most max bytes; other control
// characters (terminal colours, carriage returns) are kept.
func (c *fieldCheck) free(field, s string, max int) {
	switch {
	case c.err != nil:
	case len(s) > max:
		c.err = fmt.Errorf("%s is longer than %d bytes", field, max)
	case !utf8.ValidString(s):
		c.err = fmt.Errorf("%s is not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		c.err = fmt.Errorf("%s contains a NUL character", field)
	}
}

func (c *fieldCheck) count(field string, n, max int) {
	if c.err == nil && n > max {
		c.err = fmt.Errorf("%s has %d items, more than %d", field, n, max)
	}
}

// nonNegative is a revision or release number: from 0 to what the
// control plane's tables store (a 32-bit integer).
func (c *fieldCheck) nonNegative(field string, n int) {
	switch {
	case c.err != nil:
	case n < 0:
		c.err = fmt.Errorf("%s is negative", field)
	case n > math.MaxInt32:
		c.err = fmt.Errorf("%s is larger than %d", field, math.MaxInt32)
	}
}

func (c *fieldCheck) result(typ string) error {
	if c.err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %v", ErrInvalidFrame, typ, c.err)
}

// Validate checks a hello.
func (h Hello) Validate() error {
	var c fieldCheck
	c.text("version", h.Version, maxShort)
	c.text("arch", h.Arch, maxShort)
	c.free("cannotUpgrade", h.CannotUpgrade, maxMessage)
	c.count("applied", len(h.Applied), maxApplied)
	for env, rev := range h.Applied {
		c.text("applied environment id", env, maxShort)
		c.nonNegative("applied revision", rev)
	}
	c.nonNegative("meshApplied", h.MeshApplied)
	c.count("recorded", len(h.Recorded), maxApplied)
	for env, r := range h.Recorded {
		c.text("recorded environment id", env, maxShort)
		c.nonNegative("recorded revision", r.Revision)
		c.text("recorded hash", r.Hash, maxShort)
	}
	c.text("facts.hostname", h.Facts.Hostname, maxName)
	c.text("facts.os", h.Facts.OS, maxName)
	c.text("facts.kubernetesVersion", h.Facts.KubernetesVersion, maxShort)
	if u := h.Facts.AgentUpgrade; u != nil {
		c.text("facts.agentUpgrade.from", u.From, maxShort)
		c.text("facts.agentUpgrade.to", u.To, maxShort)
		c.text("facts.agentUpgrade.state", u.State, maxShort)
		c.free("facts.agentUpgrade.reason", u.Reason, maxMessage)
	}
	return c.result(TypeHello)
}

// Validate checks an acknowledgement.
func (a Ack) Validate() error {
	var c fieldCheck
	c.text("environmentId", a.EnvironmentID, maxShort)
	c.text("hash", a.Hash, maxShort)
	c.nonNegative("revision", a.Revision)
	c.count("services", len(a.Services), maxOutcomes)
	for _, s := range a.Services {
		c.text("services.service", s.Service, maxName)
		c.text("services.state", s.State, maxShort)
		c.free("services.reason", s.Reason, maxMessage)
	}
	return c.result(TypeAck)
}

// Validate checks a cluster status report.
func (s Status) Validate() error {
	var c fieldCheck
	c.count("nodes", len(s.Nodes), maxNodes)
	c.count("workloads", len(s.Workloads), maxWorkloads)
	c.count("events", len(s.Events), maxEvents)
	for _, n := range s.Nodes {
		c.text("nodes.name", n.Name, maxName)
		c.text("nodes.cpu", n.CPU, maxShort)
		c.text("nodes.memory", n.Memory, maxShort)
		c.text("nodes.kubeletVersion", n.KubeletVersion, maxShort)
		c.text("nodes.osImage", n.OSImage, maxName)
		c.text("nodes.containerRuntime", n.ContainerRuntime, maxName)
		c.text("nodes.kubernetesVersion", n.KubernetesVersion, maxShort)
	}
	for _, w := range s.Workloads {
		c.text("workloads.environmentId", w.EnvironmentID, maxShort)
		c.text("workloads.service", w.Service, maxName)
		c.text("workloads.process", w.Process, maxName)
		c.nonNegative("workloads.release", w.Release)
		c.nonNegative("workloads.desired", w.Desired)
		c.nonNegative("workloads.ready", w.Ready)
	}
	for _, e := range s.Events {
		c.text("events.environmentId", e.EnvironmentID, maxShort)
		c.text("events.namespace", e.Namespace, maxName)
		c.text("events.object", e.Object, maxName*2)
		c.text("events.reason", e.Reason, maxName)
		c.free("events.message", e.Message, maxMessage)
		c.nonNegative("events.count", e.Count)
	}
	return c.result(TypeStatus)
}

// Validate checks a batch of log lines. Container output may hold anything:
// the agent makes each line storable before it sends it (invalid UTF-8 and
// NUL replaced, see agent.parseLogLine), and the control plane refuses a
// batch that is not.
func (l Logs) Validate() error {
	var c fieldCheck
	c.text("environmentId", l.EnvironmentID, maxShort)
	c.text("service", l.Service, maxName)
	c.text("pod", l.Pod, maxName)
	c.text("container", l.Container, maxName)
	c.nonNegative("release", l.Release)
	c.count("lines", len(l.Lines), maxLogLines)
	for _, ln := range l.Lines {
		c.text("lines.stream", ln.Stream, maxShort)
		c.free("lines.text", ln.Text, maxLogLine)
	}
	return c.result(TypeLogs)
}

// Validate checks a rollout stage report.
func (s StageReport) Validate() error {
	var c fieldCheck
	c.text("environmentId", s.EnvironmentID, maxShort)
	c.text("deploymentId", s.DeploymentID, maxShort)
	c.text("service", s.Service, maxName)
	c.text("stage", s.Stage, maxShort)
	c.free("detail", s.Detail, maxMessage)
	c.nonNegative("release", s.Release)
	c.nonNegative("ready", s.Ready)
	c.nonNegative("desired", s.Desired)
	return c.result(TypeStage)
}

// Validate checks an upgrade's result.
func (r AgentUpgradeResult) Validate() error {
	var c fieldCheck
	c.text("id", r.ID, maxShort)
	c.text("version", r.Version, maxShort)
	c.free("error", r.Error, maxMessage)
	return c.result(TypeAgentUpgradeResult)
}

// Validate checks a heartbeat (it has no text).
func (Heartbeat) Validate() error { return nil }

// DecodeValid reads an envelope's payload strictly into v and checks it:
// the payload must be valid UTF-8 (JSON decoding would otherwise replace
// invalid bytes silently) and v's own rules must hold. A broken rule is an
// ErrInvalidFrame naming the field; a payload that is no such message is an
// ErrMalformed.
func DecodeValid(e Envelope, v Validator) error {
	if !utf8.Valid(e.Payload) {
		return fmt.Errorf("%w: %s: the payload is not valid UTF-8", ErrInvalidFrame, e.Type)
	}
	if err := DecodePayload(e, v); err != nil {
		return err
	}
	return v.Validate()
}

// refuse tells the agent why its frame is refused, before the connection
// closes; it returns the reason to close with.
func refuse(c *conn, err error) string {
	code := "malformed_frame"
	if errors.Is(err, ErrInvalidFrame) {
		code = "invalid_frame"
	}
	if msg, merr := Encode(TypeError, "", ErrorMessage{Code: code, Message: truncate(err.Error(), 1000)}); merr == nil {
		_ = c.send(msg)
	}
	return err.Error()
}

// Storable makes free text from the cluster (container output, event
// messages) acceptable in a frame: invalid UTF-8 and NUL become U+FFFD, and
// text longer than max bytes is cut at a character boundary. Agents send
// such text through it so that an odd byte in a container's output never
// gets their frames refused.
func Storable(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) > max {
		n := max
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return s
}

// MaxLogLine and MaxMessage bound a log line's text and an event message.
const (
	MaxLogLine = maxLogLine
	MaxMessage = maxMessage
)

// ParseLogLine reads a line of the Kubernetes log API with timestamps on
// ("2026-11-30T00:00:00.000000000Z text"), making it storable whatever the
// container wrote; a line without a timestamp gets now.
func ParseLogLine(s string) LogLine {
	s = Storable(s, MaxLogLine)
	ts, rest, ok := strings.Cut(s, " ")
	if ok {
		if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			return LogLine{Time: t, Stream: "stdout", Text: rest}
		}
	}
	return LogLine{Time: time.Now().UTC(), Stream: "stdout", Text: s}
}
