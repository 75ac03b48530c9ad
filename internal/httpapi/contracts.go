package httpapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/eventstore"
	"github.com/nebulactrl/nebulactrl/projections"
)

// The HTTP contracts every route keeps, derived from the route table rather
// than written per handler: ETag and If-Match from the version of the
// resource's event stream, Location on 201, cursor pagination of lists.

// --- ETag and If-Match ---------------------------------------------------

// resourceStreams names, per route, the event stream whose version is the
// version of the resource the route reads or changes. Environments,
// services, variables, domains and change sets live in their project's
// stream; members in their organisation's; join tokens and servers in their
// cluster's; tokens in their user's.
var resourceStreams = map[string]func(c *call) string{
	"GET /api/v1/me":                                 func(c *call) string { return domain.UserStream(c.principal.UserID) },
	"GET /api/v1/tokens/{token}":                     func(c *call) string { return domain.UserStream(c.principal.UserID) },
	"DELETE /api/v1/tokens/{token}":                  func(c *call) string { return domain.UserStream(c.principal.UserID) },
	"GET /api/v1/instance/settings":                  func(*call) string { return domain.InstanceStream() },
	"PATCH /api/v1/instance/settings":                func(*call) string { return domain.InstanceStream() },
	"PUT /api/v1/instance/settings":                  func(*call) string { return domain.InstanceStream() },
	"GET " + orgPath:                                 orgStream,
	"GET " + orgPath + "/mesh":                       meshStream,
	"PUT " + orgPath + "/mesh":                       meshStream,
	"GET " + orgPath + "/members/{user}":             orgStream,
	"PATCH " + orgPath + "/members/{user}":           orgStream,
	"DELETE " + orgPath + "/members/{user}":          orgStream,
	"GET " + clusterPath:                             clusterStream,
	"DELETE " + clusterPath:                          clusterStream,
	"GET " + clusterPath + "/join-tokens/{token}":    clusterStream,
	"DELETE " + clusterPath + "/join-tokens/{token}": clusterStream,
	"DELETE " + clusterPath + "/servers/{server}":    clusterStream,
	"GET " + projectPath:                             projectStream,
	"DELETE " + projectPath:                          projectStream,
	"GET " + envPath:                                 projectStream,
	"PATCH " + envPath:                               projectStream,
	"DELETE " + envPath:                              projectStream,
	"GET " + projectPath + "/services/{service}":     projectStream,
	"PATCH " + projectPath + "/services/{service}":   projectStream,
	"DELETE " + projectPath + "/services/{service}":  projectStream,
	"PUT " + envPath + "/variables":                  projectStream,
	"DELETE " + envPath + "/variables/{name}":        projectStream,
	"PUT " + targetPath + "/variables":               projectStream,
	"DELETE " + targetPath + "/variables/{name}":     projectStream,
	"GET " + targetPath + "/domains/{host}":          projectStream,
	"DELETE " + targetPath + "/domains/{host}":       projectStream,
	"PUT " + targetPath + "/replicas":                projectStream,
	"GET " + targetPath + "/tracking":                projectStream,
	"PUT " + targetPath + "/tracking":                projectStream,
	"GET " + envPath + "/changesets/{changeset}":     projectStream,
	"GET " + hookPath + "/{webhook}":                 outHookStream,
	"DELETE " + hookPath + "/{webhook}":              outHookStream,
}

func outHookStream(c *call) string { return domain.OutHookStream(c.org.ID) }

func meshStream(c *call) string { return domain.MeshStream(c.org.ID) }

func orgStream(c *call) string     { return domain.OrgStream(c.org.ID) }
func clusterStream(c *call) string { return domain.ClusterStream(c.cluster.ID) }
func projectStream(c *call) string { return domain.ProjectStream(c.project.ID) }

