package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/dispatch"
	"github.com/nebulactrl/nebulactrl/internal/image"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// apiError is an error with its HTTP status and code.
type apiError struct {
	status  int
	code    string
	message string
	// retryAfter, in seconds, is sent as Retry-After when set.
	retryAfter int
}

func errorf(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return errorf(http.StatusBadRequest, "invalid_request", format, args...)
}

func notFound(what string) error {
	return errorf(http.StatusNotFound, "not_found", "%s not found", what)
}

// toAPIError maps an error from the layers below to a status and a code. The
// message of an unexpected error is not shown: it may name internals.
func toAPIError(err error) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	msg := err.Error()
	clean := func(prefix string) string {
		// Domain errors read "invalid: variable name ..."; keep the sentence.
		_, after, ok := strings.Cut(msg, prefix+": ")
		if ok {
			return after
		}
		return msg
	}
	switch {
	case errors.Is(err, dispatch.ErrStale):
		return &apiError{status: http.StatusPreconditionFailed, code: "precondition_failed",
			message: "the resource changed since the version If-Match names: read it again and reapply your change"}
	case errors.Is(err, domain.ErrInvalid):
		return &apiError{status: http.StatusUnprocessableEntity, code: "validation_failed", message: clean("invalid")}
	case errors.Is(err, domain.ErrForbidden):
		return &apiError{status: http.StatusForbidden, code: "forbidden", message: clean("forbidden")}
	case errors.Is(err, domain.ErrNotFound), errors.Is(err, query.ErrNotFound):
		return &apiError{status: http.StatusNotFound, code: "not_found", message: clean("not found")}
	case errors.Is(err, domain.ErrConflict):
		return &apiError{status: http.StatusConflict, code: "conflict", message: clean("conflict")}
	case errors.Is(err, image.ErrInvalidReference), errors.Is(err, image.ErrNotFound), errors.Is(err, image.ErrUnauthorized), errors.Is(err, image.ErrUnreachable):
		return &apiError{status: http.StatusUnprocessableEntity, code: "image_unresolvable", message: msg}
	case isUnavailable(err):
		return &apiError{status: http.StatusServiceUnavailable, code: "database_unavailable", message: "the database is not reachable; try again shortly"}
	}
	return &apiError{status: http.StatusInternalServerError, code: "internal", message: "internal error"}
}

// isUnavailable reports whether err means the database cannot be reached.
func isUnavailable(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		// Class 08: connection exception; 57P0x: the server is shutting down.
		return strings.HasPrefix(pg.Code, "08") || strings.HasPrefix(pg.Code, "57P0")
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "failed to connect") ||
		strings.Contains(s, "conn closed") || strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ae := toAPIError(err)
	if ae.status >= 500 {
		a.logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "request_id", requestID(r.Context()), "err", err)
	}
	if ae.retryAfter > 0 {
		w.Header().Set("Retry-After", retryAfter(ae.retryAfter))
	}
	writeJSON(w, ae.status, api.Error{Error: api.ErrorBody{Code: ae.code, Message: ae.message}})
}

func (e *apiError) Error() string { return e.message }
