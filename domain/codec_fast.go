package domain

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// The fast path of decoding: hand-written readers, without reflection, of
// the event types a replay reads most (the deployment cycle: variables,
// release, deployment, revision). A rebuild decodes every stored event, and
// encoding/json's reflection and its Decoder's copy of each payload were
// most of a rebuild's CPU time.
//
// A fast reader reads only a plain subset of JSON, the one Encode writes:
//   - keys spelled exactly as the field's tag, each at most once;
//   - strings without escapes, in valid UTF-8 (a json.RawMessage field's
//     value is any valid JSON, kept as it is, as encoding/json keeps it);
//   - integers without fraction or exponent, of at most 18 digits;
//   - nesting at most fastMaxDepth deep, and nothing after the value but
//     white space.
//
// On anything else (a key of another case or spelling, a duplicate key, an
// escape, invalid UTF-8, a wrong type, a syntax error, trailing bytes) it
// gives up, and the strict decoder reads the payload from the start: its
// value or its error is the result. Within the subset the strict decoder's
// result is exactly the fast reader's, so Decode returns the same for every
// payload either way; codec_fast_test.go checks this against encoding/json
// for real events and fuzzed payloads.

// fastMaxDepth bounds the nesting of arrays and objects the fast path
// follows (encoding/json allows 10,000); stored events nest a few levels.
const fastMaxDepth = 64

// fastReader reads one payload. After it gave up (bad), every read returns
// a zero value at once, so the readers need not check after each step.
type fastReader struct {
	data  []byte
	pos   int
	depth int
	bad   bool
	// key is the key of the member that member last read.
	key []byte
}

// fieldSet records which fields of an object were read, to give up on a
// duplicate key (encoding/json reads both, the last one wins).
type fieldSet uint32

// withFastPath returns the decoder of an event type with a fast reader:
// schema versions 1 to max read with read, falling back to strict, which
// also decides every other version. A field added to such a type needs its
// case in the type's reader: until it has one, the reader gives up on the
// new key and every such event takes the strict decoder (still right, only
// slow; the differential test's sample events then fail).
func withFastPath[T Event](max int, read func([]byte) (T, bool), strict func(int, []byte) (Event, error)) func(int, []byte) (Event, error) {
	return func(version int, payload []byte) (Event, error) {
		if version >= 1 && version <= max {
			if e, ok := read(payload); ok {
				return e, nil
			}
		}
		return strict(version, payload)
	}
}

// done reports whether the reader read one whole value and nothing after
// it but white space: false means that the payload is not in the fast
// path's subset (not that it is invalid).
func (r *fastReader) done() bool {
	r.skipSpace()
	return !r.bad && r.pos == len(r.data)
}

// The readers of whole payloads. Each calls its type's reader directly,
// which keeps the fastReader on the stack (through a func value it would
// escape to the heap: one allocation per event).

func fastVariablesSet(p []byte) (VariablesSet, bool) {
	r := fastReader{data: p}
	e := readVariablesSet(&r)
	return e, r.done()
}

func fastReleaseCreated(p []byte) (ReleaseCreated, bool) {
	r := fastReader{data: p}
	e := readReleaseCreated(&r)
	return e, r.done()
}

func fastDeploymentRequested(p []byte) (DeploymentRequested, bool) {
	r := fastReader{data: p}
	e := readDeploymentRequested(&r)
	return e, r.done()
}

func fastDeploymentDelivering(p []byte) (DeploymentDelivering, bool) {
	r := fastReader{data: p}
	e := readDeploymentDelivering(&r)
	return e, r.done()
}

func fastDeploymentStageReached(p []byte) (DeploymentStageReached, bool) {
	r := fastReader{data: p}
	e := readDeploymentStageReached(&r)
	return e, r.done()
}

func fastDeploymentSucceeded(p []byte) (DeploymentSucceeded, bool) {
	r := fastReader{data: p}
	e := readDeploymentSucceeded(&r)
	return e, r.done()
}

