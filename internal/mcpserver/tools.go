package mcpserver

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/nebulactrl/nebulactrl/domain"
	"github.com/nebulactrl/nebulactrl/internal/httpapi"
)

// The tools' arguments. A field tagged path:"x" fills the route's {x}, one
// tagged query:"x" its query parameter x, one tagged body:"x" the member x of
// the JSON body (",omitempty": left out when zero). The JSON Schema of each
// tool's input is inferred from its type: a field without omitempty is
// required, and no other member is accepted.

type orgArgs struct {
	Org string `json:"org" path:"org" jsonschema:"the organisation's name (list_organisations)"`
}

type projectArgs struct {
	orgArgs
	Project string `json:"project" path:"project" jsonschema:"the project's name (list_projects)"`
}

type envArgs struct {
	projectArgs
	Environment string `json:"environment" path:"env" jsonschema:"the environment's name, such as production or staging (list_environments)"`
}

type targetArgs struct {
	envArgs
	Service string `json:"service" path:"service" jsonschema:"the service's name (list_services)"`
}

type pageArgs struct {
	Limit  int    `json:"limit,omitempty" query:"limit,omitempty" jsonschema:"at most this many items"`
	Cursor string `json:"cursor,omitempty" query:"cursor,omitempty" jsonschema:"the next of the previous page, to read the page after it"`
}

type noArgs struct{}

type listProjectsArgs struct {
	orgArgs
	pageArgs
}

type listInProjectArgs struct {
	projectArgs
	pageArgs
}

type stateArgs struct {
	envArgs
	Revision int    `json:"revision,omitempty" query:"revision,omitempty" jsonschema:"the revision number (default: the latest)"`
	At       string `json:"at,omitempty" query:"at,omitempty" jsonschema:"the revision in force at this RFC 3339 time, such as 2026-05-01T12:00:00Z (not with revision)"`
}

type deploymentsArgs struct {
	targetArgs
	pageArgs
}

type deploymentArgs struct {
	targetArgs
	Deployment string `json:"deployment" path:"deployment" jsonschema:"the deployment's id (list_deployments)"`
}

type logsArgs struct {
	targetArgs
	Cursor string `json:"cursor,omitempty" query:"cursor,omitempty" jsonschema:"the next of the previous page: only lines after it"`
	Limit  int    `json:"limit,omitempty" query:"limit,omitempty" jsonschema:"at most this many lines (default 200, at most 5000)"`
}

type buildsArgs struct {
	projectArgs
	Service string `json:"service,omitempty" query:"service,omitempty" jsonschema:"only this service's builds"`
	pageArgs
}

type buildLogsArgs struct {
	orgArgs
	Build  string `json:"build" path:"build" jsonschema:"the build's id (list_builds)"`
	Cursor string `json:"cursor,omitempty" query:"cursor,omitempty" jsonschema:"the next of the previous page: only lines after it"`
	Limit  int    `json:"limit,omitempty" query:"limit,omitempty" jsonschema:"at most this many lines"`
}

type auditArgs struct {
	orgArgs
	Action string `json:"action,omitempty" query:"action,omitempty" jsonschema:"only this action, or a prefix ending in .* (deployment.*)"`
	Actor  string `json:"actor,omitempty" query:"actor,omitempty" jsonschema:"only this actor's entries (its id)"`
	Target string `json:"target,omitempty" query:"target,omitempty" jsonschema:"only targets whose name starts with this (acme/shop/production)"`
	Since  string `json:"since,omitempty" query:"since,omitempty" jsonschema:"only entries at or after this RFC 3339 time"`
	Until  string `json:"until,omitempty" query:"until,omitempty" jsonschema:"only entries before this RFC 3339 time"`
	Order  string `json:"order,omitempty" query:"order,omitempty" jsonschema:"oldest (the default) or newest first"`
	Cursor string `json:"cursor,omitempty" query:"cursor,omitempty" jsonschema:"the next of the previous page"`
	Limit  int    `json:"limit,omitempty" query:"limit,omitempty" jsonschema:"entries per page (1-1000)"`
}

