package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nebulactrl/nebulactrl/api"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
)

// maxAnswer bounds an API answer a tool returns (the page limits keep
// answers far below it).
const maxAnswer = 8 << 20

// call is a tool call: the tool's route of the API, called in process
// through the API's handler as the token the MCP request carried, marked as
// coming through MCP. The API authenticates the token again and decides
// everything (scopes, roles, change sets, four eyes, validation).
func (s *Server) call(ctx context.Context, req *mcp.CallToolRequest, t boundTool, in any) *mcp.CallToolResult {
	path, query, body, err := requestOf(t.path, in)
	if err != nil {
		return toolError(err.Error(), map[string]any{"error": map[string]string{"code": "invalid_arguments", "message": err.Error()}})
	}
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return toolError(err.Error(), nil)
		}
		rd = bytes.NewReader(b)
	}
	r, err := http.NewRequestWithContext(httpapi.WithVia(ctx, Via), t.method, target, rd)
	if err != nil {
		return toolError("the arguments make no request: "+err.Error(), nil)
	}
	if req.Extra != nil && req.Extra.Header != nil {
		r.Header.Set("Authorization", req.Extra.Header.Get("Authorization"))
		if id := req.Extra.Header.Get("X-Request-Id"); id != "" {
			r.Header.Set("X-Request-Id", id)
		}
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		// Where the MCP request came from (the API's throttles count it).
		r.RemoteAddr, _ = req.Extra.TokenInfo.Extra[extraRemote].(string)
		r.Host, _ = req.Extra.TokenInfo.Extra[extraHost].(string)
	}
	r.Header.Set("Accept", "application/json")
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	rec := &recorder{header: http.Header{}}
	s.api.ServeHTTP(rec, r)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.over {
		return toolError(fmt.Sprintf("the answer of %s %s is over %d MiB: ask for less (limit)", t.method, path, maxAnswer>>20), nil)
	}
	return result(t, path, rec.status, rec.body.Bytes())
}

// result turns the API's answer into the tool's: its JSON as text and as
// structured content ({"status", "body"}); an error answer is a tool error
// with the API's code and message; a change set opened is said first.
func result(t boundTool, path string, status int, body []byte) *mcp.CallToolResult {
	var payload any
	if len(bytes.TrimSpace(body)) > 0 && json.Valid(body) {
		payload = json.RawMessage(body)
	}
	// Anything but a success is the tool's failure: a redirect (which no
	// route of the API answers by design) did not do what was asked.
	if status >= 300 {
		var e api.Error
		_ = json.Unmarshal(body, &e)
		code, msg := e.Error.Code, e.Error.Message
		if code == "" {
			code, msg = strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_"), strings.TrimSpace(string(body))
		}
		text := fmt.Sprintf("%s %s refused: %d %s: %s", t.method, path, status, code, msg)
		return toolError(text, map[string]any{"status": status, "error": map[string]string{"code": code, "message": msg}})
	}
	structured := map[string]any{"status": status, "body": payload}
	var content []mcp.Content
	if id, ok := changeSetOpened(status, body); ok {
		structured["changeSetOpened"] = id
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf(
			"A change set was opened (id %s): the environment is protected, so nothing changed yet. The change applies once another member approves it (approve_change_set); you cannot approve your own.", id)})
	}
	text := string(body)
	if payload == nil {
		text = fmt.Sprintf("%s %s: %d %s", t.method, path, status, http.StatusText(status))
	}
	content = append(content, &mcp.TextContent{Text: text})
	return &mcp.CallToolResult{Content: content, StructuredContent: structured}
}

// changeSetOpened finds the change set a change in a protected environment
// opened: the answer's changeSet, or the answer itself when a route answers
// 202 with a change set.
func changeSetOpened(status int, body []byte) (string, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return "", false
	}
	if raw, ok := m["changeSet"]; ok {
		var cs api.ChangeSet
		if json.Unmarshal(raw, &cs) == nil && cs.ID != "" {
			return cs.ID, true
		}
	}
	if _, ok := m["changes"]; ok && status == http.StatusAccepted {
		var cs api.ChangeSet
		if json.Unmarshal(body, &cs) == nil && cs.ID != "" {
			return cs.ID, true
		}
	}
	return "", false
}

func toolError(text string, structured map[string]any) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if structured != nil {
		res.StructuredContent = structured
	}
	return res
}

// requestOf fills the route's path from the arguments' path fields (each
// escaped as one segment), and collects the query parameters and body.
func requestOf(template string, in any) (string, url.Values, map[string]any, error) {
	v := reflect.ValueOf(in)
	path := template
	query := url.Values{}
	var body map[string]any
	var problem error
	eachValue(v, func(sf reflect.StructField, fv reflect.Value) {
		if problem != nil {
			return
		}
		if p, ok := sf.Tag.Lookup("path"); ok {
			s := fv.String()
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if s == "" {
				problem = fmt.Errorf("%s must not be empty", name)
				return
			}
			// "." and ".." survive escaping as one segment and would name
			// another route (the API's mux redirects to the cleaned path).
			if s == "." || s == ".." {
				problem = fmt.Errorf("%s must be a name, not %q", name, s)
				return
			}
			path = strings.Replace(path, "{"+p+"}", url.PathEscape(s), 1)
		}
		if q, ok := sf.Tag.Lookup("query"); ok {
			name, opt, _ := strings.Cut(q, ",")
			if opt == "omitempty" && fv.IsZero() {
				return
			}
			switch fv.Kind() {
			case reflect.Int:
				query.Set(name, strconv.FormatInt(fv.Int(), 10))
			default:
				query.Set(name, fv.String())
			}
		}
		if b, ok := sf.Tag.Lookup("body"); ok {
			name, opt, _ := strings.Cut(b, ",")
			if opt == "omitempty" && fv.IsZero() {
				return
			}
			if body == nil {
				body = map[string]any{}
			}
			body[name] = fv.Interface()
		}
	})
	return path, query, body, problem
}

func eachValue(v reflect.Value, fn func(reflect.StructField, reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			eachValue(v.Field(i), fn)
			continue
		}
		fn(sf, v.Field(i))
	}
}

// recorder receives the API's answer in process.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	over   bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) > maxAnswer {
		r.over = true
		return 0, fmt.Errorf("mcpserver: the answer is over %d bytes", maxAnswer)
	}
	return r.body.Write(b)
}
