package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// Stream names. Every aggregate instance is one stream.
func InstanceStream() string             { return "instance" }
func UserStream(id string) string        { return "user-" + id }
func OrgStream(id string) string         { return "org-" + id }
func ClusterStream(id string) string     { return "cluster-" + id }
func ProjectStream(id string) string     { return "project-" + id }
func RevisionStream(envID string) string { return "revisions-" + envID }
func DeploymentStream(id string) string  { return "deployment-" + id }
func ServerStream(id string) string      { return "server-" + id }

// StreamID splits a stream name into its kind and id ("project", "<uuid>").
func StreamID(stream string) (kind, id string) {
	kind, id, _ = strings.Cut(stream, "-")
	return kind, id
}

// NameClaim is a name that must be unique within its scope; the event store
// reserves it in the same transaction as the events that create it.
type NameClaim struct {
	Scope string
	Name  string
}

// Claim scopes.
func orgNameScope() string                 { return "organisation.name" }
func userEmailScope() string               { return "user.email" }
func projectNameScope(orgID string) string { return "org:" + orgID + ":project" }
func clusterNameScope(orgID string) string { return "org:" + orgID + ":cluster" }
func domainHostScope() string              { return "domain.host" }

// Decision is what a command decided: the events to append and the names to
// claim or give back with them.
type Decision struct {
	Events   []Event
	Claims   []NameClaim
	Releases []NameClaim
}

func decided(events ...Event) Decision { return Decision{Events: events} }

// Meta is the context every command carries.
type Meta struct {
	Actor Actor
	// Person is the user behind the actor (a user, or a token's owner); empty
	// for agents and system jobs.
	Person string
	// CommandID is unique per command; ids of things a command creates on its
	// own (such as the release of a variable change) derive from it.
	CommandID string
	// Now is the command's time, for expiry checks. Deciding never reads a clock.
	Now time.Time
}

// Validate checks the meta of a command.
func (m Meta) Validate() error {
	if err := m.Actor.Validate(); err != nil {
		return err
	}
	if m.CommandID == "" {
		return invalidf("command has no id")
	}
	if m.Now.IsZero() {
		return invalidf("command has no time")
	}
	return nil
}

// DeriveID makes a stable UUID-shaped id from a command id and parts, so that
// deciding the same command twice creates the same ids.
func DeriveID(commandID string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(commandID))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	b := h.Sum(nil)[:16]
	b[6] = (b[6] & 0x0f) | 0x80 // version 8: custom
	b[8] = (b[8] & 0x3f) | 0x80 // RFC 4122 variant
	s := hex.EncodeToString(b)
	return fmt.Sprintf("%s-%s-%s-%s-%s", s[0:8], s[8:12], s[12:16], s[16:20], s[20:32])
}

var uuidRE = func(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, r := range s {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
				return false
			}
		}
	}
	return true
}

// ValidateID checks that id is a lower-case UUID.
func ValidateID(kind, id string) error {
	if !uuidRE(id) {
		return invalidf("%s id %q is not a UUID", kind, id)
	}
	return nil
}