type variable struct {
	Name   string `json:"name" jsonschema:"the variable's name (letters, digits and underscores)"`
	Value  string `json:"value" jsonschema:"its value, or a reference such as ${{ db.URL }}"`
	Secret bool   `json:"secret,omitempty" jsonschema:"store the value sealed; it is never shown again"`
}

type setVariablesArgs struct {
	targetArgs
	Variables []variable `json:"variables" body:"variables" jsonschema:"the variables to set (others are kept)"`
}

type setEnvVariablesArgs struct {
	envArgs
	Variables []variable `json:"variables" body:"variables" jsonschema:"the variables to set (others are kept)"`
}

type unsetVariableArgs struct {
	targetArgs
	Name string `json:"name" path:"name" jsonschema:"the variable's name"`
}

type unsetEnvVariableArgs struct {
	envArgs
	Name string `json:"name" path:"name" jsonschema:"the variable's name"`
}

type deployArgs struct {
	targetArgs
	Image  string `json:"image,omitempty" body:"image,omitempty" jsonschema:"the image to deploy (registry/repository:tag or @digest; pinned to its digest); for a Git service leave it out"`
	Commit string `json:"commit,omitempty" body:"commit,omitempty" jsonschema:"for a Git service: build this commit (default: the tracked branch's head)"`
}

type rollbackArgs struct {
	targetArgs
	Release int `json:"release" body:"release" jsonschema:"the number of the earlier release to deploy again (list_deployments)"`
}

type scaleArgs struct {
	targetArgs
	Process  string `json:"process,omitempty" body:"process,omitempty" jsonschema:"the process to scale (default: the service's only process)"`
	Replicas int    `json:"replicas" body:"replicas" jsonschema:"how many copies should run (0 stops it)"`
}

type changeSetsArgs struct {
	envArgs
	Status string `json:"status,omitempty" query:"status,omitempty" jsonschema:"only change sets with this status: open, approved, rejected or expired"`
}

type changeSetArgs struct {
	envArgs
	ChangeSet string `json:"changeSet" path:"changeset" jsonschema:"the change set's id"`
}

type approveArgs struct {
	changeSetArgs
	Version int    `json:"version" body:"version" jsonschema:"the change set's version you read (get_change_set): approving fails if it changed since"`
	Reason  string `json:"reason,omitempty" body:"reason,omitempty" jsonschema:"why, for the audit log"`
}

type rejectArgs struct {
	changeSetArgs
	Reason string `json:"reason,omitempty" body:"reason,omitempty" jsonschema:"why, for the audit log"`
}

// effect is what a tool does to the control plane, for its annotations.
type effect int

const (
	// reads change nothing.
	reads effect = iota
	// replaces changes or removes what is there (what runs, a value).
	replaces
)

// toolDef is one row of the tool table.
type toolDef struct {
	name, title, description string
	// method and path name the API route the tool calls, as in the route
	// table: its scope is the tool's.
	method, path string
	effect       effect
	// idempotent: calling again with the same arguments changes nothing more.
	idempotent bool
	// in is the type of the arguments; schema is inferred from it.
	in       reflect.Type
	schema   *jsonschema.Schema
	register func(srv *mcp.Server, tool *mcp.Tool, s *Server, t boundTool)
}

// boundTool is a tool with its route's scope.
type boundTool struct {
	toolDef
	scope domain.Scope
}

func tool[In any](name, title, method, path string, e effect, idempotent bool, description string) toolDef {
	return toolDef{name: name, title: title, description: description, method: method, path: path, effect: e, idempotent: idempotent,
		in: reflect.TypeFor[In](), schema: schemaOf[In](),
		register: func(srv *mcp.Server, tool *mcp.Tool, s *Server, t boundTool) {
			mcp.AddTool(srv, tool, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
				return s.call(ctx, req, t, in), nil, nil
			})
		}}
}