// lookedUpStreams are the resource streams that take a lookup: a
// deployment's is its own, and "latest" names the newest.
var lookedUpStreams = map[string]streamFunc{
	"GET /api/v1/users/{user}": func(_ *API, r *http.Request, _ *call) (string, error) {
		return domain.UserStream(r.PathValue("user")), nil
	},
	"GET " + targetPath + "/deployments/{deployment}": func(a *API, r *http.Request, c *call) (string, error) {
		d, err := a.deploymentIn(r.Context(), a.pool, c, r.PathValue("deployment"))
		if err != nil {
			return "", err
		}
		return domain.DeploymentStream(d.ID), nil
	},
}

// streamFunc finds the stream of the resource a request names.
type streamFunc func(a *API, r *http.Request, c *call) (string, error)

// streamOf is the route's resource stream, nil when it has none.
func streamOf(rt route) streamFunc {
	key := rt.method + " " + rt.path
	if f := lookedUpStreams[key]; f != nil {
		return f
	}
	if f := resourceStreams[key]; f != nil {
		return func(_ *API, _ *http.Request, c *call) (string, error) { return f(c), nil }
	}
	return nil
}

// honoursIfMatch reports whether a route changes a versioned resource.
func honoursIfMatch(rt route) bool {
	return streamOf(rt) != nil && (rt.method == http.MethodPatch || rt.method == http.MethodPut || rt.method == http.MethodDelete)
}

// etag is the strong entity tag of a stream at a version.
func etag(stream string, version int) string {
	return `"` + stream + "." + strconv.Itoa(version) + `"`
}

// ifMatch reads If-Match into the version the command must find: 0 for no
// precondition (no header, or "*"). A tag that is not this resource's, a
// weak one or several are stale: 412.
func ifMatch(r *http.Request, stream string) (int, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return 0, nil
	}
	stale := errorf(http.StatusPreconditionFailed, "precondition_failed",
		"If-Match %s is not the current ETag of this resource: read it again and reapply your change", h)
	// Of several tags any may match; versions only grow, so the newest of
	// this resource's is the one that can.
	best := 0
	for tag := range strings.SplitSeq(h, ",") {
		tag = strings.TrimSpace(tag)
		inner, ok := strings.CutPrefix(tag, `"`+stream+".")
		if !ok || !strings.HasSuffix(inner, `"`) {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSuffix(inner, `"`))
		if err != nil || v <= 0 {
			continue
		}
		best = max(best, v)
	}
	if best == 0 {
		return 0, stale
	}
	return best, nil
}

// tagWait bounds how long a read waits for the projections to pass its
// resource's last change before it answers without an ETag.
const tagWait = 2 * time.Second

// streamVersion returns a stream's version once the projections have
// handled its last event: a body read after it shows that version or a
// later one, so the ETag never claims more than the client saw. When the
// projections do not get there within tagWait (they are stuck, or far
// behind), it returns 0: the read is answered as it stands, without an
// ETag, rather than refused.
func (a *API) streamVersion(ctx context.Context, stream string) (int, error) {
	v, err := eventstore.StreamVersion(ctx, a.pool, stream)
	if err != nil || v == 0 {
		return v, err
	}
	last, err := eventstore.ReadStream(ctx, a.pool, stream, v-1)
	if err != nil {
		return 0, err
	}
	if len(last) == 0 {
		return v, nil
	}
	wait, cancel := context.WithTimeout(ctx, min(tagWait, a.cfg.ConsistencyTimeout))
	defer cancel()
	if err := projections.WaitFor(wait, a.pool, last[len(last)-1].Cursor(), a.cfg.Changed); err != nil {
		if ctx.Err() != nil {
			return 0, err
		}
		return 0, nil
	}
	return v, nil
}

// --- Location --------------------------------------------------------------

