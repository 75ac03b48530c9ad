package domain_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nebulactrl/nebulactrl/domain"
)

// The fast path of decoding (codec_fast.go) must return exactly what the
// strict decoder returns: these tests compare domain.Decode with
// referenceDecode, which is the strict decoder written out on its own.

var updateSeeds = flag.Bool("update-seeds", false, "rewrite testdata/fuzz/FuzzFastDecode from sample events of every type")

// customDecoded are the event types whose decoders are not the strict
// generic one (change sets read each change's own schema), so the reference
// does not describe them.
var customDecoded = map[string]bool{"changeset.opened": true, "changeset.changed": true}

// eventGoTypes maps each event type (but the custom decoded) to its Go
// type and the newest schema version it is written with.
var eventGoTypes = func() map[string]struct {
	t   reflect.Type
	max int
} {
	out := map[string]struct {
		t   reflect.Type
		max int
	}{}
	for _, typ := range domain.EventTypes() {
		if customDecoded[typ] {
			continue
		}
		e, err := domain.Decode(typ, 1, []byte(`{}`))
		if err != nil {
			panic(fmt.Sprintf("%s: %v", typ, err))
		}
		_, v, _, err := domain.Encode(e)
		if err != nil {
			panic(err)
		}
		out[typ] = struct {
			t   reflect.Type
			max int
		}{reflect.TypeOf(e), v}
	}
	return out
}()

// referenceDecode is the strict decoder: schema versions 1 to the newest
// read as one shape, with a json.Decoder that refuses unknown fields.
func referenceDecode(typ string, version int, payload []byte) (domain.Event, error) {
	gt, ok := eventGoTypes[typ]
	if !ok {
		return nil, fmt.Errorf("type %q has no reference", typ)
	}
	if version < 1 || version > gt.max {
		return nil, fmt.Errorf("schema version %d is unknown", version)
	}
	v := reflect.New(gt.t)
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v.Interface()); err != nil {
		return nil, err
	}
	return v.Elem().Interface().(domain.Event), nil
}

// fastTypes are the event types with a fast reader.
func fastTypes() []string {
	var out []string
	for _, typ := range domain.EventTypes() {
		if domain.FastReaderOf(typ) != nil {
			out = append(out, typ)
		}
	}
	slices.Sort(out)
	return out
}

// requireSameDecode fails unless Decode and the reference agree on payload:
// both refuse it, or both read the same value. It also holds the fast
// reader alone to that: what it accepts, the reference reads the same.
func requireSameDecode(t testing.TB, typ string, version int, payload []byte) {
	t.Helper()
	want, wantErr := referenceDecode(typ, version, payload)
	got, err := domain.Decode(typ, version, payload)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%s schema %d %q: Decode error %v, strict decoder error %v", typ, version, payload, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%s schema %d %q: Decode read\n%#v\nthe strict decoder\n%#v", typ, version, payload, got, want)
	}
	if read := domain.FastReaderOf(typ); read != nil {
		// The fast reader reads a payload; the schema version is Decode's.
		want, wantErr := referenceDecode(typ, 1, payload)
		fast, ok := read(payload)
		if ok && wantErr != nil {
			t.Fatalf("%s %q: the fast reader accepts what the strict decoder refuses (%v)", typ, payload, wantErr)
		}
		if ok && !reflect.DeepEqual(fast, want) {
			t.Fatalf("%s %q: the fast reader read\n%#v\nthe strict decoder\n%#v", typ, payload, fast, want)
		}
	}
}

