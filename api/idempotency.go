package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"

	"github.com/jackc/pgx/v5"
)

// idempotent runs a creating request at most once per Idempotency-Key and
// caller: the key, a hash of the request and, once done, the response are
// kept in PostgreSQL, so a retry on any replica, or after a restart, gets the
// first response back instead of creating twice. The same key with another
// request is refused with 422.
func (a *API) idempotent(w http.ResponseWriter, r *http.Request, rt route, c *call) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	if len(key) > 200 {
		a.writeError(w, r, badRequest("Idempotency-Key is longer than 200 characters"))
		return
	}
	sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.RequestURI()+"\n"), c.body...))
	bodyHash := hex.EncodeToString(sum[:])
	principal := c.principal.UserID
	tag, err := a.pool.Exec(ctx, `INSERT INTO idempotency_keys (principal, key, method, path, body_hash)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, principal, key, r.Method, r.URL.Path, bodyHash)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if tag.RowsAffected() == 0 {
		var storedHash string
		var status *int
		var response []byte
		err := a.pool.QueryRow(ctx, `SELECT body_hash, status, response FROM idempotency_keys WHERE principal = $1 AND key = $2`,
			principal, key).Scan(&storedHash, &status, &response)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			a.writeError(w, r, errorf(http.StatusConflict, "idempotency_conflict", "the request with this Idempotency-Key is being replaced; retry"))
		case err != nil:
			a.writeError(w, r, err)
		case storedHash != bodyHash:
			a.writeError(w, r, errorf(http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used for a different request"))
		case status == nil:
			a.writeError(w, r, errorf(http.StatusConflict, "request_in_progress", "a request with this Idempotency-Key is still in progress"))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(*status)
			_, _ = w.Write(response)
		}
		return
	}
	rec := httptest.NewRecorder()
	status, body, err := rt.handle(rec, r, c)
	if err != nil {
		ae := toAPIError(err)
		// A failed request may be retried with the same key.
		_, _ = a.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2`, principal, key)
		a.writeError(w, r, ae)
		return
	}
	writeJSON(rec, status, body)
	if _, err := a.pool.Exec(ctx, `UPDATE idempotency_keys SET status = $3, response = $4 WHERE principal = $1 AND key = $2`,
		principal, key, rec.Code, rec.Body.Bytes()); err != nil {
		a.logger.Warn("storing an idempotent response", "err", err)
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = bytes.NewReader(rec.Body.Bytes()).WriteTo(w)
}