func fastDeploymentFailed(p []byte) (DeploymentFailed, bool) {
	r := fastReader{data: p}
	e := readDeploymentFailed(&r)
	return e, r.done()
}

func fastRevisionCompiled(p []byte) (RevisionCompiled, bool) {
	r := fastReader{data: p}
	e := readRevisionCompiled(&r)
	return e, r.done()
}

// giveUp abandons the fast path for this payload.
func (r *fastReader) giveUp() {
	r.bad = true
	r.pos = len(r.data)
}

func (r *fastReader) skipSpace() {
	for r.pos < len(r.data) {
		switch r.data[r.pos] {
		case ' ', '\t', '\n', '\r':
			r.pos++
		default:
			return
		}
	}
}

// next skips white space and returns the byte after it, 0 at the end (a NUL
// byte is invalid JSON wherever it is, so nothing expects one).
func (r *fastReader) next() byte {
	r.skipSpace()
	if r.pos < len(r.data) {
		return r.data[r.pos]
	}
	return 0
}

// literal consumes lit, which the caller saw the first byte of.
func (r *fastReader) literal(lit string) {
	if len(r.data)-r.pos < len(lit) || string(r.data[r.pos:r.pos+len(lit)]) != lit {
		r.giveUp()
		return
	}
	r.pos += len(lit)
}

// null consumes a null if one is next.
func (r *fastReader) null() bool {
	if r.next() != 'n' {
		return false
	}
	r.literal("null")
	return !r.bad
}

// nest and unnest count the depth of arrays and objects.
func (r *fastReader) nest() bool {
	r.depth++
	if r.depth > fastMaxDepth {
		r.giveUp()
	}
	return !r.bad
}

// object starts an object: false for a null (which leaves a struct as it
// is, as encoding/json does) or when it gave up.
func (r *fastReader) object() bool {
	switch r.next() {
	case 'n':
		r.literal("null")
		return false
	case '{':
		r.pos++
		return r.nest()
	}
	r.giveUp()
	return false
}

// member reads the next member's key (into r.key) and colon; false at the
// object's end or when it gave up. n counts the members read so far.
func (r *fastReader) member(n *int) bool {
	c := r.next()
	if c == '}' {
		r.pos++
		r.depth--
		return false
	}
	if *n > 0 {
		if c != ',' {
			r.giveUp()
			return false
		}
		r.pos++
		c = r.next()
	}
	*n++
	if c != '"' {
		r.giveUp()
		return false
	}
	r.pos++
	start := r.pos
	for r.pos = plainASCII(r.data, r.pos); r.pos < len(r.data); r.pos++ {
		c := r.data[r.pos]
		if c == '"' {
			break
		}
		// Every field name is plain ASCII: another key is not a field's
		// exact spelling, which the strict decoder judges.
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			r.giveUp()
			return false
		}
	}
	if r.pos == len(r.data) {
		r.giveUp()
		return false
	}
	r.key = r.data[start:r.pos]
	r.pos++
	if r.next() != ':' {
		r.giveUp()
		return false
	}
	r.pos++
	return true
}

// once marks field i of an object read, giving up if it was already.
func (r *fastReader) once(seen *fieldSet, i uint) {
	if *seen&(1<<i) != 0 {
		r.giveUp()
	}
	*seen |= 1 << i
}

// array starts an array: false for a null (a nil slice) or when it gave up.
func (r *fastReader) array() bool {
	switch r.next() {
	case 'n':
		r.literal("null")
		return false
	case '[':
		r.pos++
		return r.nest()
	}
	r.giveUp()
	return false
}

// element reports whether another element of the array follows (and
// consumes the comma before it). n counts the elements read so far.
func (r *fastReader) element(n *int) bool {
	if r.bad {
		return false
	}
	c := r.next()
	if c == ']' {
		r.pos++
		r.depth--
		return false
	}
	if *n > 0 {
		if c != ',' {
			r.giveUp()
			return false
		}
		r.pos++
	}
	*n++
	return true
}