// sample fills every field of a value of type t, variant choosing the
// values: 0 plain (what the fast path reads), 1 with strings that the
// fast path leaves to the strict decoder (escapes, non-ASCII) and empty
// slices, 2 with nils and zero values where a field allows them.
func sample(t reflect.Type, variant, depth int) reflect.Value {
	v := reflect.New(t).Elem()
	switch {
	case t == reflect.TypeFor[time.Time]():
		at := time.Date(2026, 3, 4, 5, 6, 7, 891_000_000, time.UTC)
		if variant == 1 {
			at = at.In(time.FixedZone("", 2*3600))
		}
		v.Set(reflect.ValueOf(at))
	case t == reflect.TypeFor[json.RawMessage]():
		raw := `{"kind":"service","spec":{"replicas":2,"ports":[8080,-1.5e3],"on":true,"off":false,"none":null,"s":"x\"\u00e9"}}`
		if variant == 2 {
			raw = `null`
		}
		v.SetBytes([]byte(raw))
	case t.Kind() == reflect.String:
		s := []string{"a-" + t.Name(), "é <&> \"quoted\"\n\u2028", ""}[variant]
		v.SetString(s)
	case t.Kind() == reflect.Int || t.Kind() == reflect.Int64 || t.Kind() == reflect.Int32:
		v.SetInt([]int64{42, -7, 0}[variant])
	case t.Kind() == reflect.Bool:
		v.SetBool(variant != 2)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
		v.SetBytes([][]byte{{1, 2, 250}, {}, nil}[variant])
	case t.Kind() == reflect.Slice:
		if depth > 4 || variant == 2 {
			break
		}
		n := 2
		if variant == 1 {
			n = 0
		}
		s := reflect.MakeSlice(t, 0, n)
		for i := 0; i < n; i++ {
			s = reflect.Append(s, sample(t.Elem(), variant, depth+1))
		}
		v.Set(s)
	case t.Kind() == reflect.Map:
		if depth > 4 || variant == 2 {
			break
		}
		m := reflect.MakeMap(t)
		m.SetMapIndex(sample(t.Key(), variant, depth+1), sample(t.Elem(), variant, depth+1))
		v.Set(m)
	case t.Kind() == reflect.Pointer:
		if depth > 4 || variant == 2 {
			break
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(sample(t.Elem(), variant, depth+1))
		v.Set(p)
	case t.Kind() == reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if t.Field(i).IsExported() {
				v.Field(i).Set(sample(t.Field(i).Type, variant, depth+1))
			}
		}
	}
	return v
}

// sampleEvents returns, for every event type the reference describes, its
// events of each sample variant, encoded.
func sampleEvents(t testing.TB) map[string][][]byte {
	t.Helper()
	out := map[string][][]byte{}
	for typ, gt := range eventGoTypes {
		for variant := 0; variant < 3; variant++ {
			e := sample(gt.t, variant, 0).Interface().(domain.Event)
			gotTyp, _, payload, err := domain.Encode(e)
			require.NoError(t, err)
			require.Equal(t, typ, gotTyp)
			out[typ] = append(out[typ], payload)
		}
	}
	return out
}

// Real events of every type decode as the strict decoder reads them, and
// the plain ones of the types with a fast reader take the fast path (else
// it would be correct only by always giving up).
func TestFastDecodeMatchesStrictOnSampleEvents(t *testing.T) {
	t.Parallel()
	samples := sampleEvents(t)
	require.Len(t, samples, len(domain.EventTypes())-len(customDecoded))
	for typ, payloads := range samples {
		for variant, payload := range payloads {
			for version := 0; version <= eventGoTypes[typ].max+1; version++ {
				requireSameDecode(t, typ, version, payload)
			}
			if read := domain.FastReaderOf(typ); read != nil && variant != 1 {
				_, ok := read(payload)
				require.True(t, ok, "the fast reader of %s gives up on the plain event %s", typ, payload)
			}
		}
	}
	// The rebuild benchmark's events take the fast path too.
	for _, e := range replayMix(t, 2000) {
		requireSameDecode(t, e.typ, e.version, e.payload)
		if read := domain.FastReaderOf(e.typ); read != nil {
			_, ok := read(e.payload)
			require.True(t, ok, "the fast reader of %s gives up on %s", e.typ, e.payload)
		}
	}
}

