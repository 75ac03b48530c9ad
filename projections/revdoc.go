package projections

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/desiredstate"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
)

// A desired-state document is recorded as objects, so that a revision
// records only the objects that changed (revision.compiled, schema 2) and the
// revisions read model keeps versioned rows of them (revision_objects). The
// keys: "environment" (schema version and environment), "service/<id>" (a
// service without its variables) and "variable/<service id>/<name>".
const (
	keyEnvironment = "environment"
	keyService     = "service/"
	keyVariable    = "variable/"
)

type documentHeader struct {
	SchemaVersion int                      `json:"schemaVersion"`
	Environment   desiredstate.Environment `json:"environment"`
}

// encodeObject encodes v as the canonical encoding does (no HTML escaping).
func encodeObject(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))), nil
}

// SplitDocument cuts a document into its objects, each encoded alone.
func SplitDocument(doc desiredstate.Document) (map[string]json.RawMessage, error) {
	objs := make(map[string]json.RawMessage, 1+len(doc.Services))
	var err error
	if objs[keyEnvironment], err = encodeObject(documentHeader{SchemaVersion: doc.SchemaVersion, Environment: doc.Environment}); err != nil {
		return nil, err
	}
	for _, s := range doc.Services {
		for _, v := range s.Variables {
			if objs[keyVariable+s.ID+"/"+v.Name], err = encodeObject(v); err != nil {
				return nil, err
			}
		}
		s.Variables = nil
		if objs[keyService+s.ID], err = encodeObject(s); err != nil {
			return nil, err
		}
	}
	return objs, nil
}

// splitStored cuts a recorded whole document (revision.compiled, schema 1)
// into its objects as they are stored, field for field: without decoding it
// into this build's types, so that a document an earlier version wrote
// projects whatever this build would make of it (migration 00011 cuts the
// same way).
func splitStored(doc json.RawMessage) (map[string]json.RawMessage, error) {
	var top struct {
		SchemaVersion json.RawMessage              `json:"schemaVersion"`
		Environment   json.RawMessage              `json:"environment"`
		Services      []map[string]json.RawMessage `json:"services"`
	}
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, err
	}
	objs := make(map[string]json.RawMessage, 1+len(top.Services))
	head, err := json.Marshal(map[string]json.RawMessage{"schemaVersion": orNull(top.SchemaVersion), "environment": orNull(top.Environment)})
	if err != nil {
		return nil, err
	}
	objs[keyEnvironment] = head
	for _, s := range top.Services {
		var id string
		_ = json.Unmarshal(s["id"], &id)
		var vars []map[string]json.RawMessage
		_ = json.Unmarshal(s["variables"], &vars)
		for _, v := range vars {
			var name string
			_ = json.Unmarshal(v["name"], &name)
			b, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			objs[keyVariable+id+"/"+name] = b
		}
		delete(s, "variables")
		b, err := json.Marshal(s)
		if err != nil {
			return nil, err
		}
		objs[keyService+id] = b
	}
	return objs, nil
}

func orNull(m json.RawMessage) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	return m
}

// JoinDocument puts a document together from its objects, normalised as
// desiredstate.Decode returns documents. Objects read back from jsonb are
// accepted: only their meaning counts.
func JoinDocument(objs map[string]json.RawMessage) (desiredstate.Document, error) {
	var doc desiredstate.Document
	head, ok := objs[keyEnvironment]
	if !ok {
		return doc, errors.New("the document has no environment object")
	}
	var h documentHeader
	if err := json.Unmarshal(head, &h); err != nil {
		return doc, fmt.Errorf("the environment object: %w", err)
	}
	doc.SchemaVersion, doc.Environment = h.SchemaVersion, h.Environment
	index := map[string]int{}
	for _, k := range sortedKeys(objs) {
		if id, ok := strings.CutPrefix(k, keyService); ok {
			var s desiredstate.Service
			if err := json.Unmarshal(objs[k], &s); err != nil {
				return doc, fmt.Errorf("object %s: %w", k, err)
			}
			if s.ID != id {
				return doc, fmt.Errorf("object %s holds service %s", k, s.ID)
			}
			index[id] = len(doc.Services)
			doc.Services = append(doc.Services, s)
		}
	}
	for _, k := range sortedKeys(objs) {
		rest, ok := strings.CutPrefix(k, keyVariable)
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, "/")
		i, ok := index[id]
		if !ok {
			return doc, fmt.Errorf("object %s belongs to no service of the document", k)
		}
		var v desiredstate.Variable
		if err := json.Unmarshal(objs[k], &v); err != nil {
			return doc, fmt.Errorf("object %s: %w", k, err)
		}
		doc.Services[i].Variables = append(doc.Services[i].Variables, v)
	}
	canonical, err := doc.Canonical()
	if err != nil {
		return doc, err
	}
	return desiredstate.Decode(canonical)
}