// The slice readers build a slice in a small array on the stack and copy
// it once to a slice of its length (appending to the heap would allocate at
// each growth). An empty array is an empty slice and null a nil one, as with
// encoding/json.

// exactly returns a copy of s on the heap, as long as s: never nil.
func exactly[T any](s []T) []T {
	out := make([]T, len(s))
	copy(out, s)
	return out
}

func (r *fastReader) strings() []string {
	if !r.array() {
		return nil
	}
	var buf [8]string
	s := buf[:0]
	for n := 0; r.element(&n); {
		s = append(s, r.str())
	}
	return exactly(s)
}

func readVariables(r *fastReader) []Variable {
	if !r.array() {
		return nil
	}
	var buf [8]Variable
	s := buf[:0]
	for n := 0; r.element(&n); {
		s = append(s, readVariable(r))
	}
	return exactly(s)
}

func readProcesses(r *fastReader) []Process {
	if !r.array() {
		return nil
	}
	var buf [4]Process
	s := buf[:0]
	for n := 0; r.element(&n); {
		s = append(s, readProcess(r))
	}
	return exactly(s)
}

func readRevisionObjects(r *fastReader) []RevisionObject {
	if !r.array() {
		return nil
	}
	var buf [8]RevisionObject
	s := buf[:0]
	for n := 0; r.element(&n); {
		s = append(s, readRevisionObject(r))
	}
	return exactly(s)
}

