package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/apistate"
	"github.com/nebulactrl/nebulactrl/internal/credential"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 200

// idempotent runs a creating request at most once per Idempotency-Key and
// caller: the key, a hash of the request and, once done, the response are
// kept in PostgreSQL, so a retry on any replica, or after a restart, gets the
// first response back instead of creating twice. The same key with another
// request is refused with 422.
//
// The response is kept sealed with a data key of its own (wrapped by the
// master key, deleted with the row after 24 h): responses may carry a secret
// that is shown once. A replay shows the secret again only while the
// credential it belongs to is still valid; after a revocation (or once the
// sealed response cannot be opened) it answers 410.
func (a *API) idempotent(w http.ResponseWriter, r *http.Request, rt route, c *call) {
	ctx := r.Context()
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey {
		a.writeError(w, r, badRequest("Idempotency-Key is longer than %d characters", maxIdempotencyKey))
		return
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			a.writeError(w, r, badRequest("Idempotency-Key must be printable ASCII without spaces"))
			return
		}
	}
	sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.RequestURI()+"\n"), c.body...))
	bodyHash := hex.EncodeToString(sum[:])
	principal := c.principal.UserID
	claimed, err := apistate.ClaimIdempotencyKey(ctx, a.pool, principal, key, r.Method, r.URL.Path, bodyHash)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if !claimed {
		kept, found, err := apistate.IdempotencyKey(ctx, a.pool, principal, key)
		storedHash, status, response, responseKey := kept.BodyHash, kept.Status, kept.Response, kept.ResponseKey
		switch {
		case err == nil && !found:
			a.writeError(w, r, errorf(http.StatusConflict, "idempotency_conflict", "the request with this Idempotency-Key is being replaced; retry"))
		case err != nil:
			a.writeError(w, r, err)
		case storedHash != bodyHash:
			a.writeError(w, r, errorf(http.StatusUnprocessableEntity, "idempotency_key_reused", "this Idempotency-Key was used for a different request"))
		case status == nil:
			a.writeError(w, r, errorf(http.StatusConflict, "request_in_progress", "a request with this Idempotency-Key is still in progress"))
		default:
			body, err := a.replay(ctx, response, responseKey)
			if err != nil {
				a.writeError(w, r, err)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			if *status == http.StatusCreated {
				if loc := locationOfReplay(r, rt, body); loc != "" {
					w.Header().Set("Location", loc)
				}
			}
			w.WriteHeader(*status)
			_, _ = w.Write(body)
		}
		return
	}
	rec := httptest.NewRecorder()
	status, body, err := rt.handle(rec, r, c)
	if err == nil {
		body, err = a.decorate(rec, r, rt, c, status, body)
	}
	if err != nil {
		ae := toAPIError(err)
		// A failed request may be retried with the same key.
		_ = apistate.ReleaseIdempotencyKey(ctx, a.pool, principal, key)
		a.writeError(w, r, ae)
		return
	}
	writeJSON(rec, status, body)
	a.keep(ctx, principal, key, c.org.ID, rec.Code, rec.Body.Bytes(), issuedBy(body))
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = bytes.NewReader(rec.Body.Bytes()).WriteTo(w)
}

// keptResponse is what is sealed for a replay: the body and the
// credentials whose secrets it shows.
type keptResponse struct {
	Body        json.RawMessage    `json:"body"`
	Credentials []issuedCredential `json:"credentials,omitempty"`
}

// keep stores a response for replays, sealed. When it cannot be sealed the
// status is kept without a body, and a replay answers 410.
func (a *API) keep(ctx context.Context, principal, key, orgID string, status int, body []byte, creds []issuedCredential) {
	plain, err := json.Marshal(keptResponse{Body: body, Credentials: creds})
	var sealed domain.SealedValue
	if err == nil {
		sealed, err = a.cfg.Sealer.Seal(ctx, orgID, plain)
	}
	clear(plain)
	if err != nil {
		a.logger.Warn("sealing an idempotent response; a replay will answer 410", "err", err)
		err = apistate.KeepStatus(ctx, a.pool, principal, key, status)
	} else {
		err = apistate.KeepResponse(ctx, a.pool, principal, key, status, sealed.Ciphertext, sealed.DataKeyID)
	}
	if err != nil {
		a.logger.Warn("storing an idempotent response", "err", err)
	}
}

