package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/query"
)

// route is one row of the route table: routing, authentication, the scope
// checked, and what the OpenAPI document says of it all come from here.
type route struct {
	method, path string
	summary      string
	tag          string
	// public routes need no token (setup, login).
	public bool
	// signed routes read their body themselves, raw, and verify its
	// signature (a forge's webhook): no token, but 401 for a bad signature
	// and 413 for a body over their own limit.
	signed bool
	// scope is checked for every caller; with {org} in the path it is checked
	// against the caller's role there.
	scope domain.Scope
	// request and response are zero values of the body types, for the
	// document; nil means no body.
	request  any
	response any
	status   int
	// accepted is the body of a 202 answer, for routes whose change waits
	// in a change set when the environment is protected.
	accepted any
	// creating routes honour Idempotency-Key.
	creating bool
	query    []param
	// events makes the route a server-sent event stream (text/event-stream,
	// resumable with Last-Event-ID): its handler writes the response itself
	// and returns an error only before the stream starts.
	events []streamEvent
	handle func(w http.ResponseWriter, r *http.Request, c *call) (int, any, error)
}

// param is a query-string parameter, for the document.
type param struct {
	name, description, typ string
}

// call is what a handler gets: who asks and what the path names.
type call struct {
	principal domain.Principal
	actor     domain.Actor
	tokenID   string
	body      []byte
	org       api.Organisation
	project   api.Project
	env       api.Environment
	service   api.Service
	cluster   api.Cluster
	route     *route
	// ifVersion is the stream version If-Match names (0: none); version
	// is the stream's version after the route's command.
	ifVersion, version int
	// etag is a read's entity tag, taken before the read; stream is the
	// event stream of the resource the route reads or changes.
	etag, stream string
	// page is what a list route's ?limit= and ?cursor= ask for; keyset
	// says the handler read the page itself, after the cursor.
	page   pageRequest
	keyset bool
}

type ctxKey int

const requestIDKey ctxKey = iota

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// withRequestID gives every request an id: the caller's X-Request-Id when it
// is sane, a new one otherwise. It is echoed and written to the audit log.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requestID(r.Context()) != "" {
			// AccessLog gave it one already, and echoed it.
			next.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get("X-Request-Id")
		if len(id) == 0 || len(id) > 64 || strings.ContainsFunc(id, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			id = "req_" + hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

// wrap turns a route into a handler: authenticate, resolve the names in the
// path (checking the scope at the organisation before anything inside it is
// looked up, so non-members learn nothing), honour Idempotency-Key, call.
func (a *API) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		NoteRoute(r.Context(), rt.method+" "+rt.path)
		rec := &statusRecorder{ResponseWriter: w, status: 200}
		a.serve(rec, r, rt)
		if rt.events != nil && rec.status == http.StatusOK {
			// A stream's length is the client's choice, not latency.
			a.metrics.requests.WithLabelValues(rt.method+" "+rt.path, "200").Inc()
			return
		}
		a.metrics.observe(rt.method+" "+rt.path, rec.status, time.Since(start))
	})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, rt route) {
	c := &call{route: &rt}
	if !rt.public {
		p, actor, tokenID, err := a.authenticate(r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		c.principal, c.actor, c.tokenID = p, actor, tokenID
		NotePrincipal(r.Context(), p.UserID)
	}
	if err := checkPathAndQuery(r, rt); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.resolve(r, rt, c); err != nil {
		a.writeError(w, r, err)
		return
	}
	if err := a.preconditions(r, rt, c); err != nil {
		a.writeError(w, r, err)
		return
	}
	if rt.request != nil {
		body, err := readBody(w, r)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		// Every body is checked against its route's request type here, so
		// that no handler can forget it: the handler decodes it again.
		if len(bytes.TrimSpace(body)) > 0 {
			if err := checkContentType(r); err != nil {
				a.writeError(w, r, err)
				return
			}
			if err := decodeJSON(body, reflect.New(reflect.TypeOf(rt.request)).Interface()); err != nil {
				a.writeError(w, r, err)
				return
			}
		}
		c.body = body
	}
	if rt.creating && r.Header.Get("Idempotency-Key") != "" && !rt.public {
		a.idempotent(w, r, rt, c)
		return
	}
	status, body, err := rt.handle(w, r, c)
	if err == nil && rt.events == nil {
		body, err = a.decorate(w, r, rt, c, status, body)
	}
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	if rt.events != nil {
		// The stream was written and flushed event by event.
		return
	}
	if status == http.StatusNoContent {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, body)
}

func (a *API) resolve(r *http.Request, rt route, c *call) error {
	ctx := r.Context()
	orgName := r.PathValue("org")
	if orgName == "" {
		if rt.scope != "" && !rt.public {
			return a.allow(c, "", rt.scope)
		}
		return nil
	}
	org, err := query.OrganisationByName(ctx, a.pool, orgName)
	if err != nil {
		if isNotFound(err) {
			return notFound("organisation " + orgName)
		}
		return err
	}
	if err := a.allow(c, org.ID, rt.scope); err != nil {
		if isNotFound(err) {
			return notFound("organisation " + orgName)
		}
		return err
	}
	c.org = org
	if name := r.PathValue("cluster"); name != "" {
		if c.cluster, err = query.ClusterByName(ctx, a.pool, org.ID, name); err != nil {
			return named(err, "cluster "+orgName+"/"+name)
		}
	}
	name := r.PathValue("project")
	if name == "" {
		return nil
	}
	if c.project, err = query.ProjectByName(ctx, a.pool, org.ID, name); err != nil {
		return named(err, "project "+orgName+"/"+name)
	}
	if name := r.PathValue("env"); name != "" {
		if c.env, err = query.EnvironmentByName(ctx, a.pool, c.project.ID, name); err != nil {
			return named(err, "environment "+orgName+"/"+c.project.Name+"/"+name)
		}
	}
	if name := r.PathValue("service"); name != "" {
		if c.service, err = query.ServiceByName(ctx, a.pool, c.project.ID, name); err != nil {
			return named(err, "service "+orgName+"/"+c.project.Name+"/"+name)
		}
	}
	return nil
}

func (a *API) allow(c *call, orgID string, scope domain.Scope) error {
	if scope == "" {
		return nil
	}
	err := c.principal.Allow(orgID, scope)
	if err == nil {
		return nil
	}
	if isNotFound(err) {
		return err
	}
	return errorf(http.StatusForbidden, "forbidden", "%s", strings.TrimPrefix(err.Error(), "forbidden: "))
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	ae := toAPIError(err)
	return ae.status == http.StatusNotFound
}

// named gives a not-found error the name of what was not found; any other
// error, and nil, it returns as they are.
func named(err error, what string) error {
	if isNotFound(err) {
		return notFound(what)
	}
	return err
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (streams clear
// its write deadline and flush through it).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func intQuery(r *http.Request, name string, def, min, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, badRequest("query parameter %s must be a whole number from %d to %d", name, min, max)
	}
	return n, nil
}