// stringBytes returns a string's content (nil for null). A string the
// strict decoder would change (escapes, invalid UTF-8) makes it give up.
func (r *fastReader) stringBytes() []byte {
	switch r.next() {
	case 'n':
		r.literal("null")
		return nil
	case '"':
	default:
		r.giveUp()
		return nil
	}
	r.pos++
	start, ascii := r.pos, true
	for r.pos = plainASCII(r.data, r.pos); r.pos < len(r.data); r.pos++ {
		c := r.data[r.pos]
		switch {
		case c == '"':
			s := r.data[start:r.pos]
			r.pos++
			if !ascii && !utf8.Valid(s) {
				r.giveUp()
				return nil
			}
			return s
		case c < 0x20 || c == '\\':
			r.giveUp()
			return nil
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	r.giveUp()
	return nil
}

// plainASCII returns the index of the first byte of data from i on that is
// a quote, a backslash, a control character or not ASCII (len(data) if
// none), testing eight bytes at a time: most of a payload's bytes are the
// plain insides of strings, which is what the readers look for the end of.
func plainASCII(data []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(data); i += 8 {
		w := binary.LittleEndian.Uint64(data[i:])
		// (x - ones) &^ x & highs is not 0 exactly when a byte of x is 0
		// (for 0x20*ones: when a byte of w is below 0x20), and w & highs
		// when a byte is not ASCII.
		quote, backslash := w^('"'*ones), w^('\\'*ones)
		special := (quote-ones)&^quote | (backslash-ones)&^backslash | (w-0x20*ones)&^w | w
		if special&highs != 0 {
			break
		}
	}
	for ; i < len(data); i++ {
		if c := data[i]; c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}

// str reads a string; null leaves it empty, as encoding/json does.
func (r *fastReader) str() string {
	return string(r.stringBytes())
}

// int reads an integer; null leaves it 0. A fraction, an exponent, or more
// than 18 digits (which might not fit) make it give up.
func (r *fastReader) int() int {
	c := r.next()
	if c == 'n' {
		r.literal("null")
		return 0
	}
	neg := c == '-'
	if neg {
		r.pos++
	}
	start := r.pos
	v := 0
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		v = v*10 + int(r.data[r.pos]-'0')
		r.pos++
	}
	digits := r.pos - start
	if digits == 0 || digits > 18 || (digits > 1 && r.data[start] == '0') {
		r.giveUp()
		return 0
	}
	if r.pos < len(r.data) {
		if c := r.data[r.pos]; c == '.' || c == 'e' || c == 'E' {
			r.giveUp()
			return 0
		}
	}
	if neg {
		return -v
	}
	return v
}

// bool reads true or false; null leaves it false.
func (r *fastReader) bool() bool {
	switch r.next() {
	case 't':
		r.literal("true")
		return !r.bad
	case 'f':
		r.literal("false")
	case 'n':
		r.literal("null")
	default:
		r.giveUp()
	}
	return false
}

// time reads a time as encoding/json does, with time.Time's UnmarshalJSON
// (null leaves it zero).
func (r *fastReader) time() time.Time {
	var t time.Time
	if r.null() || r.bad {
		return t
	}
	start := r.pos
	if r.stringBytes(); r.bad {
		return t
	}
	if err := t.UnmarshalJSON(r.data[start:r.pos]); err != nil {
		r.giveUp()
	}
	return t
}

// bytes reads a []byte, which JSON holds in standard base64, as
// encoding/json does; null is nil.
func (r *fastReader) bytes() []byte {
	if r.null() {
		return nil
	}
	s := r.stringBytes()
	if r.bad {
		return nil
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, s)
	if err != nil {
		r.giveUp()
		return nil
	}
	return b[:n]
}

// raw reads any JSON value and returns a copy of it, as
// json.RawMessage's UnmarshalJSON keeps it (null is the bytes null).
func (r *fastReader) raw() json.RawMessage {
	r.skipSpace()
	start := r.pos
	if r.skipValue(); r.bad {
		return nil
	}
	return append(json.RawMessage(nil), r.data[start:r.pos]...)
}

// skipValue checks the syntax of one JSON value and moves past it.
func (r *fastReader) skipValue() {
	switch c := r.next(); {
	case c == '{':
		r.pos++
		if !r.nest() {
			return
		}
		for n := 0; r.member(&n); {
			r.skipValue()
		}
	case c == '[':
		r.pos++
		if !r.nest() {
			return
		}
		for n := 0; r.element(&n); {
			r.skipValue()
		}
	case c == '"':
		r.skipString()
	case c == '-' || c >= '0' && c <= '9':
		r.skipNumber()
	case c == 't':
		r.literal("true")
	case c == 'f':
		r.literal("false")
	case c == 'n':
		r.literal("null")
	default:
		r.giveUp()
	}
}

// skipString checks a string's syntax (escapes included; its bytes are kept
// as they are, as encoding/json keeps them in a raw value).
func (r *fastReader) skipString() {
	r.pos++
	for r.pos < len(r.data) {
		if r.pos = plainASCII(r.data, r.pos); r.pos == len(r.data) {
			break
		}
		c := r.data[r.pos]
		switch {
		case c == '"':
			r.pos++
			return
		case c < 0x20:
			r.giveUp()
			return
		case c == '\\':
			if r.pos+1 == len(r.data) {
				r.giveUp()
				return
			}
			switch r.data[r.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				r.pos += 2
			case 'u':
				if r.pos+6 > len(r.data) {
					r.giveUp()
					return
				}
				for _, h := range r.data[r.pos+2 : r.pos+6] {
					if !isHex(h) {
						r.giveUp()
						return
					}
				}
				r.pos += 6
			default:
				r.giveUp()
				return
			}
		default:
			r.pos++
		}
	}
	r.giveUp()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipNumber checks a number's syntax: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *fastReader) skipNumber() {
	if r.data[r.pos] == '-' {
		r.pos++
	}
	if r.pos < len(r.data) && r.data[r.pos] == '0' {
		r.pos++
	} else if r.skipDigits() == 0 {
		r.giveUp()
		return
	}
	if r.pos < len(r.data) && r.data[r.pos] == '.' {
		r.pos++
		if r.skipDigits() == 0 {
			r.giveUp()
			return
		}
	}
	if r.pos < len(r.data) && (r.data[r.pos] == 'e' || r.data[r.pos] == 'E') {
		r.pos++
		if r.pos < len(r.data) && (r.data[r.pos] == '+' || r.data[r.pos] == '-') {
			r.pos++
		}
		if r.skipDigits() == 0 {
			r.giveUp()
		}
	}
}

func (r *fastReader) skipDigits() int {
	start := r.pos
	for r.pos < len(r.data) && r.data[r.pos] >= '0' && r.data[r.pos] <= '9' {
		r.pos++
	}
	return r.pos - start
}

// The readers of the event types with a fast path and of the values they
// hold. Each case is a field's json tag; any other key gives up.

func readVariablesSet(r *fastReader) (e VariablesSet) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "environmentId":
			r.once(&seen, 0)
			e.EnvironmentID = r.str()
		case "serviceId":
			r.once(&seen, 1)
			e.ServiceID = r.str()
		case "variables":
			r.once(&seen, 2)
			e.Variables = readVariables(r)
		default:
			r.giveUp()
		}
	}
	return e
}