const (
	orgs    = "/api/v1/orgs"
	org     = orgs + "/{org}"
	project = org + "/projects/{project}"
	env     = project + "/environments/{env}"
	target  = env + "/services/{service}"
)

// toolTable is every tool. Each names the route it calls; what it may do is
// what that route may do.
func toolTable() []toolDef {
	return []toolDef{
		tool[noArgs]("list_organisations", "List organisations", "GET", orgs, reads, true,
			"The organisations the token's user belongs to, with their names (the org argument of the other tools)."),
		tool[listProjectsArgs]("list_projects", "List projects", "GET", org+"/projects", reads, true,
			"The projects of an organisation."),
		tool[listInProjectArgs]("list_environments", "List environments", "GET", project+"/environments", reads, true,
			"The environments of a project (production, staging, ...): the cluster each runs on and whether it is protected (changes there wait for approval)."),
		tool[listInProjectArgs]("list_services", "List services", "GET", project+"/services", reads, true,
			"The services of a project: their source (an image or a Git branch) and processes."),
		tool[stateArgs]("get_environment_state", "Get an environment's desired state", "GET", env+"/state", reads, true,
			"The desired state of an environment: the latest revision, revision N (revision), or the one in force at a time (at). Secrets appear sealed, never in clear."),
		tool[deploymentsArgs]("list_deployments", "List a service's deployments", "GET", target+"/deployments", reads, true,
			"A service's deployments in an environment, newest first, with their release, rollout stage, stall flag and what blocks them."),
		tool[deploymentArgs]("get_deployment", "Get a deployment", "GET", target+"/deployments/{deployment}", reads, true,
			"One deployment with every stage of its rollout, in order."),
		tool[logsArgs]("get_container_logs", "Get a service's container logs", "GET", target+"/logs", reads, true,
			"A service's container log lines in an environment (kept 7 days), oldest first; follow with the cursor the answer gives (next)."),
		tool[buildsArgs]("list_builds", "List builds", "GET", project+"/builds", reads, true,
			"A project's builds from Git, newest first (ids for get_build_logs)."),
		tool[buildLogsArgs]("get_build_logs", "Get a build's logs", "GET", org+"/builds/{build}/logs", reads, true,
			"A build's output (kept 7 days); follow with the cursor the answer gives (next)."),
		tool[auditArgs]("get_audit_log", "Read the audit log", "GET", org+"/audit", reads, true,
			"The organisation's audit log: who did what to which target, when, and how (via mcp for these tools); filters and paging."),
		tool[targetArgs]("list_variables", "List a service's variables", "GET", target+"/variables", reads, true,
			"A service's variables in an environment, environment-wide ones merged. Secret values are never returned."),
		tool[changeSetsArgs]("list_change_sets", "List change sets", "GET", env+"/changesets", reads, true,
			"The change sets of a protected environment: changes waiting for approval, and those decided."),
		tool[changeSetArgs]("get_change_set", "Get a change set", "GET", env+"/changesets/{changeset}", reads, true,
			"A change set with what each change changes (present value against the new one; secrets masked) and its version, which approve_change_set needs."),

		tool[deployArgs]("deploy", "Deploy", "POST", target+"/deployments", replaces, false,
			"Deploy an image (pinned to its digest) to a service in an environment as a new release, replacing the one that runs; a Git service builds its tracked branch's head, or commit. In a protected environment this opens a change set for approval instead."),
		tool[rollbackArgs]("rollback", "Roll back", "POST", target+"/rollback", replaces, false,
			"Deploy an earlier release of a service again (its exact image and configuration); automatic deploys of the service pause. In a protected environment this opens a change set for approval instead."),
		tool[setVariablesArgs]("set_variables", "Set a service's variables", "PUT", target+"/variables", replaces, true,
			"Set variables of a service in an environment (replacing the values of those named; others are kept); each affected deployed service gets a new release. Secret values are never returned. In a protected environment this opens a change set for approval instead."),
		tool[unsetVariableArgs]("unset_variable", "Unset a service's variable", "DELETE", target+"/variables/{name}", replaces, true,
			"Remove a variable of a service in an environment; the service gets a new release. In a protected environment this opens a change set for approval instead."),
		tool[setEnvVariablesArgs]("set_environment_variables", "Set environment-wide variables", "PUT", env+"/variables", replaces, true,
			"Set variables every service of an environment sees (replacing the values of those named; others are kept). Secret values are never returned. In a protected environment this opens a change set for approval instead."),
		tool[unsetEnvVariableArgs]("unset_environment_variable", "Unset an environment-wide variable", "DELETE", env+"/variables/{name}", replaces, true,
			"Remove an environment-wide variable. In a protected environment this opens a change set for approval instead."),
		tool[scaleArgs]("scale", "Scale a service", "PUT", target+"/replicas", replaces, true,
			"Set how many copies of a service's process run in an environment (a new release). In a protected environment this opens a change set for approval instead."),
		tool[approveArgs]("approve_change_set", "Approve a change set", "POST", env+"/changesets/{changeset}/approve", replaces, true,
			"Approve a change set and apply its changes, naming the version you read (get_change_set). Four eyes: a change set you opened (with any of your tokens) cannot be approved by you."),
		tool[rejectArgs]("reject_change_set", "Reject a change set", "POST", env+"/changesets/{changeset}/reject", replaces, true,
			"Reject a change set: none of its changes apply."),
	}
}

