package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nebulactrl/nebulactrl/domain"
)

// Every string that comes in (request bodies, path segments, query
// parameters) is checked here, before any handler sees it, so that nothing
// reaches a command, an event or a table that PostgreSQL cannot store or that
// would read as something else:
//
//   - valid UTF-8 (invalid bytes, and unpaired surrogates in \u escapes,
//     which encoding/json would silently turn into U+FFFD), without U+0000;
//   - at most a number of bytes: 1024 unless the field says otherwise
//     (`input:"max=N"`; the OpenAPI document shows it as maxLength);
//   - by kind of field (`input:"<kind>"`):
//   - label (the default: names, e-mail addresses, images, hosts, ids,
//     every path segment and query parameter): one line, no control
//     characters and no bidirectional formatting characters (U+202A-U+202E,
//     U+2066-U+2069), which would make a name read as another one;
//   - text (free text such as a rejection's reason, a command's
//     arguments): line breaks and tabs allowed, other control characters
//     not; bidirectional formatting is valid text and allowed;
//   - opaque (passwords, variable values): anything but U+0000.
//
// Refusals are 422 validation_failed naming the field by its JSON path
// (variables[0].value), "path parameter org" or "query parameter action".
// Duplicate object keys are 400 invalid_request, like other malformed JSON.

// inputKind is the kind of a string field.
type inputKind int

const (
	kindLabel inputKind = iota
	kindText
	kindOpaque
)

// Bounds of strings, in bytes.
const (
	defaultMaxString = 1024
	maxPathSegment   = 256
	maxQueryValue    = 1024
	maxKey           = 256
)

type stringRule struct {
	kind inputKind
	max  int
}

var labelRule = stringRule{kind: kindLabel, max: defaultMaxString}

// parseRule reads a field's `input` tag: "text", "opaque", "max=N", joined by commas.
func parseRule(tag string) stringRule {
	r := labelRule
	for part := range strings.SplitSeq(tag, ",") {
		switch part = strings.TrimSpace(part); {
		case part == "text":
			r.kind = kindText
		case part == "opaque":
			r.kind = kindOpaque
		case strings.HasPrefix(part, "max="):
			if n, err := strconv.Atoi(strings.TrimPrefix(part, "max=")); err == nil && n > 0 {
				r.max = n
			}
		}
	}
	return r
}

// foreignRules are the rules of fields of types this package does not own
// (and so cannot tag), by type and Go field name.
var foreignRules = map[reflect.Type]map[string]string{
	reflect.TypeFor[domain.Process]():     {"Command": "text,max=4096"},
	reflect.TypeFor[domain.HealthCheck](): {"Path": "max=1024"},
}

// fieldRule is the rule of a struct field.
func fieldRule(parent reflect.Type, f reflect.StructField) stringRule {
	if tag, ok := f.Tag.Lookup("input"); ok {
		return parseRule(tag)
	}
	if m := foreignRules[parent]; m != nil {
		if tag, ok := m[f.Name]; ok {
			return parseRule(tag)
		}
	}
	return labelRule
}

func invalidField(field, format string, args ...any) error {
	return errorf(http.StatusUnprocessableEntity, "validation_failed", "%s: %s", field, fmt.Sprintf(format, args...))
}

// isBidiControl reports the bidirectional embedding, override and isolate
// characters: text after them is shown in another order than it is stored.
func isBidiControl(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069
}

// checkText checks a decoded string against a rule; field names it.
func checkText(field, s string, rule stringRule) error {
	if !utf8.ValidString(s) {
		return invalidField(field, "is not valid UTF-8")
	}
	if len(s) > rule.max {
		return invalidField(field, "is %d bytes long; at most %d are allowed", len(s), rule.max)
	}
	for _, r := range s {
		switch {
		case r == 0:
			return invalidField(field, "contains U+0000 (NUL), which is not allowed")
		case rule.kind == kindOpaque:
		case rule.kind == kindText && (r == '\n' || r == '\r' || r == '\t'):
		case unicode.IsControl(r):
			return invalidField(field, "contains the control character U+%04X, which is not allowed here", r)
		case rule.kind == kindLabel && isBidiControl(r):
			return invalidField(field, "contains the bidirectional formatting character U+%04X, which is not allowed here", r)
		}
	}
	return nil
}

// checkLiteral checks the raw JSON string literal lit (with its quotes) for
// what decoding would hide: bytes that are not UTF-8 and \u escapes of
// unpaired surrogates both decode to U+FFFD.
func checkLiteral(field string, lit []byte) error {
	if len(lit) < 2 {
		return nil
	}
	s := lit[1 : len(lit)-1]
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] == 'u' && i+6 <= len(s):
			r := hexRune(s[i+2 : i+6])
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
					if lo := hexRune(s[i+8 : i+12]); lo >= 0xDC00 && lo < 0xE000 {
						i += 12
						continue
					}
				}
				return invalidField(field, "is not valid UTF-8 (an unpaired surrogate \\u%04x)", r)
			case r >= 0xDC00 && r < 0xE000:
				return invalidField(field, "is not valid UTF-8 (an unpaired surrogate \\u%04x)", r)
			}
			i += 6
		case c == '\\':
			i += 2
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n <= 1 {
				return invalidField(field, "is not valid UTF-8")
			}
			i += n
		}
	}
	return nil
}

func hexRune(b []byte) rune {
	n, err := strconv.ParseUint(string(b), 16, 32)
	if err != nil {
		return -1
	}
	return rune(n)
}

// scanner walks a JSON body token by token alongside the Go type it decodes
// into, checking every string (keys too) and refusing duplicate keys.
type scanner struct {
	dec  *json.Decoder
	body []byte
	last int64
}