// replay opens a kept response and checks that every credential it shows
// is still valid.
func (a *API) replay(ctx context.Context, sealed []byte, dataKeyID *string) ([]byte, error) {
	gone := errorf(http.StatusGone, "response_gone",
		"the response to this Idempotency-Key can no longer be shown (it is kept sealed for 24 hours at most); list what the request created instead")
	if dataKeyID == nil || len(sealed) == 0 {
		return nil, gone
	}
	plain, err := a.cfg.Sealer.Open(ctx, domain.SealedValue{DataKeyID: *dataKeyID, Ciphertext: sealed})
	if err != nil {
		a.logger.Warn("opening an idempotent response", "err", err)
		return nil, gone
	}
	defer clear(plain)
	var kept keptResponse
	if err := json.Unmarshal(plain, &kept); err != nil {
		return nil, gone
	}
	for _, cr := range kept.Credentials {
		valid, err := a.stillValid(ctx, cr)
		if err != nil {
			return nil, err
		}
		if !valid {
			return nil, errorf(http.StatusGone, "secret_revoked",
				"the %s this request created (%s) was revoked or expired since: its secret is not shown again", cr.Kind, cr.ID)
		}
	}
	return kept.Body, nil
}

// issuedCredential names a credential whose secret a response shows.
type issuedCredential struct {
	// Kind is "API token" or "join token".
	Kind      string `json:"kind"`
	ID        string `json:"id"`
	ClusterID string `json:"clusterId,omitempty"`
}

const (
	kindAPIToken      = "API token"
	kindJoinToken     = "join token"
	kindWebhookSecret = "webhook secret"
)

// issuedCredentials returns the credentials a response shows the secret of,
// and whether the response's type may show one at all. Every response type
// with a secret is a case here (a test looks for fields that hold one), so
// that replays check the credential first.
func issuedCredentials(body any) ([]issuedCredential, bool) {
	if v := reflect.ValueOf(body); v.Kind() == reflect.Pointer && !v.IsNil() {
		body = v.Elem().Interface()
	}
	switch b := body.(type) {
	case api.CreatedToken:
		return []issuedCredential{{Kind: kindAPIToken, ID: b.ID}}, true
	case api.SetupResponse:
		return apiToken(b.Token), true
	case api.SessionResponse:
		return apiToken(b.Token), true
	case api.CreatedJoinToken:
		return []issuedCredential{{Kind: kindJoinToken, ID: b.ID, ClusterID: b.ClusterID}}, true
	case api.WebhookSecret:
		// A webhook secret is shown by the rotation that made it, never
		// again: a replay of it (the route takes no Idempotency-Key) would
		// find it not valid.
		return []issuedCredential{{Kind: kindWebhookSecret, ID: b.URL}}, true
	case api.WebhookEndpointSecret:
		// Likewise an outbound webhook endpoint's secret: its creation
		// and rotations take no Idempotency-Key.
		return []issuedCredential{{Kind: kindWebhookSecret, ID: b.ID}}, true
	case api.ClusterResponse:
		if b.JoinToken == nil {
			return nil, true
		}
		return issuedCredentials(*b.JoinToken)
	}
	return nil, false
}

// carriesSecrets reports whether responses of v's type may show a secret.
func carriesSecrets(v any) bool {
	_, ok := issuedCredentials(v)
	return ok
}

func issuedBy(body any) []issuedCredential {
	cs, _ := issuedCredentials(body)
	return cs
}

func apiToken(secret string) []issuedCredential {
	id, _, ok := credential.Parse(secret)
	if !ok {
		return nil
	}
	return []issuedCredential{{Kind: kindAPIToken, ID: id}}
}

// stillValid reports whether a credential is neither revoked nor expired.
func (a *API) stillValid(ctx context.Context, cr issuedCredential) (bool, error) {
	now := a.cfg.Now()
	switch cr.Kind {
	case kindAPIToken:
		t, _, err := query.TokenByID(ctx, a.pool, cr.ID)
		if err != nil {
			if isNotFound(err) {
				return false, nil
			}
			return false, err
		}
		return t.RevokedAt == nil && (t.ExpiresAt == nil || t.ExpiresAt.After(now)), nil
	case kindJoinToken:
		toks, err := query.JoinTokens(ctx, a.pool, cr.ClusterID)
		if err != nil {
			if isNotFound(err) {
				return false, nil
			}
			return false, err
		}
		for _, t := range toks {
			if t.ID == cr.ID {
				return t.RevokedAt == nil && t.ExpiresAt.After(now), nil
			}
		}
		return false, nil
	}
	return false, nil
}
