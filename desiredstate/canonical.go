package desiredstate

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

var (
	// ErrUnsupportedSchema marks a document written for a schema version this
	// build does not understand; an agent that sees it needs upgrading.
	ErrUnsupportedSchema = errors.New("desiredstate: unsupported schema version")
	// ErrInvalid marks a document that is well-formed JSON but breaks an
	// invariant of the format (duplicate names, a held service with a
	// release, ...).
	ErrInvalid = errors.New("desiredstate: invalid document")
)

// Canonical returns the canonical encoding of d: the document normalised
// (services, processes, variables and domains sorted; empty lists written
// the same way whether nil or empty) and encoded as compact JSON without HTML
// escaping. Two documents that mean the same encode to the same bytes.
//
// d itself is not modified: normalising works on copies of the slices it
// has to reorder. A document that breaks an invariant (see Validate) has no
// canonical form and returns an error wrapping ErrInvalid or
// ErrUnsupportedSchema.
func (d Document) Canonical() ([]byte, error) {
	var buf bytes.Buffer
	if err := d.encode(&buf); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Hash returns "sha256:" followed by the hex SHA-256 of the canonical
// encoding. Equal hashes mean equal documents, which is what lets the control
// plane skip recording a revision that changes nothing.
func (d Document) Hash() (string, error) {
	// Stream into the hash rather than hashing Canonical(): encoding/json
	// reuses its internal buffer between calls, so a large environment is
	// hashed without allocating a second copy of the document.
	h := sha256.New()
	w := &holdLastByte{w: h}
	if err := d.encode(w); err != nil {
		return "", err
	}
	if !w.held || w.last != '\n' {
		return "", errors.New("desiredstate: encoder did not end the document with a newline")
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// encode writes the canonical encoding followed by the newline that
// json.Encoder always appends.
func (d Document) encode(w io.Writer) error {
	n := normalize(d)
	if err := n.validate(); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	// Host names, commands and values may contain <, > and &; escaping them
	// would be harmless but is noise: nobody reads the document through HTML.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(n); err != nil {
		return fmt.Errorf("desiredstate: encode: %w", err)
	}
	return nil
}

// holdLastByte passes everything but the very last byte written on to w, so
// the newline json.Encoder appends never reaches the hash, however the
// encoder splits its writes.
type holdLastByte struct {
	w    io.Writer
	last byte
	held bool
}

func (x *holdLastByte) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if x.held {
		if _, err := x.w.Write([]byte{x.last}); err != nil {
			return 0, err
		}
	}
	if _, err := x.w.Write(p[:len(p)-1]); err != nil {
		return 0, err
	}
	x.last, x.held = p[len(p)-1], true
	return len(p), nil
}

// Validate reports whether d keeps the invariants of the format. It checks
// structure, not content: names are validated where they are set.
func (d Document) Validate() error {
	return normalize(d).validate()
}

// Decode parses a document received from the network. It is strict: unknown
// fields, trailing data, an unsupported schema version and broken invariants
// are errors. The result is normalised, so its slices are in canonical order.
//
// Field names are matched case-insensitively and a repeated key keeps its
// last value: that is encoding/json's behaviour and cannot be switched off.
// It does not weaken the hash, which is always taken over the canonical
// re-encoding.
func Decode(b []byte) (Document, error) {
	// Read the version on its own first, with unknown fields allowed, so a
	// document from a newer control plane is reported as a version mismatch
	// rather than as an unknown field.
	var probe struct {
		SchemaVersion *int `json:"schemaVersion"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Document{}, fmt.Errorf("desiredstate: decode: %w", err)
	}
	switch {
	case probe.SchemaVersion == nil:
		return Document{}, fmt.Errorf("%w: the document has no schemaVersion", ErrUnsupportedSchema)
	case *probe.SchemaVersion != SchemaVersion:
		return Document{}, fmt.Errorf("%w: the document has schema version %d, this build understands version %d",
			ErrUnsupportedSchema, *probe.SchemaVersion, SchemaVersion)
	}

	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d Document
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("desiredstate: decode: %w", err)
	}
	// json.Unmarshal above already rejects trailing data; this is the
	// belt-and-braces check for the streaming decoder, which would not.
	if _, err := dec.Token(); err != io.EOF {
		return Document{}, fmt.Errorf("%w: trailing data after the document", ErrInvalid)
	}
	n := normalize(d)
	if err := n.validate(); err != nil {
		return Document{}, err
	}
	return n, nil
}

// normalize returns d in canonical shape. It never writes to d's slices: the
// services slice is always copied, and a service's own slices are copied
// only when they need reordering, so already-canonical input (what the
// compiler produces) costs one allocation.
func normalize(d Document) Document {
	svcs := make([]Service, len(d.Services))
	copy(svcs, d.Services)
	for i := range svcs {
		svcs[i] = normalizeService(svcs[i])
	}
	// Names are unique in a valid document; the ID tie-break only keeps the
	// order total so validate reports duplicates the same way every time.
	slices.SortStableFunc(svcs, func(a, b Service) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	d.Services = svcs
	return d
}

func normalizeService(s Service) Service {
	// omitempty writes nil and empty alike, so decoding gives nil back;
	// making them nil here keeps decode(encode(d)) equal to d.
	if len(s.Processes) == 0 {
		s.Processes = nil
	} else if !slices.IsSortedFunc(s.Processes, byProcessName) || hasEmptyCommand(s.Processes) {
		s.Processes = slices.Clone(s.Processes)
		slices.SortStableFunc(s.Processes, byProcessName)
		for i := range s.Processes {
			if len(s.Processes[i].Command) == 0 {
				s.Processes[i].Command = nil
			}
		}
	}
	if len(s.Variables) == 0 {
		s.Variables = nil
	} else if !slices.IsSortedFunc(s.Variables, byVariableName) {
		s.Variables = slices.Clone(s.Variables)
		slices.SortStableFunc(s.Variables, byVariableName)
	}
	if len(s.Domains) == 0 {
		s.Domains = nil
	} else if !slices.IsSorted(s.Domains) {
		s.Domains = slices.Clone(s.Domains)
		slices.Sort(s.Domains)
	}
	return s
}

func byProcessName(a, b Process) int   { return strings.Compare(a.Name, b.Name) }
func byVariableName(a, b Variable) int { return strings.Compare(a.Name, b.Name) }

func hasEmptyCommand(ps []Process) bool {
	for _, p := range ps {
		if p.Command != nil && len(p.Command) == 0 {
			return true
		}
	}
	return false
}

// validate checks a normalised document. Duplicates are rejected rather than
// tolerated because two entries with the same name have no canonical order:
// the document's bytes would depend on how it was built.
func (d Document) validate() error {
	if d.SchemaVersion != SchemaVersion {
		return fmt.Errorf("%w: the document has schema version %d, this build understands version %d",
			ErrUnsupportedSchema, d.SchemaVersion, SchemaVersion)
	}
	for i, s := range d.Services {
		if s.Name == "" {
			return invalidf("service %q has no name", s.ID)
		}
		if i > 0 && d.Services[i-1].Name == s.Name {
			return invalidf("service name %q appears more than once", s.Name)
		}
		if err := validateService(s); err != nil {
			return err
		}
	}
	return nil
}

func validateService(s Service) error {
	if s.Held {
		if s.HeldReason == "" {
			return invalidf("service %s is held without a reason", s.Name)
		}
		// A held service must not tell the agent anything to run: the agent
		// keeps the service as it is.
		if s.Release != nil || s.Processes != nil || s.Variables != nil || s.Domains != nil {
			return invalidf("service %s is held but carries a release or configuration", s.Name)
		}
		return nil
	}
	if s.HeldReason != "" {
		return invalidf("service %s has a held reason but is not held", s.Name)
	}
	if s.Release == nil {
		return invalidf("service %s has no release", s.Name)
	}
	for i, p := range s.Processes {
		if p.Name == "" {
			return invalidf("service %s has a process without a name", s.Name)
		}
		if i > 0 && s.Processes[i-1].Name == p.Name {
			return invalidf("service %s has more than one process named %s", s.Name, p.Name)
		}
	}
	for i, v := range s.Variables {
		if v.Name == "" {
			return invalidf("service %s has a variable without a name", s.Name)
		}
		if i > 0 && s.Variables[i-1].Name == v.Name {
			return invalidf("service %s has more than one variable named %s", s.Name, v.Name)
		}
		if v.Secret != nil {
			if v.Value != "" {
				return invalidf("service %s: variable %s has both a value and a secret", s.Name, v.Name)
			}
			if v.Secret.DataKeyID == "" || len(v.Secret.Ciphertext) == 0 {
				return invalidf("service %s: secret %s is incomplete", s.Name, v.Name)
			}
		}
	}
	for i, h := range s.Domains {
		if h == "" {
			return invalidf("service %s has an empty domain", s.Name)
		}
		if i > 0 && s.Domains[i-1] == h {
			return invalidf("service %s lists domain %s more than once", s.Name, h)
		}
	}
	return nil
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