// neverOffered says why a route is never a tool, whatever the token: the
// instance's administration (instance:admin routes, settings, users,
// backups and restore, the whole instance's audit log), agent upgrades
// (replacing the binary of a root process is for people), and credentials
// (sessions, tokens, setup).
func neverOffered(method, path string, scope domain.Scope) (string, bool) {
	switch {
	case scope == domain.ScopeInstanceAdmin:
		return "an instance administrator's route", true
	case strings.HasPrefix(path, "/api/v1/instance"), strings.HasPrefix(path, "/api/v1/users"), path == "/api/v1/audit":
		return "instance administration", true
	case strings.Contains(path, "upgrade"):
		return "an agent upgrade", true
	case strings.Contains(path, "backup"), strings.Contains(path, "restore"):
		return "backups and restore", true
	case strings.HasPrefix(path, "/api/v1/tokens"), strings.HasPrefix(path, "/api/v1/sessions"), path == "/api/v1/setup":
		return "credentials", true
	}
	return "", false
}

// bind finds each tool's route in the API's route table (its scope is the
// tool's) and refuses a table that names a route that does not exist, an
// event stream, or one never offered.
func bind(defs []toolDef, routes []httpapi.RouteInfo) ([]boundTool, error) {
	byRoute := map[string]httpapi.RouteInfo{}
	for _, r := range routes {
		byRoute[r.Method+" "+r.Path] = r
	}
	names := map[string]bool{}
	out := make([]boundTool, 0, len(defs))
	for _, d := range defs {
		if names[d.name] {
			return nil, fmt.Errorf("mcpserver: two tools are named %s", d.name)
		}
		names[d.name] = true
		r, ok := byRoute[d.method+" "+d.path]
		if !ok {
			return nil, fmt.Errorf("mcpserver: tool %s names %s %s, which is no route of the API", d.name, d.method, d.path)
		}
		if why, never := neverOffered(r.Method, r.Path, r.Scope); never {
			return nil, fmt.Errorf("mcpserver: tool %s names %s %s: %s is never a tool", d.name, d.method, d.path, why)
		}
		if r.Public {
			return nil, fmt.Errorf("mcpserver: tool %s names %s %s, a public route", d.name, d.method, d.path)
		}
		if strings.HasSuffix(r.Path, "/events") {
			return nil, fmt.Errorf("mcpserver: tool %s names %s %s, an event stream", d.name, d.method, d.path)
		}
		if d.effect == reads && r.Method != "GET" {
			return nil, fmt.Errorf("mcpserver: tool %s reads, but %s is no GET", d.name, d.method)
		}
		if err := checkArgs(d, r); err != nil {
			return nil, err
		}
		out = append(out, boundTool{toolDef: d, scope: r.Scope})
	}
	return out, nil
}