// Payloads at the edges of what the strict decoder accepts read the same
// with the fast path: encoding/json matches keys without regard to case,
// lets a duplicate key's last value win, ignores what follows the first
// value, replaces invalid UTF-8, and leaves fields alone on null.
func TestFastDecodeMatchesStrictOnEdgeCases(t *testing.T) {
	t.Parallel()
	payloads := []string{
		``, ` `, `null`, ` null `, `[]`, `"x"`, `1`, `{}`, ` {} `, `{}x`, `{} {}`, `{}}`, `{`, `{"deploymentId"}`,
		`{"deploymentId":"d"}`, `{"DeploymentId":"d"}`, `{"deploymentid":"d"}`, `{"DEPLOYMENTID":"d"}`,
		`{"deploymentId":"d","deploymentId":"e"}`, `{"deploymentId":"d","DeploymentID":"e"}`,
		`{"deploymentId":"d",}`, `{,"deploymentId":"d"}`, `{"deploymentId":"d" "reason":"r"}`,
		`{"deploymentId":null}`, `{"deploymentId":5}`, `{"deploymentId":true}`, `{"deploymentId":["d"]}`,
		`{"deploymentId":"a\"b"}`, `{"deploymentId":"a\u00e9"}`, `{"deploymentId":"\ud800"}`, `{"deploymentId":"a\x"}`,
		"{\"deploymentId\":\"\xff\"}", "{\"deploymentId\":\"\xc3\xa9\"}", "{\"deploymentId\":\"\xed\xa0\x80\"}",
		"{\"deploymentId\":\"a\tb\"}", "{\"\u017ftage\":\"probing\"}", `{"\u017ftage":"probing"}`, "{\"\u212aey\":\"k\"}", "{\"deploymentİd\":\"d\"}",
		`{"unknown":1}`, `{"deploymentId":"d","unknown":{}}`, `{"reason":"r"}`, `{"stage":"probing","ready":3,"desired":-0}`,
		`{"ready":01}`, `{"ready":1.0}`, `{"ready":1e2}`, `{"ready":-}`, `{"ready":9223372036854775807}`,
		`{"ready":9223372036854775808}`, `{"ready":123456789012345678}`, `{"ready":-123456789012345678}`, `{"ready":"3"}`,
		`{"ready":null}`, `{"ready":true}`, `{"at":null}`, `{"at":"2026-01-02T03:04:05Z"}`, `{"at":"2026-01-02T03:04:05.123456789+02:00"}`,
		`{"at":"2026-01-02"}`, `{"at":5}`, `{"at":"2026-01-02T03:04:05\u005a"}`, `{"at":"2026-13-02T03:04:05Z"}`,
		`{"rollback":true}`, `{"rollback":false}`, `{"rollback":null}`, `{"rollback":"true"}`, `{"rollback":tru}`, `{"rollback":truex}`,
		`{"variables":[]}`, `{"variables":null}`, `{"variables":[null]}`, `{"variables":[{}]}`, `{"variables":[{"name":"A"},]}`,
		`{"variables":[,]}`, `{"variables":[{"name":"A"} {"name":"B"}]}`, `{"variables":{"name":"A"}}`, `{"variables":"x"}`,
		`{"variables":[{"name":"A"}],"variables":[{"value":"B"}]}`, `{"variables":[{"name":"A","secret":{"dataKeyId":"k"},"secret":{"ciphertext":"AQI="}}]}`,
		`{"variables":[{"name":"A","secret":null}]}`, `{"variables":[{"name":"A","secret":{}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":"AQI="}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":"AQI"}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":""}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":null}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":[1,2]}}]}`,
		`{"variables":[{"name":"A","secret":{"dataKeyId":"k","ciphertext":"A\/I="}}]}`,
		`{"processes":[{"name":"web","command":[],"port":80,"replicas":1,"healthCheck":null}]}`,
		`{"processes":[{"name":"web","command":null,"healthCheck":{"path":"/","port":80,"initialDelaySeconds":1,"periodSeconds":2}}]}`,
		`{"processes":[{"name":"web","command":["a",null,"b"]}]}`, `{"removed":["a","b"]}`, `{"removed":[1]}`,
		`{"document":null}`, `{"document":{}}`, `{"document":[]}`, `{"document":" x "}`, `{"document": {"a" : [1, 2.5e-3, -0, true, false, null] } }`,
		`{"document":{"a":01}}`, `{"document":{"a":1.}}`, `{"document":{"a":.5}}`, `{"document":{"a":1e}}`, `{"document":{"a":"\q"}}`,
		`{"document":{"a":"\u12"}}`, `{"document":{"a":"\u12G4"}}`, "{\"document\":{\"a\":\"\xff\"}}", `{"document":{"a":}}`,
		`{"document":{"a":1,}}`, `{"document":[1,]}`, `{"document":[1 2]}`, `{"document":{"A\u00e9":1}}`, `{"document":nul}`,
		`{"set":[{"key":"k","value":{"x":1}}]}`, `{"set":[{"key":"k"}]}`, `{"set":[{"key":"k","value":null}]}`, `{"set":[]}`,
		`{"set":[{"key":"k","value":1,"value":2}]}`, `{"set":[{"Key":"k","VALUE":"v"}]}`, "{\"set\":[{\"\u212aey\":\"k\"}]}",
		"{\"environmentId\":\"e\"}\n", "\t\r\n{\"environmentId\":\"e\"}\t\r\n", "{\"environmentId\":\"e\"}\f",
		`{"number":2,"base":1,"hash":"h"}`, `{"number":2,"base":1,"hash":"h"} trailing`,
		strings.Repeat(`{"document":`, 70) + `1` + strings.Repeat(`}`, 70),
		`{"document":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `}`,
		`{"document":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 99) + `}`,
	}
	for _, typ := range fastTypes() {
		for _, p := range payloads {
			for version := 0; version <= 3; version++ {
				requireSameDecode(t, typ, version, []byte(p))
			}
		}
	}
}