// location is where a created resource is: the collection the request was
// posted to and the created thing's key, a path that a GET route of the
// table answers (TestEveryLocationHasAGetRoute).
func location(r *http.Request, body any) string {
	collection := strings.TrimSuffix(r.URL.EscapedPath(), "/")
	switch b := body.(type) {
	case api.SetupResponse:
		return "/api/v1/orgs/" + url.PathEscape(b.Organisation.Name)
	case api.SessionResponse:
		// A session is the caller of /api/v1/me with its token (signing
		// out is DELETE /api/v1/sessions/current).
		return "/api/v1/me"
	case api.CreatedToken:
		return collection + "/" + url.PathEscape(b.ID)
	case api.User:
		return collection + "/" + url.PathEscape(b.ID)
	case api.Organisation:
		return collection + "/" + url.PathEscape(b.Name)
	case api.Member:
		return collection + "/" + url.PathEscape(b.UserID)
	case api.ClusterResponse:
		return collection + "/" + url.PathEscape(b.Name)
	case api.CreatedJoinToken:
		return collection + "/" + url.PathEscape(b.ID)
	case api.Project:
		return collection + "/" + url.PathEscape(b.Name)
	case api.Environment:
		return collection + "/" + url.PathEscape(b.Name)
	case api.Service:
		return collection + "/" + url.PathEscape(b.Name)
	case api.Domain:
		return collection + "/" + url.PathEscape(b.Host)
	case api.Backup:
		return collection + "/" + url.PathEscape(b.Dump)
	}
	// Anything else is named by its id or name, as lists page by it.
	if body != nil {
		if key := itemKey(reflect.ValueOf(body)); key != "" {
			return collection + "/" + url.PathEscape(key)
		}
	}
	return ""
}

// locationOfReplay is the Location of a replayed 201 (its body as kept).
func locationOfReplay(r *http.Request, rt route, body []byte) string {
	if rt.response == nil {
		return ""
	}
	v := reflect.New(reflect.TypeOf(rt.response))
	if json.Unmarshal(body, v.Interface()) != nil {
		return ""
	}
	return location(r, v.Elem().Interface())
}

// --- Pagination ------------------------------------------------------------

const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// isList reports whether a route answers a list, which is paged.
func isList(rt route) bool {
	return rt.response != nil && reflect.TypeOf(rt.response).Kind() == reflect.Slice
}

// pageSchema is a zero page of a list's element type: {"items": [...],
// "next": "<cursor of the next page, absent on the last>"}.
func pageSchema(list any) any {
	elem := reflect.TypeOf(list).Elem()
	page := reflect.StructOf([]reflect.StructField{
		{Name: "Items", Type: reflect.SliceOf(elem), Tag: `json:"items"`},
		{Name: "Next", Type: reflect.TypeOf(""), Tag: `json:"next,omitempty"`},
	})
	return reflect.New(page).Elem().Interface()
}

// pageSchemaName names a list's page type in the document.
func pageSchemaName(list any) string {
	return reflect.TypeOf(list).Elem().Name() + "Page"
}