// next returns the next token and its raw bytes.
func (s *scanner) next() (json.Token, []byte, error) {
	tok, err := s.dec.Token()
	if err != nil {
		return nil, nil, err
	}
	end := s.dec.InputOffset()
	raw := bytes.TrimLeft(s.body[s.last:end], " \t\r\n,:")
	s.last = end
	return tok, raw, nil
}

func child(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func fieldName(path string) string {
	if path == "" {
		return "the body"
	}
	return "field " + path
}

// jsonFields maps the JSON names of a struct's fields (embedded structs
// flattened, as encoding/json does) to the field and the struct it is in.
func jsonFields(t reflect.Type, out map[string]fieldInfo) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() && !f.Anonymous {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			jsonFields(ft, out)
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := out[name]; !ok {
			out[name] = fieldInfo{typ: f.Type, rule: fieldRule(t, f)}
		}
	}
}

type fieldInfo struct {
	typ  reflect.Type
	rule stringRule
}

// lookupField finds key among a struct's fields the way encoding/json does
// (an exact match, else a case-insensitive one); canonical names the field,
// so that {"name":..,"Name":..} counts as a duplicate.
func lookupField(t reflect.Type, key string) (fieldInfo, string, bool) {
	fields := map[string]fieldInfo{}
	jsonFields(t, fields)
	if f, ok := fields[key]; ok {
		return f, key, true
	}
	for name, f := range fields {
		if strings.EqualFold(name, key) {
			return f, name, true
		}
	}
	return fieldInfo{}, key, false
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// value checks one JSON value that decodes into t (nil: unknown) under rule.
func (s *scanner) value(t reflect.Type, rule stringRule, path string) error {
	tok, raw, err := s.next()
	if err != nil {
		return err
	}
	t = deref(t)
	switch v := tok.(type) {
	case string:
		if err := checkLiteral(fieldName(path), raw); err != nil {
			return err
		}
		return checkText(fieldName(path), v, rule)
	case json.Delim:
		switch v {
		case '{':
			seen := map[string]bool{}
			for s.dec.More() {
				ktok, kraw, err := s.next()
				if err != nil {
					return err
				}
				key, _ := ktok.(string)
				kpath := child(path, key)
				if err := checkLiteral("the key of "+fieldName(kpath), kraw); err != nil {
					return err
				}
				if err := checkText("the key of "+fieldName(kpath), key, stringRule{kind: kindLabel, max: maxKey}); err != nil {
					return err
				}
				ft, frule, canonical := reflect.Type(nil), labelRule, key
				switch {
				case t != nil && t.Kind() == reflect.Struct:
					var f fieldInfo
					var ok bool
					f, canonical, ok = lookupField(t, key)
					if ok {
						ft, frule = f.typ, f.rule
					}
				case t != nil && t.Kind() == reflect.Map:
					ft, frule = t.Elem(), rule
				}
				if seen[canonical] {
					return badRequest("the body names %s twice", fieldName(kpath))
				}
				seen[canonical] = true
				if err := s.value(ft, frule, kpath); err != nil {
					return err
				}
			}
			_, _, err := s.next()
			return err
		case '[':
			var et reflect.Type
			if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
				et = t.Elem()
			}
			for i := 0; s.dec.More(); i++ {
				if err := s.value(et, rule, path+"["+strconv.Itoa(i)+"]"); err != nil {
					return err
				}
			}
			_, _, err := s.next()
			return err
		}
	}
	return nil
}

// checkStrings checks every string of a JSON body that decodes into a value
// of type t, and refuses duplicate keys.
func checkStrings(body []byte, t reflect.Type) error {
	s := &scanner{dec: json.NewDecoder(bytes.NewReader(body)), body: body}
	s.dec.UseNumber()
	if err := s.value(t, labelRule, ""); err != nil {
		if _, ok := err.(*apiError); ok {
			return err
		}
		return badRequest("the body is not valid JSON: %v", err)
	}
	if !utf8.Valid(body) {
		return invalidField("the body", "is not valid UTF-8")
	}
	return nil
}

// checkContentType refuses a body that does not say it is JSON. A body
// without a Content-Type is taken as JSON.
func checkContentType(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		if cs, ok := params["charset"]; !ok || strings.EqualFold(cs, "utf-8") {
			return nil
		}
	}
	return errorf(http.StatusUnsupportedMediaType, "unsupported_media_type", "the request body must be application/json (UTF-8), not %q", ct)
}

// checkPathAndQuery checks every path parameter of the route and every
// query parameter of the request.
func checkPathAndQuery(r *http.Request, rt route) error {
	for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
		if err := checkText("path parameter "+m[1], r.PathValue(m[1]), stringRule{kind: kindLabel, max: maxPathSegment}); err != nil {
			return err
		}
	}
	q, err := parseQuery(r.URL.RawQuery)
	if err != nil {
		return badRequest("the query string is malformed: %v", err)
	}
	for _, kv := range q {
		if err := checkText("the name of query parameter "+strconv.Quote(kv[0]), kv[0], stringRule{kind: kindLabel, max: maxKey}); err != nil {
			return err
		}
		if err := checkText("query parameter "+kv[0], kv[1], stringRule{kind: kindLabel, max: maxQueryValue}); err != nil {
			return err
		}
	}
	return nil
}

// parseQuery splits a raw query into its pairs, refusing bad escapes that
// url.Values would drop silently.
func parseQuery(raw string) ([][2]string, error) {
	var out [][2]string
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		ku, err := url.QueryUnescape(k)
		if err != nil {
			return nil, err
		}
		vu, err := url.QueryUnescape(v)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{ku, vu})
	}
	return out, nil
}
