package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"
	"github.com/nebulactrl/nebulactrl/api"
)

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

var paramDocs = map[string]string{
	"org": "organisation name", "project": "project name", "env": "environment name", "service": "service name",
	"cluster": "cluster name", "user": "user id", "token": "token id", "name": "variable name", "host": "host name",
	"changeset": "change set id", "server": "server id", "deployment": "deployment id, or latest for the newest",
	"build": "build id", "hook": "the project's id (the webhook URL names it)",
}

// OpenAPI builds the OpenAPI 3 document from the route table, so that every
// route is documented and every documented route exists.
func (a *API) OpenAPI() (*openapi3.T, error) {
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info: &openapi3.Info{Title: "NebulaCtrl API", Version: a.cfg.Version,
			License:     &openapi3.License{Name: License, URL: LicenseURL},
			Description: "The NebulaCtrl control plane. Bearer tokens (Authorization: Bearer nbl_...) carry scopes; errors are {\"error\": {\"code\", \"message\"}}. " + inputRules},
		// The document is served by the control plane it describes: its
		// API is at the same origin.
		Servers: openapi3.Servers{{URL: "/", Description: "this control plane (the origin that serves this document)"}},
		Paths:   openapi3.NewPaths(),
		Components: &openapi3.Components{
			Schemas: openapi3.Schemas{},
			SecuritySchemes: openapi3.SecuritySchemes{
				"bearer": &openapi3.SecuritySchemeRef{Value: openapi3.NewJWTSecurityScheme().WithBearerFormat("nbl token")},
			},
		},
	}
	gen := openapi3gen.NewGenerator(openapi3gen.UseAllExportedFields(), openapi3gen.CreateComponentSchemas(openapi3gen.ExportComponentSchemasOptions{ExportComponentSchemas: true, ExportTopLevelSchema: true}),
		openapi3gen.SchemaCustomizer(documentInputRule))
	schema := func(v any) (*openapi3.SchemaRef, error) {
		return gen.NewSchemaRefForValue(v, doc.Components.Schemas)
	}
	errRef, err := schema(api.Error{})
	if err != nil {
		return nil, err
	}
	for _, rt := range a.routes {
		op := openapi3.NewOperation()
		op.Summary = rt.summary
		op.Tags = []string{rt.tag}
		op.OperationID = operationID(rt)
		if !rt.public {
			op.Security = &openapi3.SecurityRequirements{{"bearer": {}}}
			if rt.scope != "" {
				op.Description = "Needs the scope " + string(rt.scope) + "."
			}
		} else {
			op.Security = &openapi3.SecurityRequirements{}
		}
		for _, m := range pathParam.FindAllStringSubmatch(rt.path, -1) {
			op.AddParameter(openapi3.NewPathParameter(m[1]).WithSchema(openapi3.NewStringSchema()).WithDescription(paramDocs[m[1]]))
		}
		for _, q := range queryParams(rt) {
			s := openapi3.NewStringSchema()
			if q.typ == "integer" {
				s = openapi3.NewIntegerSchema()
			}
			op.AddParameter(openapi3.NewQueryParameter(q.name).WithSchema(s).WithDescription(q.description))
		}
		if honoursIfMatch(rt) {
			op.AddParameter(openapi3.NewHeaderParameter("If-Match").WithSchema(openapi3.NewStringSchema()).
				WithDescription("the ETag of the resource as the caller read it: the change is made only while the resource is still at that version (412 otherwise); without it, the change is made whatever the version"))
		}
		if rt.creating && !rt.public {
			op.AddParameter(openapi3.NewHeaderParameter("Idempotency-Key").WithSchema(openapi3.NewStringSchema()).
				WithDescription("a retried request with the same key and body gets the first response; another body gets 422"))
		}
		if rt.signed {
			op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).
				WithDescription("the forge's JSON payload, as it signed it").WithJSONSchema(openapi3.NewObjectSchema())}
		}
		if rt.request != nil {
			ref, err := schema(rt.request)
			if err != nil {
				return nil, fmt.Errorf("schema of %s %s request: %w", rt.method, rt.path, err)
			}
			op.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).WithJSONSchemaRef(ref)}
		}
		addResponse := func(status int, body any) error {
			resp := openapi3.NewResponse().WithDescription(http.StatusText(status))
			if body != nil {
				var ref *openapi3.SchemaRef
				var err error
				if isList(rt) && status == http.StatusOK {
					ref, err = pageRef(body, doc.Components.Schemas, schema)
				} else {
					ref, err = schema(body)
				}
				if err != nil {
					return fmt.Errorf("schema of %s %s response: %w", rt.method, rt.path, err)
				}
				resp.WithJSONSchemaRef(ref)
			}
			if status == http.StatusCreated && rt.response != nil {
				resp.Headers = openapi3.Headers{"Location": headerRef("the path of the created resource", "uri-reference")}
			}
			if status == http.StatusOK && streamOf(rt) != nil {
				resp.Headers = openapi3.Headers{"ETag": headerRef("the resource's version (its event stream's); send it as If-Match to change it only if it is still current", "")}
			}
			op.AddResponse(status, resp)
			return nil
		}
		if rt.events != nil {
			if err := streamResponse(op, rt); err != nil {
				return nil, err
			}
		} else if err := addResponse(rt.status, rt.response); err != nil {
			return nil, err
		}
		if rt.accepted != nil {
			if err := addResponse(http.StatusAccepted, rt.accepted); err != nil {
				return nil, err
			}
		}
		for _, st := range errorStatuses(rt) {
			op.AddResponse(st, openapi3.NewResponse().WithDescription(errorDescription(rt, st)).WithJSONSchemaRef(errRef))
		}
		doc.AddOperation(rt.path, rt.method, op)
	}
	nullable := map[string][]string{}
	seen := map[reflect.Type]bool{}
	for _, rt := range a.routes {
		for _, v := range []any{rt.request, rt.response, rt.accepted} {
			if v != nil {
				nullableFields(reflect.TypeOf(v), nullable, seen)
			}
		}
	}
	for name, props := range nullable {
		c, ok := doc.Components.Schemas[name]
		if !ok || c.Value == nil {
			continue
		}
		for _, p := range props {
			if ref := c.Value.Properties[p]; ref != nil && ref.Ref != "" {
				// A reference cannot be null itself (OpenAPI 3.0): allOf it.
				c.Value.Properties[p] = &openapi3.SchemaRef{Value: &openapi3.Schema{Type: &openapi3.Types{openapi3.TypeObject}, AllOf: openapi3.SchemaRefs{{Ref: ref.Ref}}, Nullable: true}}
			}
		}
	}
	return doc, nil
}

