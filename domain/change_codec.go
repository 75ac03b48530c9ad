package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// How a change set's events store their changes.
//
// Schema 1 of changeset.opened and changeset.changed (the code before change
// payloads) held the commands themselves, as a []Change: each change an
// object with one member named after its kind, {"scale": {...}}. A command
// could then not lose or rename a field without breaking the replay of the
// change sets that held it.
//
// Schema 2 holds, for each change, an envelope of its own kind and payload
// version:
//
//	{"kind": "scale", "version": 1, "payload": {...}}
//
// where the payload is the kind's payload type (change_<kind>.go), not the
// command. Version 1 of every kind's payload is exactly the JSON its command
// had in schema 1, so a schema 1 change {"scale": X} reads as the schema 2
// change {"kind": "scale", "version": 1, "payload": X}. A command may now
// change freely: its payload's command method maps the payload onto it. A
// payload that must change incompatibly gets a version 2 in changeCodecs,
// with its own decoder, and the decoder of version 1 stays to read the
// events already written (turning a version 1 payload into the newer type).

// changeCodec is one row of the change payloads' decode table: the payload
// version a kind is written with, and how to read each version ever written.
type changeCodec struct {
	version int
	decode  func(version int, payload []byte) (ChangeCommand, error)
}

// decodePayloadV1 reads version 1 of payload type T strictly.
func decodePayloadV1[T ChangeCommand](version int, payload []byte) (ChangeCommand, error) {
	if version != 1 {
		return nil, fmt.Errorf("payload version %d is unknown", version)
	}
	var p T
	if err := decodeStrict(payload, &p); err != nil {
		return nil, err
	}
	return p, nil
}

// changeCodecs is the one decode table of every change kind. Adding a kind
// means a file change_<kind>.go, a line here and a field in Change.
var changeCodecs = map[string]changeCodec{
	"setVariables":      {1, decodePayloadV1[SetVariablesPayload]},
	"unsetVariables":    {1, decodePayloadV1[UnsetVariablesPayload]},
	"addDomain":         {1, decodePayloadV1[AddDomainPayload]},
	"removeDomain":      {1, decodePayloadV1[RemoveDomainPayload]},
	"scale":             {1, decodePayloadV1[ScalePayload]},
	"deploy":            {1, decodePayloadV1[DeployPayload]},
	"rollback":          {1, decodePayloadV1[RollbackPayload]},
	"deleteService":     {1, decodePayloadV1[DeleteServicePayload]},
	"deleteEnvironment": {1, decodePayloadV1[DeleteEnvironmentPayload]},
	"deleteProject":     {1, decodePayloadV1[DeleteProjectPayload]},
	"updateEnvironment": {1, decodePayloadV1[UpdateEnvironmentPayload]},
}

// ChangeKinds lists every change kind.
func ChangeKinds() []string { return sortedKeys(changeCodecs) }

// changeEnvelope is one change in schema 2.
type changeEnvelope struct {
	Kind    string          `json:"kind"`
	Version int             `json:"version"`
	Payload json.RawMessage `json:"payload"`
}

func decodeStrict(payload []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// encodeChange is a change's schema 2 envelope.
func encodeChange(c ChangeCommand) (changeEnvelope, error) {
	if c == nil {
		return changeEnvelope{}, fmt.Errorf("a change set holds an empty change")
	}
	codec, ok := changeCodecs[c.Kind()]
	if !ok {
		return changeEnvelope{}, fmt.Errorf("change kind %q is not in the decode table", c.Kind())
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return changeEnvelope{}, fmt.Errorf("encoding a %s change: %w", c.Kind(), err)
	}
	return changeEnvelope{Kind: c.Kind(), Version: codec.version, Payload: payload}, nil
}

// decodeEnvelope reads a change of schema 2.
func decodeEnvelope(raw []byte) (ChangeCommand, error) {
	var env changeEnvelope
	if err := decodeStrict(raw, &env); err != nil {
		return nil, err
	}
	codec, ok := changeCodecs[env.Kind]
	if !ok {
		return nil, fmt.Errorf("change kind %q is unknown", env.Kind)
	}
	if env.Version < 1 || env.Version > codec.version {
		return nil, fmt.Errorf("%s payload version %d is unknown", env.Kind, env.Version)
	}
	if len(env.Payload) == 0 || string(env.Payload) == "null" {
		return nil, fmt.Errorf("%s change has no payload", env.Kind)
	}
	c, err := codec.decode(env.Version, env.Payload)
	if err != nil {
		return nil, fmt.Errorf("%s change: %w", env.Kind, err)
	}
	return c, nil
}

// decodeUnion reads a change of schema 1: one member, named after its kind,
// holding version 1 of its payload.
func decodeUnion(raw []byte) (ChangeCommand, error) {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, err
	}
	if len(members) != 1 {
		return nil, fmt.Errorf("a change has %d kinds, not one", len(members))
	}
	var kind string
	for k := range members {
		kind = k
	}
	codec, ok := changeCodecs[kind]
	if !ok {
		return nil, fmt.Errorf("change kind %q is unknown", kind)
	}
	if string(members[kind]) == "null" {
		return nil, fmt.Errorf("%s change has no payload", kind)
	}
	c, err := codec.decode(1, members[kind])
	if err != nil {
		return nil, fmt.Errorf("%s change: %w", kind, err)
	}
	return c, nil
}

