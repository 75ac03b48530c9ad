package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/nebulactrl/nebulactrl/api"
)

// session is a signed-in request.
type session struct {
	token string
	me    api.MeResponse
}

// authed runs h for a signed-in user (the session cookie's token, checked
// by the API's GET /api/v1/me), after checking the CSRF token of anything
// but GET; without a session, pages go to the sign-in form.
func (c *Console) authed(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ck, err := r.Cookie(sessionCookie)
		s := &session{}
		if err == nil && ck.Value != "" {
			s.token = ck.Value
			if _, err := c.call(r, s.token, "GET", "/api/v1/me", nil, &s.me); err != nil {
				if ae, ok := asAPIError(err); !ok || ae.Status != http.StatusUnauthorized {
					c.fail(w, r, nil, err)
					return
				}
				s.token = ""
			}
		}
		if s.token == "" {
			if r.Method != http.MethodGet || r.Header.Get("HX-Request") != "" {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
			if !checkCSRF(r, s.token) {
				c.render(w, r, http.StatusForbidden, "error", c.view(r, s, "Forbidden", nil, "The form was stale or came from another site (CSRF token missing or wrong). Reload the page and try again."))
				return
			}
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Vary", "Cookie, HX-Request")
		if ck, err := r.Cookie(noticeCookie); err == nil && r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
			// The notice of the action that sent the browser here, shown once.
			if n, err := url.QueryUnescape(ck.Value); err == nil && len(n) < 300 {
				r = r.WithContext(context.WithValue(r.Context(), noticeKey{}, n))
			}
			http.SetCookie(w, &http.Cookie{Name: noticeCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
		}
		if org := r.PathValue("org"); org != "" && !slices.ContainsFunc(s.me.Organisations, func(o api.Organisation) bool { return o.Name == org }) {
			// As in the API: to a non-member the organisation does not exist.
			c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "There is no organisation "+strconv.Quote(org)+"."))
			return
		}
		h(w, r, s)
	}
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.renderSignIn(w, r, http.StatusOK, "")
}

func (c *Console) renderSignIn(w http.ResponseWriter, r *http.Request, status int, problem string) {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Value: tok, Path: "/signin", HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode, MaxAge: 3600})
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostFormValue("next")
	}
	v := &view{Title: "Sign in", CSRF: tok, Problem: problem, Version: c.cfg.Version, Data: map[string]string{"Next": safeNext(next), "Email": r.PostFormValue("email")}}
	c.render(w, r, status, "signin", v)
}

// safeNext keeps a redirect after sign-in on this site: a path of its own,
// with no control character or backslash anywhere (a browser drops tabs and
// newlines from a URL and reads \ as /, so "/\t/evil.example" would
// become "//evil.example", another site).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/signin") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}

func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	ck, err := r.Cookie(loginCSRFCookie)
	if err != nil || !sameOriginOrNone(r) || loginTokenBad(ck.Value, r.PostFormValue(csrfField)) {
		c.renderSignIn(w, r, http.StatusForbidden, "The sign-in form was stale or came from another site. Try again.")
		return
	}
	var sess api.SessionResponse
	_, err = c.call(r, "", "POST", "/api/v1/sessions", api.LoginRequest{Email: r.PostFormValue("email"), Password: r.PostFormValue("password")}, &sess)
	if err != nil {
		status, msg := http.StatusInternalServerError, err.Error()
		if ae, ok := asAPIError(err); ok {
			status, msg = ae.Status, ae.Message
		}
		c.renderSignIn(w, r, status, msg)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCSRFCookie, Value: "", Path: "/signin", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sess.Token, Path: "/", Expires: sess.ExpiresAt, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// loginTokenBad says whether the double-submitted sign-in tokens differ (constant time).
func loginTokenBad(cookie, field string) bool {
	return cookie == "" || !constantTimeEqual(cookie, field)
}

func sameOriginOrNone(r *http.Request) bool {
	o := r.Header.Get("Origin")
	return o == "" || o == "null" || sameOrigin(o, r)
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if _, err := c.call(r, s.token, "DELETE", "/api/v1/sessions/current", nil, nil); err != nil {
		c.fail(w, r, s, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

func (c *Console) home(w http.ResponseWriter, r *http.Request, s *session) {
	if len(s.me.Organisations) == 0 {
		c.render(w, r, http.StatusOK, "me", c.view(r, s, "Who am I", nil, ""))
		return
	}
	http.Redirect(w, r, "/o/"+esc(s.me.Organisations[0].Name), http.StatusSeeOther)
}

func (c *Console) switchOrg(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.URL.Query().Get("org")
	for _, o := range s.me.Organisations {
		if o.Name == name {
			http.Redirect(w, r, "/o/"+esc(o.Name), http.StatusSeeOther)
			return
		}
	}
	c.render(w, r, http.StatusNotFound, "error", c.view(r, s, "Not found", nil, "You are not a member of an organisation named "+strconv.Quote(name)+"."))
}

func (c *Console) mePage(w http.ResponseWriter, r *http.Request, s *session) {
	c.render(w, r, http.StatusOK, "me", c.view(r, s, "Who am I", nil, ""))
}