// DiffObjects returns what turns the objects prev into next: the objects new
// or changed (sorted by key) and the keys of those gone (sorted). Both sides
// must be encoded by SplitDocument.
func DiffObjects(prev, next map[string]json.RawMessage) ([]domain.RevisionObject, []string) {
	var set []domain.RevisionObject
	var removed []string
	for _, k := range sortedKeys(next) {
		if old, ok := prev[k]; !ok || !bytes.Equal(old, next[k]) {
			set = append(set, domain.RevisionObject{Key: k, Value: next[k]})
		}
	}
	for _, k := range sortedKeys(prev) {
		if _, ok := next[k]; !ok {
			removed = append(removed, k)
		}
	}
	return set, removed
}

// applyRevision folds a revision event into the objects of the revision
// before it.
func applyRevision(objs map[string]json.RawMessage, rc domain.RevisionCompiled) (map[string]json.RawMessage, error) {
	if rc.Whole() {
		doc, err := desiredstate.Decode(rc.Document)
		if err != nil {
			return nil, fmt.Errorf("revision %d of %s: %w", rc.Number, rc.EnvironmentID, err)
		}
		return SplitDocument(doc)
	}
	if rc.Base == 0 {
		objs = map[string]json.RawMessage{}
	}
	for _, k := range rc.Removed {
		delete(objs, k)
	}
	for _, o := range rc.Set {
		objs[o.Key] = o.Value
	}
	return objs, nil
}

// RevisionHash returns the document hash revision n of an environment
// recorded; ErrNoRevision when there is no such revision.
func RevisionHash(ctx context.Context, q eventstore.Querier, envID string, n int) (string, error) {
	var hash string
	err := q.QueryRow(ctx, `SELECT coalesce(payload->>'hash', '') FROM events WHERE stream_id = $1 AND stream_version = $2`,
		domain.RevisionStream(envID), n).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNoRevision
	}
	if err != nil {
		return "", fmt.Errorf("reading the hash of revision %d of %s: %w", n, envID, err)
	}
	return hash, nil
}

// Document is DocumentAt's document alone, for the reactions.
func Document(ctx context.Context, q eventstore.Querier, envID string, n int) (desiredstate.Document, error) {
	rev, err := DocumentAt(ctx, q, envID, n)
	return rev.Document, err
}

// DocumentAt returns revision n of an environment (0: the latest), whole.
// The objects valid at n come from the revisions read model; revisions
// recorded but not projected yet are folded in from their events; the result
// is checked against the hash the revision event recorded, and rebuilt from
// the events alone (the facts) when the read model disagrees with it.
func DocumentAt(ctx context.Context, q eventstore.Querier, envID string, n int) (api.Revision, error) {
	var rev api.Revision
	var hash string
	var projected int
	// The revision event (the latest for 0) and how far the read model got.
	err := q.QueryRow(ctx, `SELECT stream_version, payload->>'hash', occurred_at,
			(SELECT coalesce(max(number), 0) FROM revisions WHERE environment_id = $3)
		FROM events WHERE stream_id = $1 AND ($2 = 0 OR stream_version = $2)
		ORDER BY stream_version DESC LIMIT 1`, domain.RevisionStream(envID), n, envID).Scan(&rev.Number, &hash, &rev.CompiledAt, &projected)
	if errors.Is(err, pgx.ErrNoRows) {
		return rev, ErrNoRevision
	}
	if err != nil {
		return rev, fmt.Errorf("reading revisions of %s: %w", envID, err)
	}
	rev.EnvironmentID, rev.Hash = envID, hash
	from := min(projected, rev.Number)
	objs, err := objectsAt(ctx, q, envID, from)
	if err != nil {
		return rev, err
	}
	doc, err := foldRevisions(ctx, q, envID, objs, from, rev.Number, hash)
	if err != nil && from > 0 {
		// The read model does not give the recorded document: the events do.
		objs = map[string]json.RawMessage{}
		doc, err = foldRevisions(ctx, q, envID, objs, 0, rev.Number, hash)
	}
	if err != nil {
		return rev, err
	}
	rev.Document = doc
	return rev, nil
}