func readVariable(r *fastReader) (v Variable) {
	var seen fieldSet
	if !r.object() {
		return v
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "name":
			r.once(&seen, 0)
			v.Name = r.str()
		case "value":
			r.once(&seen, 1)
			v.Value = r.str()
		case "secret":
			r.once(&seen, 2)
			if !r.null() {
				sv := readSealedValue(r)
				v.Secret = &sv
			}
		default:
			r.giveUp()
		}
	}
	return v
}

func readSealedValue(r *fastReader) (s SealedValue) {
	var seen fieldSet
	if !r.object() {
		return s
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "dataKeyId":
			r.once(&seen, 0)
			s.DataKeyID = r.str()
		case "ciphertext":
			r.once(&seen, 1)
			s.Ciphertext = r.bytes()
		default:
			r.giveUp()
		}
	}
	return s
}

func readProcess(r *fastReader) (p Process) {
	var seen fieldSet
	if !r.object() {
		return p
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "name":
			r.once(&seen, 0)
			p.Name = r.str()
		case "command":
			r.once(&seen, 1)
			p.Command = r.strings()
		case "port":
			r.once(&seen, 2)
			p.Port = r.int()
		case "replicas":
			r.once(&seen, 3)
			p.Replicas = r.int()
		case "healthCheck":
			r.once(&seen, 4)
			if !r.null() {
				h := readHealthCheck(r)
				p.HealthCheck = &h
			}
		default:
			r.giveUp()
		}
	}
	return p
}

func readHealthCheck(r *fastReader) (h HealthCheck) {
	var seen fieldSet
	if !r.object() {
		return h
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "path":
			r.once(&seen, 0)
			h.Path = r.str()
		case "port":
			r.once(&seen, 1)
			h.Port = r.int()
		case "initialDelaySeconds":
			r.once(&seen, 2)
			h.InitialDelaySeconds = r.int()
		case "periodSeconds":
			r.once(&seen, 3)
			h.PeriodSeconds = r.int()
		default:
			r.giveUp()
		}
	}
	return h
}

func readReleaseCreated(r *fastReader) (e ReleaseCreated) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "releaseId":
			r.once(&seen, 0)
			e.ReleaseID = r.str()
		case "environmentId":
			r.once(&seen, 1)
			e.EnvironmentID = r.str()
		case "serviceId":
			r.once(&seen, 2)
			e.ServiceID = r.str()
		case "number":
			r.once(&seen, 3)
			e.Number = r.int()
		case "image":
			r.once(&seen, 4)
			e.Image = r.str()
		case "processes":
			r.once(&seen, 5)
			e.Processes = readProcesses(r)
		case "base":
			r.once(&seen, 6)
			e.Base = r.int()
		case "variables":
			r.once(&seen, 7)
			e.Variables = readVariables(r)
		case "removed":
			r.once(&seen, 8)
			e.Removed = r.strings()
		case "reason":
			r.once(&seen, 9)
			e.Reason = r.str()
		default:
			r.giveUp()
		}
	}
	return e
}

