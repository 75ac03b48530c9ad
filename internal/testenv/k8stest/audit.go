package k8stest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"
)

// AuditEvent is one request from the API server's audit log.
type AuditEvent struct {
	Verb string
	// Resource is the plural resource, with "/subresource" appended for a
	// subresource: "deployments", "pods/status", "serviceaccounts/token".
	Resource  string
	Namespace string
	Name      string
	User      string
	// Time is when the API server received the request.
	Time time.Time
	// Code is the response's HTTP status: a write RBAC refused is still a
	// write attempt, with Code 403.
	Code int
}

// auditLine is the part of an audit.k8s.io/v1 Event that WritesBy reads.
type auditLine struct {
	Stage string `json:"stage"`
	Verb  string `json:"verb"`
	User  struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// WritesBy returns the create, update, patch and delete requests (including
// deletecollection) the user made at or after since, in log order, so a test
// can assert that a component wrote only what it should. The audit log is
// written before each response is sent (blocking mode), so every request
// whose response the test has seen is already there.
func (c *Cluster) WritesBy(t testing.TB, user string, since time.Time) []AuditEvent {
	t.Helper()
	events, err := readWrites(c.AuditLog(), user, since)
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	return events
}

func readWrites(path, user string, since time.Time) ([]AuditEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the audit log: %w", err)
	}
	defer f.Close()
	// The log keeps microseconds; a request received in the same microsecond
	// as since must count as after it.
	since = since.Truncate(time.Microsecond)
	var events []AuditEvent
	sc := bufio.NewScanner(f)
	// Metadata-level events are small, but annotations can make a line long.
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var badLine error
	for n := 1; sc.Scan(); n++ {
		// Only the last line may be cut short: the API server may be writing
		// it right now.
		if badLine != nil {
			return nil, badLine
		}
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			badLine = fmt.Errorf("audit log %s line %d: %w", path, n, err)
			continue
		}
		if l.Stage != "ResponseComplete" || l.User.Username != user || l.RequestReceivedTimestamp.Before(since) {
			continue
		}
		switch l.Verb {
		case "create", "update", "patch", "delete", "deletecollection":
		default:
			continue
		}
		ev := AuditEvent{Verb: l.Verb, User: l.User.Username, Time: l.RequestReceivedTimestamp}
		if r := l.ObjectRef; r != nil {
			ev.Resource, ev.Namespace, ev.Name = r.Resource, r.Namespace, r.Name
			if r.Subresource != "" {
				ev.Resource += "/" + r.Subresource
			}
		}
		if l.ResponseStatus != nil {
			ev.Code = l.ResponseStatus.Code
		}
		events = append(events, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the audit log %s: %w", path, err)
	}
	return events, nil
}