// objectsAt reads the objects of revision n from the read model (none for 0).
func objectsAt(ctx context.Context, q eventstore.Querier, envID string, n int) (map[string]json.RawMessage, error) {
	objs := map[string]json.RawMessage{}
	if n == 0 {
		return objs, nil
	}
	rows, err := q.Query(ctx, `SELECT key, value FROM revision_objects
		WHERE environment_id = $1 AND coalesce(to_number, 2147483647) > $2 AND from_number <= $2`, envID, n)
	if err != nil {
		return nil, fmt.Errorf("reading revision %d of %s: %w", n, envID, err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		objs[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading revision %d of %s: %w", n, envID, err)
	}
	return objs, nil
}

// foldRevisions applies the revision events after from up to to onto the
// objects of revision from, and checks the result against hash.
func foldRevisions(ctx context.Context, q eventstore.Querier, envID string, objs map[string]json.RawMessage, from, to int, hash string) (desiredstate.Document, error) {
	if to > from {
		rows, err := q.Query(ctx, `SELECT event_type, schema_version, payload FROM events
			WHERE stream_id = $1 AND stream_version > $2 AND stream_version <= $3 ORDER BY stream_version`, domain.RevisionStream(envID), from, to)
		if err != nil {
			return desiredstate.Document{}, fmt.Errorf("reading revisions of %s: %w", envID, err)
		}
		var events []domain.RevisionCompiled
		for rows.Next() {
			var typ string
			var sv int16
			var payload []byte
			if err := rows.Scan(&typ, &sv, &payload); err != nil {
				rows.Close()
				return desiredstate.Document{}, err
			}
			ev, err := domain.Decode(typ, int(sv), payload)
			if err != nil {
				rows.Close()
				return desiredstate.Document{}, err
			}
			rc, ok := ev.(domain.RevisionCompiled)
			if !ok {
				rows.Close()
				return desiredstate.Document{}, fmt.Errorf("stream of %s holds a %s event", envID, typ)
			}
			events = append(events, rc)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return desiredstate.Document{}, fmt.Errorf("reading revisions of %s: %w", envID, err)
		}
		for _, rc := range events {
			if objs, err = applyRevision(objs, rc); err != nil {
				return desiredstate.Document{}, err
			}
		}
	}
	doc, err := JoinDocument(objs)
	if err != nil {
		return doc, fmt.Errorf("revision %d of %s: %w", to, envID, err)
	}
	got, err := doc.Hash()
	if err != nil {
		return doc, fmt.Errorf("revision %d of %s: %w", to, envID, err)
	}
	if got != hash {
		return doc, fmt.Errorf("revision %d of %s: the rebuilt document hashes to %s, the revision recorded %s", to, envID, got, hash)
	}
	return doc, nil
}

// revisionAt returns the number of the revision an environment had at time at.
func revisionAt(ctx context.Context, q eventstore.Querier, envID string, at time.Time) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT stream_version FROM events WHERE stream_id = $1 AND occurred_at <= $2
		ORDER BY stream_version DESC LIMIT 1`, domain.RevisionStream(envID), at).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, ErrNoRevision
	}
	if err != nil {
		return 0, fmt.Errorf("reading revisions of %s: %w", envID, err)
	}
	return n, nil
}