// nullableFields finds the struct fields tagged nullable:"true" in t and
// the types it holds, by the schema name of their struct and their JSON
// name.
func nullableFields(t reflect.Type, out map[string][]string, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	for f := range t.Fields() {
		if f.Tag.Get("nullable") == "true" {
			out[t.Name()] = append(out[t.Name()], strings.Split(f.Tag.Get("json"), ",")[0])
		}
		nullableFields(f.Type, out, seen)
	}
}

// License is the license the document names: NebulaCtrl's source carries
// no license file, so none is granted beyond the owner's; LicenseURL is
// the source repository (the module's path).
const (
	License    = "Proprietary: all rights reserved by the NebulaCtrl authors"
	LicenseURL = "https://github.com/nebulactrl/nebulactrl"
)

// inputRules is what the document says of every string a request carries.
const inputRules = "Request bodies are application/json (other media types: 415). Every string in a body, a path segment or a query parameter " +
	"is valid UTF-8 without U+0000 and at most 1024 bytes unless its schema gives another maxLength (path segments: 256); " +
	"names, e-mail addresses, hosts, images and every path or query parameter hold no control characters and no bidirectional " +
	"formatting characters (U+202A-U+202E, U+2066-U+2069); free text (a reason, a command's arguments) may hold line breaks and tabs; " +
	"passwords and variable values may hold anything but U+0000. Refusals are 422 validation_failed naming the field " +
	"(variables[0].value); malformed JSON, unknown fields, wrong types and a key given twice are 400 invalid_request."

// documentInputRule shows a string field's bound as its maxLength.
func documentInputRule(_ string, t reflect.Type, tag reflect.StructTag, schema *openapi3.Schema) error {
	// A field tagged nullable:"true" is sent as null when it has no value.
	if tag.Get("nullable") == "true" {
		schema.Nullable = true
	}
	rule, ok := tag.Lookup("input")
	if !ok || t.Kind() != reflect.String {
		return nil
	}
	schema.MaxLength = openapi3.Uint64Ptr(uint64(parseRule(rule).max))
	return nil
}