// mcpTool is the tool as tools/list shows it.
func (t boundTool) mcpTool() *mcp.Tool {
	f := false
	ann := &mcp.ToolAnnotations{Title: t.title, ReadOnlyHint: t.effect == reads, IdempotentHint: t.idempotent, OpenWorldHint: &f}
	if t.effect != reads {
		tr := true
		ann.DestructiveHint = &tr
	}
	scope := string(t.scope)
	needs := "needs the scope " + scope
	if scope == "" {
		needs = "needs no scope"
	}
	return &mcp.Tool{
		Name: t.name, Title: t.title, Annotations: ann, InputSchema: t.schema,
		Description: fmt.Sprintf("%s (Calls %s %s; %s.)", t.description, t.method, t.path, needs),
		Meta:        mcp.Meta{MetaRoute: t.method + " " + t.path, MetaScope: scope},
	}
}

// The _meta members of each tool: the route it calls and the scope it needs.
const (
	MetaRoute = "nebulactrl/route"
	MetaScope = "nebulactrl/scope"
)

func (t boundTool) add(srv *mcp.Server, s *Server) { t.register(srv, t.mcpTool(), s, t) }

// schemaOf infers the input schema of In: path values must not be empty,
// lists not either.
func schemaOf[In any]() *jsonschema.Schema {
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: the schema of %T: %v", *new(In), err))
	}
	if s.Properties == nil {
		s.Properties = map[string]*jsonschema.Schema{}
	}
	one := 1
	eachField(reflect.TypeFor[In](), func(sf reflect.StructField) {
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		p := s.Properties[name]
		if p == nil {
			return
		}
		if _, ok := sf.Tag.Lookup("path"); ok {
			p.MinLength = &one
		}
		if sf.Type.Kind() == reflect.Slice {
			p.Type, p.Types, p.MinItems = "array", nil, &one
		}
	})
	return s
}

// eachField calls fn with every field of struct type t, those of embedded
// structs included.
func eachField(t reflect.Type, fn func(reflect.StructField)) {
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous && sf.Type.Kind() == reflect.Struct {
			eachField(sf.Type, fn)
			continue
		}
		fn(sf)
	}
}

// checkArgs checks that a tool's arguments fill every {x} of its path, and
// that the query parameters and body members they fill are the route's.
func checkArgs(d toolDef, r httpapi.RouteInfo) error {
	in := d.in
	filled := map[string]bool{}
	var err error
	eachField(in, func(sf reflect.StructField) {
		if p, ok := sf.Tag.Lookup("path"); ok {
			filled[p] = true
			if !strings.Contains(r.Path, "{"+p+"}") {
				err = fmt.Errorf("mcpserver: tool %s fills {%s}, which %s %s does not have", d.name, p, r.Method, r.Path)
			}
		}
		if q, ok := sf.Tag.Lookup("query"); ok {
			q, _, _ = strings.Cut(q, ",")
			if _, known := r.Query[q]; !known && !(r.List && (q == "limit" || q == "cursor")) {
				err = fmt.Errorf("mcpserver: tool %s sends the query parameter %s, which %s %s does not take", d.name, q, r.Method, r.Path)
			}
		}
		if _, ok := sf.Tag.Lookup("body"); ok && r.Request == nil {
			err = fmt.Errorf("mcpserver: tool %s sends a body, which %s %s does not take", d.name, r.Method, r.Path)
		}
	})
	if err != nil {
		return err
	}
	for _, seg := range strings.Split(r.Path, "/") {
		if strings.HasPrefix(seg, "{") && !filled[strings.Trim(seg, "{}")] {
			return fmt.Errorf("mcpserver: tool %s does not fill %s of %s %s", d.name, seg, r.Method, r.Path)
		}
	}
	return nil
}