// decodeChanges reads the changes of a change-set event of schema version.
func decodeChanges(version int, raws []json.RawMessage) (ChangeList, error) {
	if raws == nil {
		return nil, nil
	}
	decode := decodeEnvelope
	if version == 1 {
		decode = decodeUnion
	}
	out := make(ChangeList, len(raws))
	for i, raw := range raws {
		c, err := decode(raw)
		if err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		out[i] = c
	}
	return out, nil
}

// MarshalJSON writes the changes in the current schema (envelopes).
func (l ChangeList) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	out := make([]changeEnvelope, len(l))
	for i, c := range l {
		env, err := encodeChange(c)
		if err != nil {
			return nil, err
		}
		out[i] = env
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads changes of either schema, each change by its shape: an
// envelope has a kind member, a change of schema 1 has none. Events are not
// read this way (their decoders know their schema, see codec.go); state
// snapshots are, so that one taken before change payloads still loads.
func (l *ChangeList) UnmarshalJSON(b []byte) error {
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		return err
	}
	if raws == nil {
		*l = nil
		return nil
	}
	out := make(ChangeList, len(raws))
	for i, raw := range raws {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal(raw, &probe); err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
		decode := decodeUnion
		if _, ok := probe["kind"]; ok {
			decode = decodeEnvelope
		}
		c, err := decode(raw)
		if err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
		out[i] = c
	}
	*l = out
	return nil
}

// The change-set events' decoders: the fields besides the changes are the
// same in both schemas.

type changeSetOpenedJSON struct {
	ChangeSetID   string            `json:"changeSetId"`
	EnvironmentID string            `json:"environmentId"`
	Description   string            `json:"description"`
	Changes       []json.RawMessage `json:"changes"`
	OpenedBy      string            `json:"openedBy"`
}

type changeSetChangedJSON struct {
	ChangeSetID string            `json:"changeSetId"`
	Version     int               `json:"version"`
	Description string            `json:"description"`
	Changes     []json.RawMessage `json:"changes"`
}

// changeSetSchema is the schema version change-set events are written with.
const changeSetSchema = 2

func decodeChangeSetOpened(version int, payload []byte) (Event, error) {
	if version < 1 || version > changeSetSchema {
		return nil, fmt.Errorf("schema version %d is unknown", version)
	}
	var w changeSetOpenedJSON
	if err := decodeStrict(payload, &w); err != nil {
		return nil, err
	}
	changes, err := decodeChanges(version, w.Changes)
	if err != nil {
		return nil, err
	}
	return ChangeSetOpened{ChangeSetID: w.ChangeSetID, EnvironmentID: w.EnvironmentID, Description: w.Description, Changes: changes, OpenedBy: w.OpenedBy}, nil
}

func decodeChangeSetChanged(version int, payload []byte) (Event, error) {
	if version < 1 || version > changeSetSchema {
		return nil, fmt.Errorf("schema version %d is unknown", version)
	}
	var w changeSetChangedJSON
	if err := decodeStrict(payload, &w); err != nil {
		return nil, err
	}
	changes, err := decodeChanges(version, w.Changes)
	if err != nil {
		return nil, err
	}
	return ChangeSetChanged{ChangeSetID: w.ChangeSetID, Version: w.Version, Description: w.Description, Changes: changes}, nil
}