// Seeds: a real event of each type in each sample variant. go test runs them
// as part of FuzzFastDecode; -update-seeds rewrites them.
func TestFuzzSeedsCoverEveryEventType(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzFastDecode")
	if *updateSeeds {
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for typ, payloads := range sampleEvents(t) {
			for variant, p := range payloads {
				seed := fmt.Sprintf("go test fuzz v1\nstring(%s)\nint(%d)\n[]byte(%s)\n", strconv.Quote(typ), eventGoTypes[typ].max, strconv.Quote(string(p)))
				require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d", typ, variant)), []byte(seed), 0o644))
			}
		}
	}
	seeded := map[string]bool{}
	files, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name()))
		require.NoError(t, err)
		lines := strings.Split(string(b), "\n")
		require.GreaterOrEqual(t, len(lines), 4, f.Name())
		typ, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		require.NoError(t, err, f.Name())
		seeded[typ] = true
	}
	for typ := range eventGoTypes {
		require.True(t, seeded[typ], "no fuzz seed of %s (go test ./domain -run FuzzSeeds -update-seeds)", typ)
	}
}

// FuzzFastDecode: for any payload, Decode of its type and of every type with
// a fast reader reads what the strict decoder reads, or fails as it does.
func FuzzFastDecode(f *testing.F) {
	f.Add("deployment.succeeded", 1, []byte(`{"DeploymentID":"d"}`))
	f.Add("revision.compiled", 2, []byte(`{"set":[{"key":"k","value":{"a":[1,"x"]}}],"number":3}`))
	fast := fastTypes()
	f.Fuzz(func(t *testing.T, typ string, version int, payload []byte) {
		if _, ok := eventGoTypes[typ]; ok && domain.FastReaderOf(typ) == nil {
			requireSameDecode(t, typ, version, payload)
		}
		for _, ft := range fast {
			requireSameDecode(t, ft, version, payload)
			requireSameDecode(t, ft, 1, payload)
		}
	})
}