// cursor is where a page starts: after the item with key Key, which was at
// Offset; when that item is gone, at the item Next that followed it; when
// both are gone, at Offset.
type cursor struct {
	Key    string `json:"k"`
	Next   string `json:"n,omitempty"`
	Offset int    `json:"o"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// pageRequest is what ?limit= and ?cursor= ask for.
type pageRequest struct {
	limit int
	after *cursor
}

func parsePage(r *http.Request) (pageRequest, error) {
	limit, err := intQuery(r, "limit", defaultPageSize, 1, maxPageSize)
	if err != nil {
		return pageRequest{}, err
	}
	p := pageRequest{limit: limit}
	if raw := r.URL.Query().Get("cursor"); raw != "" {
		var c cursor
		b, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || json.Unmarshal(b, &c) != nil || c.Offset < 0 {
			return pageRequest{}, badRequest("query parameter cursor is not a cursor this API gave (use the next of the previous page)")
		}
		p.after = &c
	}
	return p, nil
}

// keysetPage is, for a handler that reads its list a page at a time in the
// database (the lists that grow without bound), the id of the row the page
// starts after ("" for the first page); the handler reads limit+1 rows from
// there, the one more telling whether there is a next page.
func (c *call) keysetPage() (string, error) {
	c.keyset = true
	if c.page.after == nil {
		return "", nil
	}
	if _, err := uuid.Parse(c.page.after.Key); err != nil {
		return "", badRequest("query parameter cursor is not a cursor of this list (use the next of the previous page)")
	}
	return c.page.after.Key, nil
}

// itemKey identifies an item of a list for the cursor: its id, user id,
// host, name, number, sequence, server id or dump file name, whichever it
// has first; or, for an item with none of them (or none unique), its
// PageKey.
func itemKey(item reflect.Value) string {
	if k, ok := item.Interface().(interface{ PageKey() string }); ok {
		return k.PageKey()
	}
	b, err := json.Marshal(item.Interface())
	if err != nil {
		return ""
	}
	var fields map[string]any
	if json.Unmarshal(b, &fields) != nil {
		return ""
	}
	for _, k := range []string{"id", "userId", "host", "name", "number", "seq", "serverId", "dump"} {
		if v, ok := fields[k]; ok && v != nil && v != "" {
			return fmt.Sprint(v)
		}
	}
	return ""
}

// paginate cuts a list (a slice) into the page asked for.
func paginate(list any, p pageRequest) any {
	v := reflect.ValueOf(list)
	n := v.Len()
	start := 0
	if p.after != nil {
		start = min(p.after.Offset, n)
		found := false
		if p.after.Key != "" {
			for i := 0; i < n; i++ {
				if itemKey(v.Index(i)) == p.after.Key {
					start, found = i+1, true
					break
				}
			}
		}
		if !found && p.after.Next != "" {
			for i := 0; i < n; i++ {
				if itemKey(v.Index(i)) == p.after.Next {
					start = i
					break
				}
			}
		}
	}
	end := min(start+p.limit, n)
	items := reflect.MakeSlice(v.Type(), 0, end-start)
	items = reflect.AppendSlice(items, v.Slice(start, end))
	next := ""
	if end < n && end > start {
		next = cursor{Key: itemKey(v.Index(end - 1)), Next: itemKey(v.Index(end)), Offset: end}.encode()
	}
	page := reflect.New(reflect.TypeOf(pageSchema(list))).Elem()
	page.Field(0).Set(items)
	page.Field(1).SetString(next)
	return page.Interface()
}

// --- Error responses per route -----------------------------------------------

// hashesPasswords are the routes that hash or check a password: their
// turn at the bounded hashing can be refused (429), and sign-in is
// rate-limited.
var hashesPasswords = map[string]bool{
	"POST /api/v1/setup":    true,
	"POST /api/v1/sessions": true,
	"POST /api/v1/users":    true,
}

// signsIn reports whether the route is sign-in or sign-out, which conflict
// with nothing.
func signsIn(rt route) bool {
	return strings.HasPrefix(rt.path, "/api/v1/sessions")
}

// errorStatuses are the error answers a route can really give, from what
// the route does.
func errorStatuses(rt route) []int {
	changes := rt.method != http.MethodGet
	hasPath := pathParam.MatchString(rt.path)
	// A malformed query string (every route) or body, a bad ?limit/?cursor.
	out := []int{http.StatusBadRequest}
	// No token, a bad one; or, signing in, a wrong password.
	if !rt.public || signsIn(rt) || rt.signed {
		out = append(out, http.StatusUnauthorized)
	}
	// The scope, a role in the organisation, or a command the domain
	// refuses to this person (approving one's own change set).
	if !rt.public && rt.scope != "" {
		out = append(out, http.StatusForbidden)
	}
	if hasPath {
		out = append(out, http.StatusNotFound)
	}
	// A command that clashes with the state (a name taken, a cluster still
	// in use, setup already done), or an Idempotency-Key still in flight.
	if changes && !signsIn(rt) {
		out = append(out, http.StatusConflict)
	}
	if rt.creating && !rt.public {
		// A replay whose response cannot be shown again (its secret was
		// revoked since, or it can no longer be opened).
		out = append(out, http.StatusGone)
	}
	if honoursIfMatch(rt) {
		out = append(out, http.StatusPreconditionFailed)
	}
	if rt.request != nil {
		out = append(out, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType)
	}
	if rt.signed {
		out = append(out, http.StatusRequestEntityTooLarge)
	}
	// Path segments and query values are checked on every route (see the
	// input rules); bodies are validated field by field.
	out = append(out, http.StatusUnprocessableEntity)
	if hashesPasswords[rt.method+" "+rt.path] {
		out = append(out, http.StatusTooManyRequests)
	}
	// 503: the database is unreachable; for a change, also
	// projections_behind (recorded, but not readable yet).
	return append(out, http.StatusInternalServerError, http.StatusServiceUnavailable)
}

// errorDescription says when a route gives an error status.
func errorDescription(rt route, status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request: a malformed query string or body, an unknown field, a bad limit or cursor"
	case http.StatusUnauthorized:
		if rt.public {
			return "unauthorized: a wrong e-mail address or password"
		}
		return "unauthorized: no token, or one that is unknown, expired or revoked"
	case http.StatusForbidden:
		return "forbidden: the token lacks the scope, the caller's role does not allow it, or the change is not the caller's to make"
	case http.StatusNotFound:
		return "not_found: a name or id in the path names nothing the caller can see"
	case http.StatusConflict:
		return "conflict: the change clashes with the current state (a name taken, still in use, already done), or a request with the same Idempotency-Key is in flight"
	case http.StatusGone:
		return "response_gone / secret_revoked: a replayed request whose response cannot be shown again"
	case http.StatusPreconditionFailed:
		return "precondition_failed: If-Match names a version of the resource that is no longer current"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large: the body is over 1 MiB"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type: the body is not application/json"
	case http.StatusUnprocessableEntity:
		return "validation_failed (naming the field), image_unresolvable, idempotency_key_reused"
	case http.StatusTooManyRequests:
		return "rate_limited: too many failed sign-ins, or too many passwords being checked at once (see Retry-After)"
	case http.StatusInternalServerError:
		return "internal: an unexpected failure (the request id is in the server's log)"
	case http.StatusServiceUnavailable:
		if rt.method != http.MethodGet {
			return "database_unavailable, or projections_behind: the change was recorded but reads do not show it yet"
		}
		return "database_unavailable"
	}
	return http.StatusText(status)
}

// --- Applying them ---------------------------------------------------------

// preconditions runs after the path is resolved and before the handler: it
// reads ?limit= and ?cursor= of a list, If-Match of a change, and the
// version of a read resource. A read takes the version first and then reads
// the resource again, so that the body is at least as new as its ETag.
func (a *API) preconditions(r *http.Request, rt route, c *call) error {
	if isList(rt) {
		p, err := parsePage(r)
		if err != nil {
			return err
		}
		c.page = p
	}
	streamFor := streamOf(rt)
	if streamFor == nil {
		return nil
	}
	stream, err := streamFor(a, r, c)
	if err != nil {
		return err
	}
	c.stream = stream
	if honoursIfMatch(rt) {
		v, err := ifMatch(r, stream)
		if err != nil {
			return err
		}
		c.ifVersion = v
		return nil
	}
	if rt.method != http.MethodGet {
		return nil
	}
	v, err := a.streamVersion(r.Context(), stream)
	if err != nil {
		return err
	}
	if v > 0 {
		c.etag = etag(stream, v)
	}
	return a.resolve(r, rt, c)
}

// decorate adds what a successful answer carries besides its body: the
// page of a list, Location of a created resource, ETag of a resource read
// or changed.
func (a *API) decorate(w http.ResponseWriter, r *http.Request, rt route, c *call, status int, body any) (any, error) {
	if isList(rt) && status == http.StatusOK && body != nil && reflect.TypeOf(body).Kind() == reflect.Slice {
		p := c.page
		if c.keyset {
			// The handler read the page (and one more row) after the cursor.
			p.after = nil
		}
		body = paginate(body, p)
	}
	if status == http.StatusCreated {
		if loc := location(r, body); loc != "" {
			w.Header().Set("Location", loc)
		}
	}
	if status != http.StatusOK {
		return body, nil
	}
	tag := c.etag
	if stream := c.stream; stream != "" && rt.method != http.MethodGet {
		v := c.version
		if v == 0 {
			var err error
			if v, err = a.streamVersion(r.Context(), stream); err != nil {
				return nil, err
			}
		}
		if v > 0 {
			tag = etag(stream, v)
		}
	}
	if tag != "" {
		w.Header().Set("ETag", tag)
	}
	return body, nil
}