func readDeploymentRequested(r *fastReader) (e DeploymentRequested) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "deploymentId":
			r.once(&seen, 0)
			e.DeploymentID = r.str()
		case "releaseId":
			r.once(&seen, 1)
			e.ReleaseID = r.str()
		case "environmentId":
			r.once(&seen, 2)
			e.EnvironmentID = r.str()
		case "serviceId":
			r.once(&seen, 3)
			e.ServiceID = r.str()
		case "rollback":
			r.once(&seen, 4)
			e.Rollback = r.bool()
		case "image":
			r.once(&seen, 5)
			e.Image = r.str()
		case "supersedes":
			r.once(&seen, 6)
			e.Supersedes = r.str()
		default:
			r.giveUp()
		}
	}
	return e
}

func readDeploymentDelivering(r *fastReader) (e DeploymentDelivering) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "deploymentId":
			r.once(&seen, 0)
			e.DeploymentID = r.str()
		case "projectId":
			r.once(&seen, 1)
			e.ProjectID = r.str()
		case "environmentId":
			r.once(&seen, 2)
			e.EnvironmentID = r.str()
		case "serviceId":
			r.once(&seen, 3)
			e.ServiceID = r.str()
		case "releaseId":
			r.once(&seen, 4)
			e.ReleaseID = r.str()
		case "clusterId":
			r.once(&seen, 5)
			e.ClusterID = r.str()
		case "revision":
			r.once(&seen, 6)
			e.Revision = r.int()
		case "progressDeadlineSeconds":
			r.once(&seen, 7)
			e.ProgressDeadlineSeconds = r.int()
		case "at":
			r.once(&seen, 8)
			e.At = r.time()
		default:
			r.giveUp()
		}
	}
	return e
}

func readDeploymentStageReached(r *fastReader) (e DeploymentStageReached) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "deploymentId":
			r.once(&seen, 0)
			e.DeploymentID = r.str()
		case "stage":
			r.once(&seen, 1)
			e.Stage = DeploymentStatus(r.str())
		case "ready":
			r.once(&seen, 2)
			e.Ready = r.int()
		case "desired":
			r.once(&seen, 3)
			e.Desired = r.int()
		case "detail":
			r.once(&seen, 4)
			e.Detail = r.str()
		case "at":
			r.once(&seen, 5)
			e.At = r.time()
		default:
			r.giveUp()
		}
	}
	return e
}

func readDeploymentSucceeded(r *fastReader) (e DeploymentSucceeded) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "deploymentId":
			r.once(&seen, 0)
			e.DeploymentID = r.str()
		default:
			r.giveUp()
		}
	}
	return e
}

func readDeploymentFailed(r *fastReader) (e DeploymentFailed) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "deploymentId":
			r.once(&seen, 0)
			e.DeploymentID = r.str()
		case "reason":
			r.once(&seen, 1)
			e.Reason = r.str()
		default:
			r.giveUp()
		}
	}
	return e
}

func readRevisionCompiled(r *fastReader) (e RevisionCompiled) {
	var seen fieldSet
	if !r.object() {
		return e
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "environmentId":
			r.once(&seen, 0)
			e.EnvironmentID = r.str()
		case "projectId":
			r.once(&seen, 1)
			e.ProjectID = r.str()
		case "number":
			r.once(&seen, 2)
			e.Number = r.int()
		case "hash":
			r.once(&seen, 3)
			e.Hash = r.str()
		case "document":
			r.once(&seen, 4)
			e.Document = r.raw()
		case "base":
			r.once(&seen, 5)
			e.Base = r.int()
		case "set":
			r.once(&seen, 6)
			e.Set = readRevisionObjects(r)
		case "removed":
			r.once(&seen, 7)
			e.Removed = r.strings()
		default:
			r.giveUp()
		}
	}
	return e
}

func readRevisionObject(r *fastReader) (o RevisionObject) {
	var seen fieldSet
	if !r.object() {
		return o
	}
	for n := 0; r.member(&n); {
		switch string(r.key) {
		case "key":
			r.once(&seen, 0)
			o.Key = r.str()
		case "value":
			r.once(&seen, 1)
			o.Value = r.raw()
		default:
			r.giveUp()
		}
	}
	return o
}
