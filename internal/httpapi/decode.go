package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// maxBody bounds request bodies; larger ones get 413 and change nothing.
const maxBody = 1 << 20

// readBody reads a bounded body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, errorf(http.StatusRequestEntityTooLarge, "body_too_large", "the request body is larger than %d bytes", maxBody)
	}
	if err != nil {
		return nil, badRequest("reading the request body: %v", err)
	}
	return b, nil
}

// decodeJSON reads the body strictly into v: unknown fields, trailing data,
// wrong types and duplicate keys are refused (400) with a message that names
// the problem; strings that break the rules of input.go are refused (422).
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("the request needs a JSON body")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return badRequest("the body is not valid JSON (at byte %d)", se.Offset)
		case errors.As(err, &te):
			return badRequest("field %q must be %s", te.Field, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return badRequest("the body is not valid JSON: %v", err)
	}
	if dec.More() {
		return badRequest("the body has data after the JSON value")
	}
	return checkStrings(body, reflect.TypeOf(v))
}

func required(fields map[string]string) error {
	var missing []string
	for name, v := range fields {
		if strings.TrimSpace(v) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return errorf(http.StatusBadRequest, "invalid_request", "missing required field(s): %s", strings.Join(slices.Sorted(slices.Values(missing)), ", "))
	}
	return nil
}