// streamResponse documents a stream: Last-Event-ID to resume, a 200 answer
// of text/event-stream whose events are listed (name, id, data schema) in
// the description and, for programs, in the media type's x-events
// extension: {"<event name>": {"schema": "<type name>", "description": "...",
// "payload": <the data's JSON schema, inline>}}. The payload schemas are
// inline, not components: nothing in the document's own vocabulary refers to
// the events' data (the body is text), and a component only an extension
// names is an unused component.
func streamResponse(op *openapi3.Operation, rt route) error {
	op.AddParameter(openapi3.NewHeaderParameter("Last-Event-ID").WithSchema(openapi3.NewIntegerSchema()).
		WithDescription("the id of the last event received: the stream resumes after it"))
	op.AddParameter(openapi3.NewQueryParameter("lastEventId").WithSchema(openapi3.NewIntegerSchema()).
		WithDescription("the same as Last-Event-ID, for clients that cannot set headers"))
	desc := []string{"A stream of server-sent events (" + api.StreamMediaType + "), one JSON object per data line. Comments (lines starting with ':') keep it alive every 15 s. Events:"}
	events := map[string]any{}
	for _, e := range rt.events {
		ref, err := openapi3gen.NewSchemaRefForValue(e.payload, nil, openapi3gen.UseAllExportedFields(), openapi3gen.SchemaCustomizer(documentInputRule))
		if err != nil {
			return fmt.Errorf("schema of %s %s event %s: %w", rt.method, rt.path, e.name, err)
		}
		name := reflect.TypeOf(e.payload).Name()
		desc = append(desc, fmt.Sprintf("- `%s` (%s): data is %s", e.name, e.doc, name))
		events[e.name] = map[string]any{"schema": name, "description": e.doc, "payload": ref.Value}
	}
	mt := openapi3.NewMediaType().WithSchema(openapi3.NewStringSchema().WithFormat("event-stream"))
	mt.Extensions = map[string]any{"x-events": events}
	resp := openapi3.NewResponse().WithDescription(strings.Join(desc, "\n")).WithContent(openapi3.Content{api.StreamMediaType: mt})
	op.AddResponse(http.StatusOK, resp)
	return nil
}

func operationID(rt route) string {
	parts := []string{strings.ToLower(rt.method)}
	for _, seg := range strings.Split(strings.TrimPrefix(rt.path, "/api/v1/"), "/") {
		if m := pathParam.FindStringSubmatch(seg); m != nil {
			parts = append(parts, "by"+strings.ToUpper(m[1][:1])+m[1][1:])
			continue
		}
		seg = strings.ReplaceAll(seg, "-", "")
		parts = append(parts, strings.ToUpper(seg[:1])+seg[1:])
	}
	return strings.Join(parts, "")
}

// openapiDoc is the document, built once per API.
type openapiDoc struct {
	once sync.Once
	body []byte
	err  error
}

func (a *API) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	a.doc.once.Do(func() {
		doc, err := a.OpenAPI()
		if err == nil {
			a.doc.body, err = json.Marshal(doc)
		}
		a.doc.err = err
	})
	if a.doc.err != nil {
		a.writeError(w, r, a.doc.err)
		return
	}
	body := a.doc.body
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// headerRef documents a response header.
func headerRef(description, format string) *openapi3.HeaderRef {
	s := openapi3.NewStringSchema()
	if format != "" {
		s.Format = format
	}
	return &openapi3.HeaderRef{Value: &openapi3.Header{Parameter: openapi3.Parameter{Description: description, Schema: s.NewRef()}}}
}

// pageRef is the schema of a page of list, as the component <Elem>Page.
func pageRef(list any, schemas openapi3.Schemas, schema func(any) (*openapi3.SchemaRef, error)) (*openapi3.SchemaRef, error) {
	name := pageSchemaName(list)
	ref := "#/components/schemas/" + name
	if _, ok := schemas[name]; ok {
		return openapi3.NewSchemaRef(ref, nil), nil
	}
	items, err := schema(list)
	if err != nil {
		return nil, err
	}
	page := openapi3.NewObjectSchema().
		WithProperty("next", openapi3.NewStringSchema()).
		WithPropertyRef("items", items)
	page.Required = []string{"items"}
	page.Description = "A page of the list; next, absent on the last page, is the cursor of the following one (?cursor=)."
	page.Properties["next"].Value.Description = "the cursor of the next page, absent on the last"
	schemas[name] = page.NewRef()
	return openapi3.NewSchemaRef(ref, page), nil
}

// queryParams are the route's query parameters, with limit and cursor for
// the lists.
func queryParams(rt route) []param {
	out := []param{}
	seen := map[string]bool{}
	if isList(rt) {
		out = append(out,
			param{"limit", fmt.Sprintf("items per page (1-%d, default %d)", maxPageSize, defaultPageSize), "integer"},
			param{"cursor", "the next of the previous page", "string"})
		seen["limit"], seen["cursor"] = true, true
	}
	for _, q := range rt.query {
		if !seen[q.name] {
			out = append(out, q)
		}
	}
	return out
}
